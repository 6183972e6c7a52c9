"""Facts from log lines: the table's patterns applied to chunks of whole lines.

Speed: a serve log is mostly lines nobody needs (access log, per-step stats). The prefilter finds
the lines holding one of the table's literal anchors at C speed; only those are decoded and matched.
A `keep: last` fact is overwritten by its next line, so within a chunk only its last line is
matched, and an anchor that turns out frequent (DSpark metrics every few lines) is looked up from
the chunk's end instead. Memory: facts are a fixed set of names, fatal hits keep one example line
and a count, `distinct` facts keep at most MAX_DISTINCT values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.health.prefilter import Prefilter
from appliance.health.table import FactPattern, FatalPattern, LogTable, Pattern
from appliance.redact import redact

MAX_DISTINCT = 16
MAX_TEXT = 400
DENSE = 64
"""An anchor seen this often in one chunk whose patterns keep only their last value (a serve at work
prints DSpark metrics every few lines) is then found from each chunk's end instead of line by line."""


@dataclass
class FatalHit:
    id: str
    rule: str
    message: str
    line: int
    text: str
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "rule": self.rule, "message": self.message, "line": self.line,
                "text": self.text, "count": self.count}


@dataclass
class Facts:
    """What one engine run's log said so far."""

    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    """Line number (of the log stream) of each fact's latest evidence."""
    fatal: dict[str, FatalHit] = field(default_factory=dict)
    quiet: dict[str, FatalHit] = field(default_factory=dict)
    """Fatal signatures printed after a requested shutdown began (expected noise, not failures)."""
    runs: int = 0
    """Engine runs that started in this stream (lines matching a `reset` pattern)."""
    run_started_line: int = 0
    lines_read: int = 0

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, list) else v for k, v in sorted(self.values.items())}


def _int(raw: str) -> int:
    return int(raw.replace(",", ""))


def _float(raw: str) -> float:
    return float(raw.replace(",", ""))


_CASTS: dict[str, Callable[[str], Any]] = {"int": _int, "float": _float, "str": str.strip}


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A pattern prepared for the hot path (plain attributes, casts resolved)."""

    search: Callable[[str], re.Match[str] | None]
    pattern: Pattern
    fatal: bool
    reset: bool
    casts: tuple[tuple[str, Callable[[str], Any]], ...]
    constants: tuple[tuple[str, Any], ...]
    keep: str

    @classmethod
    def of(cls, p: Pattern) -> _Compiled:
        if isinstance(p, FactPattern):
            casts = tuple((g, _CASTS[p.types.get(g, "str")]) for g in p.compiled.groupindex)
            return cls(p.compiled.search, p, False, p.reset, casts, tuple(p.set.items()), p.keep)
        return cls(p.compiled.search, p, True, False, (), (), "last")


class Extractor:
    """Feed chunks of whole lines (as bytes); read `facts`."""

    def __init__(self, table: LogTable) -> None:
        self._compiled = [_Compiled.of(p) for p in (*table.facts, *table.fatal)]
        self._anchors: dict[bytes, list[int]] = {}
        for index, c in enumerate(self._compiled):
            for anchor in c.pattern.anchors:
                self._anchors.setdefault(anchor.encode(), []).append(index)
        self._prefilter: Prefilter | None = None
        self.facts = Facts()
        self._quiet_after = table.quiet_after
        self._resets = {i for i, c in enumerate(self._compiled) if c.reset}
        # `keep: last` facts that nothing reads in line order (quiet_after does): within one chunk only
        # their last line can count, so the earlier ones are dropped before they are decoded.
        quiet = set(table.quiet_after)
        self._last_only = {i for i, c in enumerate(self._compiled) if not c.fatal and not c.reset
                           and c.keep == "last" and not quiet & set(c.pattern.produces())}  # type: ignore[attr-defined]
        self._dense: set[bytes] = set()

    def feed(self, chunk: bytes) -> None:
        """Scan `chunk`, which holds whole lines (the last one may lack its newline)."""
        if self._prefilter is None:  # the first chunk tells which bytes are rare in this log
            self._prefilter = self._new_prefilter(chunk)
        hits = self._prefilter.lines(chunk)
        last_reset = self._drop_overwritten(chunk, hits)
        self._add_dense(chunk, hits, last_reset)
        if any(n >= DENSE and a not in self._dense and set(self._anchors[a]) <= self._last_only
               for a, n in self._prefilter.counts.items()):
            self._dense |= {a for a, n in self._prefilter.counts.items() if n >= DENSE
                            and set(self._anchors[a]) <= self._last_only}
            self._prefilter = self._new_prefilter(chunk)
        base, counted, index = self.facts.lines_read, 0, 0
        for start in sorted(hits):
            end, indexes = hits[start]
            index += chunk.count(b"\n", counted, start)
            counted = start
            self._apply(chunk[start:end].decode("utf-8", "replace"), base + index + 1, indexes)
        self.facts.lines_read = base + chunk.count(b"\n") + (1 if chunk and not chunk.endswith(b"\n") else 0)

    def _new_prefilter(self, chunk: bytes) -> Prefilter:
        return Prefilter({a: i for a, i in self._anchors.items() if a not in self._dense}, chunk[: 1 << 18])

    def _drop_overwritten(self, chunk: bytes, hits: dict[int, tuple[int, set[int]]]) -> int:
        """Keep, of each last-only pattern, only its last matching line after the chunk's last reset
        (returned: the start of that reset line, 0 if none)."""
        order = sorted(hits)
        compiled = self._compiled

        def line(start: int) -> str:
            return chunk[start:hits[start][0]].decode("utf-8", "replace")

        last_reset = next((s for s in reversed(order) if hits[s][1] & self._resets
                           and any(compiled[i].search(line(s)) for i in hits[s][1] & self._resets)), 0)
        by_pattern: dict[int, list[int]] = {}
        for start in order:
            for i in hits[start][1] & self._last_only:
                by_pattern.setdefault(i, []).append(start)
        for i, starts in by_pattern.items():
            kept = False
            for start in reversed(starts):
                if not kept and start >= last_reset and compiled[i].search(line(start)):
                    kept = True
                else:
                    hits[start][1].discard(i)
        for start in order:
            if not hits[start][1]:
                del hits[start]
        return last_reset

    def _add_dense(self, chunk: bytes, hits: dict[int, tuple[int, set[int]]], last_reset: int) -> None:
        """For each dense anchor, walk back from the chunk's end to the last line each of its patterns
        matches (bytes.rfind: a few microseconds where the regex pass would stop at every line)."""
        for anchor in self._dense:
            todo, pos = set(self._anchors[anchor]), len(chunk)
            while todo and (at := chunk.rfind(anchor, 0, pos)) >= 0:
                start = chunk.rfind(b"\n", 0, at) + 1
                if start < last_reset:
                    break
                end = chunk.find(b"\n", at)
                end = len(chunk) if end < 0 else end
                text = chunk[start:end].decode("utf-8", "replace")
                matched = {i for i in todo if self._compiled[i].search(text)}
                if matched:
                    hits.setdefault(start, (end, set()))[1].update(matched)
                    todo -= matched
                pos = start

    def feed_text(self, text: str) -> None:
        self.feed(text.encode())

    def peek(self, text: str) -> dict[str, Any]:
        """The facts `text` would give, stored nowhere: for the line the engine is still drawing (a tqdm bar
        redraws with `\\r` and ends its line only when it closes), which start-up progress reads live."""
        found: dict[str, Any] = {}
        for c in self._compiled:
            if c.fatal or c.reset or not any(a in text for a in c.pattern.anchors):
                continue
            m = c.search(text)
            if m is None:
                continue
            for name, cast in c.casts:
                if m[name] is not None:
                    try:
                        found[name] = cast(m[name])
                    except ValueError:
                        continue
            found.update(c.constants)
        return found

    def _apply(self, text: str, line: int, indexes: set[int]) -> None:
        compiled = self._compiled
        if len(indexes) == 1:  # the common case: one pattern's anchor in the line
            c = compiled[next(iter(indexes))]
            m = c.search(text)
            if m is None:
                return
            matches = [(c, m)]
        else:
            matches = [(c, m) for c in (compiled[i] for i in sorted(indexes)) if (m := c.search(text))]
        if any(c.reset for c, _ in matches):
            self._reset(line)
        for c, m in matches:
            if c.fatal:
                self._fatal(c.pattern, text, line)  # type: ignore[arg-type]
            else:
                self._fact(c, m, line)

    def _reset(self, line: int) -> None:
        old = self.facts
        self.facts = Facts(runs=old.runs + 1, run_started_line=line, lines_read=old.lines_read)

    @property
    def stopping(self) -> bool:
        """A `quiet_after` fact was seen in this run: the engine is shutting down on request."""
        return any(name in self.facts.values for name in self._quiet_after)

    def _fatal(self, pattern: FatalPattern, text: str, line: int) -> None:
        hits = self.facts.quiet if self.stopping else self.facts.fatal
        hit = hits.get(pattern.id)
        if hit is None:
            # The line is echoed by logscan and the unauthenticated /status: secrets masked here, once.
            hits[pattern.id] = FatalHit(pattern.id, pattern.rule, pattern.message, line,
                                        redact(text.strip())[:MAX_TEXT])
        else:
            hit.count += 1

    def _fact(self, c: _Compiled, m: re.Match[str], line: int) -> None:
        values, lines, keep = self.facts.values, self.facts.lines, c.keep
        found: list[tuple[str, Any]] = []
        for name, cast in c.casts:
            raw = m[name]
            if raw is not None:
                try:
                    found.append((name, cast(raw)))
                except ValueError:
                    continue  # a number the regex admitted but Python cannot read: no evidence
        found += c.constants
        if keep == "last":
            values.update(found)
            lines.update((name, line) for name, _ in found)
            return
        for name, value in found:
            if keep == "first":
                if name in values:
                    continue
                values[name] = value
            else:  # distinct
                seen = values.setdefault(name, [])
                if value not in seen and len(seen) < MAX_DISTINCT:
                    seen.append(value)
            lines[name] = line
