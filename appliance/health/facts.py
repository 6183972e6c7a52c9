"""Facts from log lines: the table's patterns applied to chunks of whole lines.

Speed: a serve log is mostly lines nobody needs (access log, per-step stats). The extractor finds
the table's literal anchors in a whole chunk with `bytes.find` (C speed) and only decodes and
regex-matches the few lines that hold one. Memory: facts are a fixed set of names, fatal hits
keep one example line and a count, `distinct` facts keep at most MAX_DISTINCT values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.health.table import FactPattern, FatalPattern, LogTable, Pattern

MAX_DISTINCT = 16
MAX_TEXT = 400


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

    def fatal_count(self) -> int:
        return sum(h.count for h in self.fatal.values())

    def to_json(self) -> dict[str, Any]:
        return dict(sorted(self.values.items()))


def _cast(kind: str, raw: str) -> Any:
    if kind == "int":
        return int(raw.replace(",", ""))
    if kind == "float":
        return float(raw.replace(",", ""))
    return raw


class Extractor:
    """Feed chunks of whole lines (as bytes); read `facts`."""

    def __init__(self, table: LogTable) -> None:
        self.table = table
        self.patterns: list[Pattern] = [*table.facts, *table.fatal]
        by_anchor: dict[bytes, list[int]] = {}
        for index, pattern in enumerate(self.patterns):
            for anchor in pattern.anchors:
                by_anchor.setdefault(anchor.encode(), []).append(index)
        self._anchors = list(by_anchor.items())
        self.facts = Facts()
        self._quiet_after = table.quiet_after

    def feed(self, chunk: bytes) -> None:
        """Scan `chunk`, which holds whole lines (the last one may lack its newline)."""
        hits = self._candidate_lines(chunk)
        counted, line = 0, self.facts.lines_read
        for start in sorted(hits):
            end, indexes = hits[start]
            line += chunk.count(b"\n", counted, start)
            counted = start
            self._apply(chunk[start:end].decode("utf-8", "replace"), line + 1, sorted(indexes))
        self.facts.lines_read = line + chunk.count(b"\n", counted)
        if chunk and not chunk.endswith(b"\n"):
            self.facts.lines_read += 1

    def feed_text(self, text: str) -> None:
        self.feed(text.encode())

    def _candidate_lines(self, chunk: bytes) -> dict[int, tuple[int, set[int]]]:
        hits: dict[int, tuple[int, set[int]]] = {}
        find, rfind, size = chunk.find, chunk.rfind, len(chunk)
        for anchor, indexes in self._anchors:
            at = find(anchor)
            while at >= 0:
                start = rfind(b"\n", 0, at) + 1
                end = find(b"\n", at)
                end = size if end < 0 else end
                entry = hits.get(start)
                if entry is None:
                    hits[start] = (end, set(indexes))
                else:
                    entry[1].update(indexes)
                at = find(anchor, end)
        return hits

    def _apply(self, text: str, line: int, indexes: list[int]) -> None:
        matches = [(self.patterns[i], m) for i in indexes if (m := self.patterns[i].compiled.search(text))]
        if any(isinstance(p, FactPattern) and p.reset for p, _ in matches):
            self._reset(line)
        for pattern, m in matches:
            if isinstance(pattern, FatalPattern):
                self._fatal(pattern, text, line)
            else:
                assert isinstance(pattern, FactPattern)
                self._fact(pattern, m.groupdict(), line)

    def _reset(self, line: int) -> None:
        old = self.facts
        self.facts = Facts(runs=old.runs + 1, run_started_line=line, lines_read=old.lines_read)

    def _fatal(self, pattern: FatalPattern, text: str, line: int) -> None:
        quiet = any(name in self.facts.values for name in self._quiet_after)
        hits = self.facts.quiet if quiet else self.facts.fatal
        hit = hits.get(pattern.id)
        if hit is None:
            hits[pattern.id] = FatalHit(pattern.id, pattern.rule, pattern.message, line,
                                                    text.strip()[:MAX_TEXT])
        else:
            hit.count += 1

    def _fact(self, pattern: FactPattern, groups: dict[str, str | None], line: int) -> None:
        values, lines = self.facts.values, self.facts.lines
        found: dict[str, Any] = {}
        for name, raw in groups.items():
            if raw is None:
                continue
            try:
                found[name] = _cast(pattern.types.get(name, "str"), raw.strip())
            except ValueError:
                continue  # a number the regex admitted but Python cannot read: no evidence
        found.update(pattern.set)
        for name, value in found.items():
            if pattern.keep == "first" and name in values:
                continue
            if pattern.keep == "sum":
                values[name] = values.get(name, 0) + value
            elif pattern.keep == "distinct":
                seen = values.setdefault(name, [])
                if value not in seen and len(seen) < MAX_DISTINCT:
                    seen.append(value)
            else:
                values[name] = value
            lines[name] = line
