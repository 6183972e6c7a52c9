"""What a log scan needs of the log-check table: its line patterns (facts and fatal signatures) and `quiet_after`,
as plain frozen records, kept in a cache keyed by the table's bytes.

Why a cache: the table is validated by pydantic models that check it against the profile model and the predicates,
which costs about a second of CPU to import and load; a scan needs none of that once the table has been validated.
The first load of a given table validates it in full (health/table.py) and stores the scan's part as JSON under
$APPLIANCE_HOME/cache/logchecks/, named by the SHA-256 of the table's bytes and of the code that derives it; later
scans of the same table read that file (standard library only). A table that changed is another name, so a stale
entry is never read; a cache that cannot be written (a read-only home) only means the next scan validates again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

FORMAT = 1
"""Of the cached JSON; the cache's name also hashes this file and table.py, so a change of either is a new name."""

Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class LinePattern:
    """One line pattern of the table (health/table.py's FactPattern or FatalPattern, as a scan reads it)."""

    id: str
    anchors: tuple[str, ...]
    regex: str
    fatal: bool
    rule: str | None = None
    message: str = ""
    groups: tuple[str, ...] = ()
    """The regex's named groups, in order."""
    optional: tuple[str, ...] = ()
    """The named groups a match can leave unset (table.optional_groups)."""
    types: tuple[tuple[str, str], ...] = ()
    constants: tuple[tuple[str, Scalar], ...] = ()
    keep: str = "last"
    reset: bool = False
    one_form: bool = False
    """table.FactPattern.one_form: the line has one form (an optional tail at most)."""

    def produces(self) -> list[str]:
        return [*self.groups, *(name for name, _ in self.constants)]

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LinePattern:
        tuples = {"anchors", "groups", "optional"}
        pairs = {"types", "constants"}
        return cls(**{k: tuple(v) if k in tuples else tuple(tuple(p) for p in v) if k in pairs else v
                      for k, v in data.items()})


@dataclass(frozen=True, slots=True)
class ScanTable:
    facts: tuple[LinePattern, ...]
    fatal: tuple[LinePattern, ...]
    quiet_after: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "facts": [p.to_json() for p in self.facts],
                "fatal": [p.to_json() for p in self.fatal], "quiet_after": list(self.quiet_after)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScanTable:
        if data.get("format") != FORMAT:
            raise ValueError(f"scan table format {data.get('format')!r}, not {FORMAT}")
        return cls(tuple(map(LinePattern.from_json, data["facts"])), tuple(map(LinePattern.from_json, data["fatal"])),
                   tuple(data["quiet_after"]))


def cache_name(table_bytes: bytes) -> str:
    """The cache entry's name: the table's bytes, the format and the code that turns one into the other."""
    digest = hashlib.sha256(table_bytes)
    here = Path(__file__)
    for code in (here, here.with_name("table.py")):
        digest.update(code.read_bytes() if code.is_file() else code.name.encode())
    return f"{digest.hexdigest()[:32]}-{FORMAT}.json"


@cache
def load_scan_table(path: Path | None = None) -> ScanTable:
    """The scan's part of the table at `path` (default healthchecks/logchecks.yaml): from the cache when this table
    was validated before, else validated in full now (its errors are the table loader's) and cached."""
    from appliance.paths import appliance_home, healthchecks_dir

    source = path or healthchecks_dir() / "logchecks.yaml"
    try:
        entry = appliance_home() / "cache" / "logchecks" / cache_name(source.read_bytes())
    except OSError:
        entry = None  # the full loader names what is wrong with the path
    if entry is not None:
        try:
            return ScanTable.from_json(json.loads(entry.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not cached yet, or unreadable: validate again
    from appliance.health.table import load_table

    table = load_table(path).scan_table
    if entry is not None:
        from appliance.errors import ApplianceError
        from appliance.safe_write import write_json

        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            write_json(entry, table.to_json(), field="APPLIANCE_HOME", indent=None)
        except (OSError, ApplianceError):
            pass  # a read-only home: the next scan validates again
    return table
