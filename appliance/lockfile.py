"""versions.json read with the standard library only: the lock's digest and its plain values.

A leaf: the profile loader, `appliance.lock` and the image build (before anything is installed) all
read the lock through it, so the digest that names a stack is computed in one place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
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


# --- the GPU image's engine-source.json (written by container/enginesource.py, read by `appliance versions`) --
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
ENGINE_RECORD_KEYS = ("repo", "branch", "branch_head", "ref", "tag_head", "pinned", "commit", "on_branch", "platform",
                      "torch_cuda_arch_list")


def engine_record_problems(record: dict[str, object], engine_source: dict[str, object]) -> list[str]:
    """What an image's engine-source.json says against versions.json's engine_source: every difference, named."""
    problems = [f"engine-source.json has no {key!r}" for key in ENGINE_RECORD_KEYS if key not in record]
    commit, pin = record.get("commit"), engine_source.get("commit")
    if not isinstance(commit, str) or not FULL_SHA.match(commit):
        problems.append(f"engine-source.json commit={commit!r} is not a full 40-hex SHA")
    elif not isinstance(pin, str) or not commit.startswith(pin):
        problems.append(f"the engine was built from {commit} but versions.json pins {pin}")
    if record.get("repo") != engine_source.get("repo"):
        problems.append(f"the engine was built from repo {record.get('repo')!r} but versions.json names "
                        f"{engine_source.get('repo')!r}")
    return problems
