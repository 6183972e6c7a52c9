"""The pinned revision of each checkpoint: versions.json `checkpoints.<id>.revision` (the only place it is written).

The lock pins every package, and this pins the one input it did not: without it the weights under a locked image
move whenever the repository's `main` moves.
"""

from __future__ import annotations

from appliance.lock import CheckpointPin, load_lock

LOCK_ORIGIN = "lock:versions.json"
"""The origin `appliance config` shows for a revision the profile took from the lock."""


def checkpoint_pins() -> dict[str, CheckpointPin]:
    """Every checkpoint the lock pins (or says it cannot)."""
    return dict(load_lock().checkpoints)


def pin_for(checkpoint: str) -> CheckpointPin | None:
    """The lock's entry for `checkpoint`; None when the lock does not know it."""
    return load_lock().checkpoints.get(checkpoint)


def pinned_revision(checkpoint: str) -> str | None:
    pin = pin_for(checkpoint)
    return pin.revision if pin else None


def revision_for(checkpoint: str, override: str | None) -> str | None:
    """The revision a serve uses: the profile's `model.revision` when it sets one, else the lock's pin.
    The one place the two are resolved (render, fetch-model, locate, sync and bundle all ask here)."""
    return override or pinned_revision(checkpoint)
