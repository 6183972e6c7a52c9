"""Scan a finished log file (logscan): the tailer's bounded chunks through one extractor."""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ApplianceError
from appliance.health.facts import Extractor, Facts
from appliance.health.table import LogTable
from appliance.health.tail import LogTailer


def scan_file(path: Path, table: LogTable, *, chunk_size: int = 1 << 20) -> Facts:
    if not path.is_file():
        raise ApplianceError(f"log file {path} does not exist", field="LOG", value=str(path),
                             fix="give the serve log (the engine's stdout and stderr)")
    extractor = Extractor(table)
    tailer = LogTailer(path, chunk_size=chunk_size)
    try:
        for chunk in tailer.poll():
            extractor.feed(chunk)
        extractor.feed(tailer.flush())
    finally:
        tailer.close()
    return extractor.facts
