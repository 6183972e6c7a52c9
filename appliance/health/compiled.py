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
CODE = ("health", "profile", "yamlstrict.py", "jsonstrict.py", "bounds.py")
"""The appliance's code that parses and validates the table and derives its scan part (under appliance/): the
stat of each of its files is part of a compiled table's key, with pydantic's own version file."""


def load_scan_table(path: Path | None = None) -> ScanTable:
    """The scan's part of the log-check table without pydantic: compiled once from the fully validated table
    (health/table.py's LogTable and its scan_table) and kept in $APPLIANCE_HOME/scantable, keyed by the table's
    bytes and the state of the code that validates and derives it. A scan process then starts in ~55 ms of CPU (the
    interpreter's ~25 of them) instead of the ~230 ms that importing and validating the table's models costs
    (benchmarks/scan_throughput.py). An unreadable or stale compiled copy is compiled again; a table that fails
    validation raises as load_table does; a table that changed while it was validated is not compiled."""
    from appliance.paths import appliance_home, healthchecks_dir

    source = path or healthchecks_dir() / "logchecks.yaml"
    try:
        key = _key(source)
    except OSError:
        return _validated(source)  # names the unreadable table as load_table does
    compiled = appliance_home() / "scantable" / f"{key}.marshal"
    try:
        return _from_plain(marshal.loads(compiled.read_bytes()))
    except (OSError, EOFError, ValueError, TypeError):
        pass
    table = _validated(source)
    with contextlib.suppress(OSError):  # a read-only home: the next scan compiles again
        if _key(source) != key:
            return table  # edited while it was validated: what was validated may be either version
        compiled.parent.mkdir(parents=True, exist_ok=True)
        temp = compiled.with_name(f"{compiled.name}.{os.getpid()}.tmp")
        temp.write_bytes(marshal.dumps(_to_plain(table)))
        os.replace(temp, compiled)
    return table


def _key(source: Path) -> str:
    from importlib.util import find_spec

    from appliance.paths import PACKAGE

    digest = blake2b(FORMAT.to_bytes(2, "big"), digest_size=20)
    digest.update(source.read_bytes())
    spec = find_spec("pydantic")
    code = [PACKAGE / name for name in CODE]
    files = sorted(f for c in code for f in (c.rglob("*.py") if c.is_dir() else [c]))
    if spec and spec.origin:
        files.append(Path(spec.origin).with_name("version.py"))
    for f in files:
        st = f.stat()
        digest.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _validated(source: Path) -> ScanTable:
    """The table validated from its file now, not load_table's cached copy of an earlier read."""
    from appliance.health.table import load_table

    return load_table.__wrapped__(source).scan_table


def _to_plain(table: ScanTable) -> tuple[Any, ...]:
    def line(p: LinePattern) -> tuple[Any, ...]:
        return tuple(getattr(p, f.name) for f in fields(LinePattern))

    return tuple(map(line, table.facts)), tuple(map(line, table.fatal)), table.quiet_after


def _from_plain(plain: tuple[Any, ...]) -> ScanTable:
    facts, fatal, quiet_after = plain
    return ScanTable(tuple(LinePattern(*p) for p in facts), tuple(LinePattern(*p) for p in fatal), tuple(quiet_after))
