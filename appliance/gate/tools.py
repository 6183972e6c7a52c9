"""How to install a gate tool that is missing: the version versions.json locks, or the `gate` extra that pins it."""

from __future__ import annotations

from appliance.errors import ApplianceError


def install_hint(name: str) -> str:
    """`pip install 'NAME==X'` (the version the lock gives it), and the extra that brings every gate tool."""
    from appliance import lockfile
    from appliance.lock import lock_document

    try:
        wanted = lockfile.gate_requirement(lock_document(), name)
    except ApplianceError:  # a broken lock is the gate's own error elsewhere; here the hint still names the tool
        wanted = name
    return f"pip install '{wanted}', or every gate tool at its locked version: pip install 'appliance[gate]'"
