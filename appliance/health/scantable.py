"""What a log scan needs of the log-check table: its line patterns (facts and fatal signatures) and `quiet_after`,
as plain frozen records (standard library only). health/table.py validates the table and derives them
(`LogTable.scan_table`); health/facts.py reads only these, so the scan's hot loop touches no pydantic model, and
health/compiled.py keeps them compiled, so a scan's start needs none either.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class ScanTable:
    facts: tuple[LinePattern, ...]
    fatal: tuple[LinePattern, ...]
    quiet_after: tuple[str, ...] = ()
