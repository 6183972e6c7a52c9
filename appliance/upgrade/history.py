"""The upgrade history of a profile's serve: one folder per plan, qualification and decision under
`APPLIANCE_HOME/upgrades/<profile>/`, each with a `record.json` naming the receipts it rests on (kept inside it).

    upgrades/<profile>/active.json                                  the active channel (appliance/profile/active.py)
    upgrades/<profile>/<UTC stamp>-<kind>-<channel>/record.json     kind: plan | qualify | promote | rollback
    upgrades/<profile>/<...>-qualify-<channel>/incumbent/receipt.json, candidate/receipt.json, candidate-serve/
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.paths import write_json_atomic
from appliance.profile.active import profile_dir, upgrades_dir
from appliance.upgrade.steps import Steps

Kind = Literal["plan", "qualify", "promote", "rollback"]
RECORD = "record.json"
SCHEMA = "appliance-upgrade-record/1"


def utc_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class SideJson(TypedDict, total=False):
    """One side of a move, as a record writes it: its channel, digests, the decision it came from, its --set."""

    channel: str | None
    profile_digest: str
    lock_digest: str
    decision: str | None
    sets: list[str]


RecordJson = TypedDict("RecordJson", {
    "schema": str, "id": str, "kind": str, "profile": str, "started_at": str, "finished_at": str, "at": str,
    "medium": str, "run_dir": str, "compose_env": str, "manifests": str, "previous": str | None,
    "mode": JsonObject, "from": SideJson, "to": SideJson, "candidate": SideJson, "plan": JsonObject,
    "qualification": str | None, "forced": bool, "budget_s": float | None, "receipts": dict[str, str],
    "seconds": "float | dict[str, float]", "verdict": str | None, "reasons": list[str], "outcome": str, "why": str,
    "window": JsonObject, "proof": JsonObject, "rollback": JsonObject, "ranks": JsonObject, "canary": list[JsonObject],
    "cleared": str, "switching_back": str, "obtained_install_s": float, "record": str, "steps": JsonObject,
    "beside": JsonObject,
}, total=False)
"""An upgrade record (record.json) as its writers build it: plan, qualify, promote, rollback, each on its medium.
RecordShape below holds what its readers take, on the way back in."""


@dataclass(frozen=True)
class Record:
    path: Path
    """The record's folder."""
    data: RecordJson

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def kind(self) -> str:
        return str(self.data.get("kind"))


def new_record(profile: str, kind: Kind, channel: str, home: Path | None = None) -> Path:
    base = profile_dir(profile, home)
    base.mkdir(parents=True, exist_ok=True)
    stamp, n = utc_stamp(), 0
    while True:
        folder = base / (f"{stamp}-{kind}-{channel}" + (f"-{n}" if n else ""))
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def write_record(folder: Path, data: RecordJson) -> Path:
    path = folder / RECORD
    write_json_atomic(path, {"schema": SCHEMA, "id": folder.name, **data}, indent=2)
    return path


MAX_RECORD_BYTES = 16 * 1024 * 1024


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Side(_Open):
    channel: str | None = None
    profile_digest: str | None = None
    lock_digest: str | None = None
    decision: str | None = None
    sets: list[str] | None = None


class _Plan(_Open):
    from_: _Side | None = Field(None, alias="from")
    to: _Side | None = None
    renderable: bool | None = None


class _Window(_Open):
    seconds: float | int | None = None


# A switch's seconds per step: the fields of upgrade/steps.py's Steps (one list, held here as numbers only).
_Steps = create_model("_Steps", __config__=ConfigDict(extra="forbid", strict=True),
                      **{f.name: (float | int | None, None) for f in fields(Steps)})


class _Proof(_Open):
    ok: bool | None = None
    steps: _Steps | None = None


class RecordShape(_Open):
    """The fields the readers of a record take (status, promote, rollback), each of its type; other fields are
    carried as written."""

    schema_: Literal["appliance-upgrade-record/1"] = Field(alias="schema")
    kind: str | None = None
    started_at: str | None = None
    at: str | None = None
    plan: _Plan | None = None
    from_: _Side | None = Field(None, alias="from")
    to: _Side | None = None
    candidate: _Side | None = None
    verdict: str | None = None
    outcome: str | None = None
    why: str | None = None
    reasons: list[str] | None = None
    receipts: dict[str, str] | None = None
    seconds: float | int | dict[str, float | int] | None = None
    """A decision's seconds; a qualification's, per step (incumbent_gate, candidate_start, ..., total)."""
    window: _Window | None = None
    cleared: str | None = None
    """A rollback's: the id of the killed promote or return it finished (matched against the folders, never a path)."""
    switching_back: str | None = None
    steps: _Steps | None = None
    """A promote's or rollback's seconds per step, the restart's included (its proof carries those too)."""
    proof: _Proof | None = None
    rollback: _Proof | None = None


def read_record(path: Path) -> RecordJson:
    """One record.json through the strict reader (a regular file, bounded, no lone surrogate or deep nesting) and
    held to RecordShape; ApplianceError naming the file and the field otherwise."""
    from appliance.jsonstrict import load_file

    data = load_file(path, "record.json", MAX_RECORD_BYTES, "upgrade record")
    return shaped(data, RecordShape, path, "upgrade record", "record.json",
                  fix=f"move {path.parent} aside (it is no record this appliance wrote); the rest of the history "
                      "stays readable", reason="a record of the wrong shape would be misread as a decision")


def shaped(data: Any, model: type[BaseModel], path: Path, what: str, field: str, fix: str, reason: str) -> Any:
    """`data` as read, once it holds to `model`; ApplianceError naming the file and its first field that does not."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top"
        raise ApplianceError(f"{what} {path}: field {where}: {first['msg'][:200]}", field=f"{field} {where}",
                             value=str(path), fix=fix, reason=reason) from None
    return data


def records(profile: str, home: Path | None = None) -> list[Record]:
    """Oldest first; a folder without a record (an upgrade interrupted before it wrote one) is skipped; a record
    that is there but unreadable is exit 2 naming it (read_record)."""
    out = []
    for folder in sorted(p for p in profile_dir(profile, home).glob("*") if p.is_dir()):
        if not os.path.lexists(folder / RECORD):
            continue
        out.append(Record(folder, read_record(folder / RECORD)))
    return out


def profiles_with_history(home: Path | None = None) -> list[str]:
    root = upgrades_dir(home)
    return sorted(p.name for p in root.glob("*") if p.is_dir()) if root.is_dir() else []


def latest_qualification(profile: str, candidate_digest: str, lock_digest: str,
                         home: Path | None = None) -> Record | None:
    """The newest qualification of exactly this candidate (profile digest on the candidate channel's lock)."""
    for rec in reversed(records(profile, home)):
        d = rec.data
        if d.get("kind") == "qualify" and (d.get("candidate") or {}).get("profile_digest") == candidate_digest \
                and (d.get("candidate") or {}).get("lock_digest") == lock_digest:
            return rec
    return None


def latest_receipt(profile: str, channel: str, profile_digest: str, home: Path | None = None) -> Path | None:
    """The incumbent's last receipt: the newest complete gate receipt of this profile digest on this channel, from
    the upgrade history (an earlier qualification's) or `appliance gate`'s own receipts folder."""
    from appliance.errors import ApplianceError
    from appliance.gate.receipt import load
    from appliance.paths import appliance_home

    found: list[tuple[str, Path]] = []
    candidates = [*profile_dir(profile, home).glob("*/*/receipt.json"),
                  *((home or appliance_home()) / "receipts").glob(f"{profile}-*/receipt.json")]
    for path in candidates:
        try:
            r = load(path)
        except ApplianceError:  # not a receipt this reader takes: never the incumbent's evidence
            continue
        if r.complete and r.verdict in ("pass", "inconclusive") and r.provenance.channel == channel \
                and r.profile.digest == profile_digest:
            found.append((r.started_at, path))
    return max(found)[1] if found else None
