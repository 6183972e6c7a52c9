"""Find the few lines of a chunk that hold one of the table's anchors (literal strings), at C speed.

A line is a candidate for a pattern exactly when it contains one of the pattern's anchors (the table's
contract, logchecks.yaml); every engine here finds the same candidates, only at different speeds:

- `hyperscan`: Intel's multi-literal matcher (Vectorscan on aarch64), one pass over the chunk for all
  anchors at GB/s; each occurrence comes back as (anchor, end offset), grouped into lines here.
- `re`: pure Python (prefilter_re.py), a few `re` passes grouped by a rare first byte; the fallback where
  Hyperscan cannot load (no wheel for the platform, a CPU without the SIMD it needs).
- `reference`: every line, `anchor in line`, no shortcut: the oracle the others are tested against.

`auto` takes Hyperscan when it loads, else `re`.
"""

from __future__ import annotations

from functools import cache
from typing import Literal, Protocol

from appliance.errors import ApplianceError
from appliance.health.prefilter_re import RePrefilter

Engine = Literal["auto", "hyperscan", "re", "reference"]
Found = list[tuple[int, int]]
"""(end offset of an anchor occurrence, anchor number) in the chunk, sorted by offset."""


class AnchorFinder(Protocol):
    engine: str

    def find(self, chunk: bytes) -> Found: ...


@cache
def hyperscan_problem() -> str | None:
    """Why Hyperscan cannot serve here (None: it can). Compiling a database proves the CPU is supported."""
    try:
        import hyperscan

        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=[b"x"], ids=[0], flags=[0], literal=True)
    except ImportError as exc:
        return f"hyperscan is not installed ({exc})"
    except Exception as exc:  # hyperscan.error: an unsupported CPU or a broken build
        return f"hyperscan does not run here: {type(exc).__name__}: {exc}"
    return None


class HyperscanPrefilter:
    engine = "hyperscan"

    def __init__(self, anchors: list[bytes]) -> None:
        import hyperscan

        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK) if anchors else None
        if self._db is not None:
            self._db.compile(expressions=anchors, ids=list(range(len(anchors))), flags=[0] * len(anchors),
                             literal=True)

    def find(self, chunk: bytes) -> Found:
        found: Found = []
        if self._db is not None and chunk:
            append = found.append
            self._db.scan(chunk, match_event_handler=lambda number, _start, end, _flags, _ctx: append((end, number)))
        found.sort()  # Hyperscan reports by end offset already: one linear pass
        return found


class ReferencePrefilter:
    """Every line, every anchor, plain `bytes.find`: slow and obviously right."""

    engine = "reference"

    def __init__(self, anchors: list[bytes]) -> None:
        self._anchors = anchors

    def find(self, chunk: bytes) -> Found:
        found: Found = []
        start = 0
        for line in chunk.split(b"\n"):
            found += sorted((start + at + len(anchor), number) for number, anchor in enumerate(self._anchors)
                            if (at := line.find(anchor)) >= 0)
            start += len(line) + 1
        return found


def group_lines(chunk: bytes, found: Found, patterns_of: list[frozenset[int]], split: int = -1,
                before: list[frozenset[int]] | None = None) -> dict[int, tuple[int, set[int]]]:
    """{line start: (line end, pattern indexes)} of the lines holding the anchors found. An occurrence ending
    at or before `split` counts for the patterns `before[number]` instead of `patterns_of[number]`."""
    hits: dict[int, tuple[int, set[int]]] = {}
    find, rfind, size = chunk.find, chunk.rfind, len(chunk)
    line_end, patterns = -1, set()
    for end, number in found:
        indexes = patterns_of[number] if end > split or before is None else before[number]
        if not indexes:
            continue
        if end > line_end:  # an anchor holds no newline, so it lies in the line around its end
            start = rfind(b"\n", 0, end) + 1
            line_end = find(b"\n", end)
            line_end = size if line_end < 0 else line_end
            patterns = set(indexes)
            hits[start] = (line_end, patterns)
        else:
            patterns |= indexes
    return hits


def resolve_engine(engine: Engine) -> str:
    if engine == "auto":
        return "re" if hyperscan_problem() else "hyperscan"
    if engine == "hyperscan" and (problem := hyperscan_problem()):
        raise ApplianceError(f"scan engine hyperscan: {problem}", field="engine", value=engine,
                             fix="install the appliance's dependencies (pip install hyperscan), or use engine auto",
                             reason="auto falls back to the pure-Python engine, which finds the same lines slower")
    return engine


def make_prefilter(anchors: list[bytes], sample: bytes, engine: str) -> AnchorFinder:
    """`engine` as `resolve_engine` returned it; `sample` (the log's first bytes) tunes only the `re` engine."""
    if engine == "hyperscan":
        return HyperscanPrefilter(anchors)
    if engine == "reference":
        return ReferencePrefilter(anchors)
    return RePrefilter(anchors, sample)
