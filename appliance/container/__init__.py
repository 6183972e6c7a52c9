"""Container build inputs and compose/bake files, all derived from versions.json and profiles/ (K16)."""
