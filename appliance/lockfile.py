"""versions.json read with the standard library only: the lock's digest and its plain values.

A leaf: the profile loader, `appliance.lock` and the image build (before anything is installed) all
read the lock through it, so the digest that names a stack is computed in one place. Standard library (and the
stdlib-only appliance.errors) only; a missing lock or pin is an ApplianceError, which each program's main says
and exits 2 on.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from appliance.errors import ApplianceError

HERE = Path(__file__).resolve().parent


def find_versions(start: Path = HERE) -> Path:
    """versions.json of the repository (or $APPLIANCE_VERSIONS, or $APPLIANCE_ROOT/versions.json)."""
    if os.environ.get("APPLIANCE_VERSIONS"):
        return Path(os.environ["APPLIANCE_VERSIONS"])
    if os.environ.get("APPLIANCE_ROOT"):
        return Path(os.environ["APPLIANCE_ROOT"]) / "versions.json"
    for parent in [start, *start.parents]:
        if (parent / "versions.json").is_file():
            return parent / "versions.json"
    raise ApplianceError(f"versions.json not found in {start} or any folder above it", field="APPLIANCE_VERSIONS",
                         fix="set APPLIANCE_VERSIONS to the lock file (or APPLIANCE_ROOT to the folder holding it)",
                         reason="every version the appliance installs or checks is read from that one file")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def canonical_digest(data: object) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces): the lock digest, the profile and engine digests."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pins(lock: dict, target: str) -> list[dict]:
    return [p for p in lock["packages"] if target in p["targets"]]


def pin(lock: dict, name: str) -> dict:
    for p in lock["packages"]:
        if p["name"] == name:
            return p
    raise ApplianceError(f"{name} is not in versions.json", field="packages", value=name,
                         fix=f"add a pin for {name} to versions.json's packages, or ask for a locked one",
                         reason="versions are written only in versions.json")


def requirement(p: dict, *, constraint: bool = False) -> str:
    # pip rejects extras in a constraints file: constrain the bare name.
    extras = "" if constraint or not p.get("extras") else f"[{','.join(p['extras'])}]"
    return f"{p['name']}{extras}=={p['version']}"


class MissingKey(LookupError):
    """A dotted key versions.json does not hold as one value."""


def get(lock: dict, dotted: str) -> str:
    """One scalar of the lock by its dotted key (`python.cpu`, `images.cpu.suite`): the scripts' one way in."""
    value: object = lock
    for i, key in enumerate(dotted.split(".")):
        if not isinstance(value, dict) or key not in value:
            where = ".".join(dotted.split(".")[:i]) or "the top level"
            raise MissingKey(f"versions.json has no {dotted!r} (no {key!r} under {where})")
        value = value[key]
    if isinstance(value, dict | list):
        raise MissingKey(f"{dotted!r} is not a single value in versions.json")
    return str(value)
