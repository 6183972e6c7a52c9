"""versions.json read with the standard library only: the lock's digest and its plain values.

A leaf: the profile loader, `appliance.lock` and the image build (before anything is installed) all
read the lock through it, so the digest that names a stack is computed in one place.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

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
    raise SystemExit("lockfile: versions.json not found (set APPLIANCE_VERSIONS)")


def load(path: Path) -> dict:
    """versions.json, read as the runtime reads it (appliance/jsonstrict.py: no FIFO, no duplicate key, bounded)."""
    from appliance.errors import ApplianceError
    from appliance.jsonstrict import load_file

    try:
        data = load_file(path, "versions.json", 4 << 20, "version lock")
    except ApplianceError as exc:
        raise SystemExit(f"lockfile: {exc}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"lockfile: {path} is not a JSON object")
    return data


def canonical_digest(data: object) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces): the lock digest, the profile and engine digests."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pins(lock: dict, target: str) -> list[dict]:
    return [p for p in lock["packages"] if target in p["targets"]]


def pin(lock: dict, name: str) -> dict:
    for p in lock["packages"]:
        if p["name"] == name:
            return p
    raise SystemExit(f"lockfile: {name} is not in versions.json")


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
