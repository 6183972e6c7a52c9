"""Scan a finished log file (logscan).

With grep on PATH, `grep -F` (LC_ALL=C, C speed) selects the lines that hold one of the table's
anchors and the extractor sees only those, with their line numbers; the result is the same as the
pure-Python path (the tailer's bounded chunks through the extractor's own prefilter), which is
used when grep is missing or fails. Memory stays flat either way: both stream in bounded chunks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.health.facts import Extractor, Facts
from appliance.health.table import LogTable
from appliance.health.tail import LogTailer

CHUNK = 1 << 20


def scan_file(path: Path, table: LogTable, *, use_grep: bool = True) -> Facts:
    if not path.is_file():
        raise ApplianceError(f"log file {path} does not exist", field="LOG", value=str(path),
                             fix="give the serve log (the engine's stdout and stderr)")
    grep = shutil.which("grep") if use_grep else None
    if grep:
        extractor = Extractor(table)
        if _scan_with_grep(grep, path, table, extractor):
            return extractor.facts
    extractor = Extractor(table)
    tailer = LogTailer(path, chunk_size=CHUNK)
    try:
        for chunk in tailer.poll():
            extractor.feed(chunk)
        extractor.feed(tailer.flush())
    finally:
        tailer.close()
    return extractor.facts


def _batches(stream: Iterator[bytes]) -> Iterator[tuple[bytes, list[int]]]:
    """grep -n output ("N:line") -> (lines joined, their numbers), about CHUNK bytes at a time."""
    rest = b""
    for data in stream:
        data = rest + data
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        lines = data[:cut].splitlines(keepends=True)
        if lines:
            numbers, texts = zip(*(line.split(b":", 1) for line in lines), strict=True)
            yield b"".join(texts), [int(n) for n in numbers]
    if rest:
        number, text = rest.split(b":", 1)
        yield text + b"\n", [int(number)]


def _scan_with_grep(grep: str, path: Path, table: LogTable, extractor: Extractor) -> bool:
    anchors = sorted({a for p in (*table.facts, *table.fatal) for a in p.anchors})
    argv = [grep, "-a", "-n", "-F", *[x for a in anchors for x in ("-e", a)], "--", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "")})
    assert proc.stdout is not None
    with proc.stdout:
        for chunk, numbers in _batches(iter(lambda: proc.stdout.read(CHUNK), b"")):  # type: ignore[union-attr]
            extractor.feed(chunk, numbers)
    if proc.wait() not in (0, 1):  # 1 = no line matched; anything else: grep failed, scan in Python
        return False
    extractor.facts.lines_read = _count_lines(path)
    return True


def _count_lines(path: Path) -> int:
    lines, last = 0, b"\n"
    with path.open("rb") as f:
        while data := f.read(CHUNK):
            lines += data.count(b"\n")
            last = data[-1:]
    return lines + (last != b"\n")
