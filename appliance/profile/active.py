"""The active channel of a serve: what `appliance upgrade promote` switched it to, read by the profile loader as
the `upgrade:` layer (after the profile and its bases, before APPLIANCE_SET and --set).

Two places hold it, one per way of running:
- without containers: `APPLIANCE_HOME/upgrades/<profile>/active.json`, replaced by a rename (a reader never sees half
  of it), with the record it replaced inside it (`previous`): that is the rollback target;
- in a container: `APPLIANCE_UPGRADE_CHANNEL` (and `APPLIANCE_UPGRADE_SET`, `;`-separated `a.b=v`), which the compose
  env file `promote --compose-env` writes carries into the container (the same file on every node of a multi-node
  serve: one decision for every rank).

Standard library only (the loader reads it for every profile).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.jsonstrict import JsonObject

CHANNEL_ENV = "APPLIANCE_UPGRADE_CHANNEL"
SET_ENV = "APPLIANCE_UPGRADE_SET"
ACTIVE_FILE = "active.json"
SCHEMA = 1
MAX_ACTIVE_BYTES = 1024 * 1024
"""An active record is a few hundred bytes (its `previous` chain grows by one record a promotion)."""
ROLLBACK_DEPTH = 32
"""How many promotions back rollback can walk. Each one nests `previous` a level deeper, and the strict JSON reader
refuses past 64 levels, so an uncut chain would make every command that loads the profile exit 2 after about 60
promotions; below the oldest kept record the profile's own channel runs (as before the first promotion)."""


def upgrades_dir(home: Path | None = None) -> Path:
    from appliance.paths import appliance_home

    return (home or appliance_home()) / "upgrades"


def profile_dir(profile: str, home: Path | None = None) -> Path:
    return upgrades_dir(home) / profile


def active_path(profile: str, home: Path | None = None) -> Path:
    return profile_dir(profile, home) / ACTIVE_FILE


@dataclass(frozen=True)
class Active:
    """One serve's switched-to channel: the channel and the overrides the decision carries."""

    profile: str
    channel: str
    sets: list[str] = field(default_factory=list)
    decision: str | None = None
    """The upgrade record (APPLIANCE_HOME/upgrades/<profile>/<id>/) that made it active."""
    since: str | None = None
    previous: JsonObject | None = None
    """The record this one replaced (its JSON), or None: before it the profile's own channel ran."""
    origin: str = ""
    """Where it was read: the file, or the environment variable."""

    def items(self) -> list[str]:
        """The layer as `a.b=v` overrides, the channel first."""
        return [f"engine.channel={self.channel}", *self.sets]

    def layer(self) -> list[tuple[str, str]]:
        """(override, its origin) in the order the loader applies them."""
        set_origin = f"env:{SET_ENV}" if self.origin == f"env:{CHANNEL_ENV}" else self.origin
        return [(f"engine.channel={self.channel}", self.origin), *((s, set_origin) for s in self.sets)]

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "profile": self.profile, "channel": self.channel, "set": self.sets,
                "decision": self.decision, "since": self.since, "previous": cut_chain(self.previous)}

    @classmethod
    def from_json(cls, data: Any, origin: str) -> Active:
        """The record as this appliance wrote it, each field of its type (a list of strings is no list of objects
        turned into text); ValueError naming the field otherwise."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"{origin}: not an active-channel record this appliance wrote (no schema {SCHEMA})")
        types = {"profile": (str,), "channel": (str,), "decision": (str, type(None)), "since": (str, type(None)),
                 "previous": (dict, type(None)), "set": (list,)}
        for key, allowed in types.items():
            missing = key in ("profile", "channel") and key not in data
            if missing or (key in data and not isinstance(data[key], allowed)):
                raise ValueError(f"{origin}: field {key!r} is {type(data.get(key)).__name__}, not "
                                 f"{' or '.join('null' if t is type(None) else t.__name__ for t in allowed)}")
        sets = data.get("set", [])
        if not all(isinstance(s, str) for s in sets):
            raise ValueError(f"{origin}: field 'set' holds something other than `a.b=v` strings")
        previous = data.get("previous")
        if previous is not None:  # the rollback target: held to the same shape now, not when a rollback reads it
            cls.from_json(previous, f"{origin} (previous)")
        return cls(data["profile"], data["channel"], list(sets), data.get("decision"), data.get("since"),
                   previous, origin)


def cut_chain(chain: JsonObject | None, keep: int = ROLLBACK_DEPTH) -> JsonObject | None:
    """The `previous` chain with at most `keep` records (the newest), copied; iterative, as deep as it comes."""
    if chain is None:
        return None
    top = dict(chain)
    node, kept = top, 1
    while isinstance(node.get("previous"), dict):
        if kept == keep:
            node["previous"] = None
            break
        node["previous"] = dict(node["previous"])
        node, kept = node["previous"], kept + 1
    return top


class ActiveError(ValueError):
    """An active-channel record or variable that cannot be read (the loader says it as exit 2)."""


def from_environment(profile: str, env: dict[str, str] | os._Environ[str] | None = None) -> Active | None:
    env = os.environ if env is None else env
    channel = env.get(CHANNEL_ENV, "").strip()
    if not channel:
        if env.get(SET_ENV, "").strip():
            raise ActiveError(f"{SET_ENV} is set without {CHANNEL_ENV}: the overrides belong to a promoted channel")
        return None
    sets = [part.strip() for part in env.get(SET_ENV, "").split(";") if part.strip()]
    return Active(profile, channel, sets, origin=f"env:{CHANNEL_ENV}")


def read_active(profile: str, home: Path | None = None) -> Active | None:
    """The active record of a profile: the environment's (a container), else the file's; None when neither."""
    found = from_environment(profile)
    if found is not None:
        return found
    path = active_path(profile, home)
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ActiveError(f"{path}: {exc.strerror}") from None
    from appliance.errors import ApplianceError
    from appliance.jsonstrict import JsonError, loads
    from appliance.paths import read_capped

    try:  # without blocking: a FIFO or a device here would hang every command that loads the profile
        raw = read_capped(path, "active.json", MAX_ACTIVE_BYTES, "active-channel record")
        found = Active.from_json(loads(raw, str(path)), f"upgrade:{path}")
    except ApplianceError as exc:
        raise ActiveError(exc.message) from None
    except (JsonError, ValueError) as exc:
        raise ActiveError(str(exc)) from None
    if found.profile != profile:
        raise ActiveError(f"{path}: field 'profile' is {found.profile[:100]!r}, not {profile!r}: another profile's "
                          "record")
    return found


def write_active(active: Active | None, profile: str, home: Path | None = None) -> Path:
    """Put `active` in place by a rename (None: remove it, the profile's own channel runs again)."""
    path = active_path(profile, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    if active is None:
        path.unlink(missing_ok=True)
        return path
    from appliance.safe_write import write_json

    write_json(path, active.to_json(), field="active.json")
    return path
