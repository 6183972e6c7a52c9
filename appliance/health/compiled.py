"""The scan's part of the log-check table, compiled: a scan process starts without importing the table's pydantic
models (issue 38, P2)."""

from __future__ import annotations

import contextlib
import marshal
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from appliance.fastdigest import blake2b
from appliance.health.scantable import LinePattern, ScanTable

FORMAT = 1
DERIVED_BY = ("health/table.py", "health/scantable.py", "yamlstrict.py")
"""The modules whose code turns the table's YAML into a ScanTable: their text is part of a compiled table's key."""


def load_scan_table(path: Path | None = None) -> ScanTable:
    """The scan's part of the log-check table without pydantic: compiled once from the fully validated table
    (health/table.py's load_table and LogTable.scan_table) and kept in $APPLIANCE_HOME/scantable, keyed by the
    table's bytes and the text of the code that derives it. A scan process then starts in ~55 ms of CPU (the
    interpreter's ~25 of them) instead of the ~230 ms that importing and validating the table's models costs
    (benchmarks/scan_throughput.py). An unreadable or stale compiled copy is compiled again; a table that fails
    validation raises as load_table does."""
    from appliance.paths import PACKAGE, appliance_home, healthchecks_dir

    source = path or healthchecks_dir() / "logchecks.yaml"
    try:
        digest = blake2b(FORMAT.to_bytes(2, "big"), digest_size=20)
        digest.update(source.read_bytes())
        for module in DERIVED_BY:
            digest.update((PACKAGE / module).read_bytes())
    except OSError:
        return _validated(source)  # names the unreadable table as load_table does
    compiled = appliance_home() / "scantable" / f"{digest.hexdigest()}.marshal"
    try:
        return _from_plain(marshal.loads(compiled.read_bytes()))
    except (OSError, EOFError, ValueError, TypeError):
        pass
    table = _validated(source)
    with contextlib.suppress(OSError):  # a read-only home: the next scan compiles again
        compiled.parent.mkdir(parents=True, exist_ok=True)
        temp = compiled.with_name(f"{compiled.name}.{os.getpid()}.tmp")
        temp.write_bytes(marshal.dumps(_to_plain(table)))
        os.replace(temp, compiled)
    return table


def _validated(source: Path) -> ScanTable:
    from appliance.health.table import load_table

    return load_table(source).scan_table


def _to_plain(table: ScanTable) -> tuple[Any, ...]:
    def line(p: LinePattern) -> tuple[Any, ...]:
        return tuple(getattr(p, f.name) for f in fields(LinePattern))

    return tuple(map(line, table.facts)), tuple(map(line, table.fatal)), table.quiet_after


def _from_plain(plain: tuple[Any, ...]) -> ScanTable:
    facts, fatal, quiet_after = plain
    return ScanTable(tuple(LinePattern(*p) for p in facts), tuple(LinePattern(*p) for p in fatal), tuple(quiet_after))
