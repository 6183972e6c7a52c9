"""Scan a finished log file (logscan): the tailer's bounded chunks through one extractor."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.bounds import show
from appliance.errors import ApplianceError
from appliance.health.compiled import load_scan_table
from appliance.health.facts import Extractor, Facts
from appliance.health.prefilter import Engine
from appliance.health.scantable import ScanTable
from appliance.health.tail import LogTailer

if TYPE_CHECKING:
    from appliance.health.table import LogTable


def scan_file(path: Path, table: LogTable | ScanTable | None = None, *, chunk_size: int = 1 << 20,
              engine: Engine = "auto") -> Facts:
    """The facts of a finished log. Without `table`, the shipped table's compiled scan part (load_scan_table): a
    scan alone imports no pydantic model."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        what = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror})"
        raise ApplianceError(f"log file {show(str(path))} {what}", field="LOG", value=show(str(path)),
                             fix="give the serve log (the engine's stdout and stderr)") from None
    if not stat.S_ISREG(mode):
        raise ApplianceError(f"log file {show(str(path))} is not a regular file", field="LOG",
                             value=show(str(path)), fix="give the serve log (the engine's stdout and stderr)",
                             reason="a FIFO or a device would block the reader; a folder is no log")
    extractor = Extractor(load_scan_table() if table is None else table, engine)
    tailer = LogTailer(path, chunk_size=chunk_size)
    try:
        for chunk in tailer.poll():
            extractor.feed(chunk)
        extractor.feed(tailer.flush())
    finally:
        tailer.close()
    return extractor.facts
