"""The scanner's newline count: the line number of each fact and the log's line total (health/facts.py).

`bytes.count(b"\\n")` is a byte-at-a-time loop in CPython (~1.7-2 GB/s here) and was ~30 % of a scan's CPU on a
serving log, where almost every byte lies between the rare lines that hold an anchor. numpy's vectorised compare
counts a long span ~5x faster. numpy is there wherever an engine is (vLLM depends on it: the images, the CPU
engine's venv); a CLI installed without an engine may lack it, and then every span is counted by `bytes.count`, with
the same result. It is imported at the first long span only (~0.1 s of CPU), so that an exporter tailing a fresh log,
whose reads are short, never pays its import; a short span stays with `bytes.count`, whose call costs less than
numpy's there. docs/performance.md (P2) has the figures.
"""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType

LONG_SPAN = 1 << 16
"""Spans from this many bytes on are counted by numpy (its call costs ~2 µs: more than bytes.count below ~8 KiB)."""

@cache
def _vectorised() -> ModuleType | None:
    """numpy, imported once (None where it is not installed)."""
    # numpy's OpenBLAS starts a thread per core at import (~0.08 s of CPU here) that a count never uses; it reads
    # this variable once, at load, so it is put back at once and the processes this one starts never see it.
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy
    except ImportError:
        return None
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved
    return numpy


def count_newlines(chunk: bytes, start: int = 0, end: int | None = None) -> int:
    """The b"\\n" bytes in chunk[start:end] (0 <= start), as chunk.count(b"\\n", start, end) says."""
    stop = len(chunk) if end is None else min(end, len(chunk))
    np = _vectorised() if stop - start >= LONG_SPAN else None
    if np is None:
        return chunk.count(b"\n", start, stop)
    return int(np.count_nonzero(np.frombuffer(chunk, np.uint8, count=stop - start, offset=start) == 10))
