"""Safe upgrades between engine channels: plan, qualify (side by side or in a window), promote, roll back."""
