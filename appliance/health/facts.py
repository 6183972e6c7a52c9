"""Facts from log lines: the table's patterns applied to chunks of whole lines.

Speed: a serve log is mostly lines nobody needs (access log, per-step stats). The prefilter finds
the lines holding one of the table's literal anchors at C speed (Hyperscan, or its pure-Python
fallback: prefilter.py); only those are decoded and matched.
A `keep: last` fact is overwritten by its next line, so within a chunk only its last line is
matched, and an anchor that turns out frequent (DSpark metrics every few lines) is looked up from
the chunk's end instead. Memory: facts are a fixed set of names, fatal hits keep one example line
and a count, `distinct` facts keep at most MAX_DISTINCT values, `count` facts one number.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from appliance.health.newlines import count_newlines
from appliance.health.prefilter import AnchorFinder, Engine, Found, group_lines, make_prefilter, resolve_engine
from appliance.health.scantable import LinePattern, ScanTable
from appliance.jsonstrict import JsonObject
from appliance.redact import redact

if TYPE_CHECKING:
    from appliance.health.table import LogTable

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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
        return {k: list(v) if isinstance(v, list) else v for k, v in sorted(self.values.items())}


def _int(raw: str) -> int:
    return int(raw.replace(",", ""))


def _float(raw: str) -> float:
    return float(raw.replace(",", ""))


def _text(raw: str) -> str:
    """A free-text fact (a version, a fallback reason): masked once here, so no reader of the facts (logscan,
    /status, /metrics labels, a receipt) can show a secret the line carried; then capped."""
    return redact(raw.strip())[:MAX_TEXT]


_CASTS: dict[str, Callable[[str], Any]] = {"int": _int, "float": _float, "str": _text}


class _Compiled:
    """A pattern prepared for the hot path (plain attributes, casts resolved; the regex compiled when the first
    candidate line of it is met: most of a table's patterns never meet one in a serve log)."""

    __slots__ = ("_search", "casts", "constants", "fatal", "keep", "needs", "pattern", "reset", "tail")

    def __init__(self, p: LinePattern, tail: frozenset[str]) -> None:
        types = dict(p.types)
        self.pattern = p
        self.fatal = p.fatal
        self.reset = p.reset
        self.casts: tuple[tuple[str, Callable[[str], Any]], ...] = () if p.fatal else tuple(
            (g, _CASTS[types.get(g, "str")]) for g in p.groups)
        self.constants = p.constants
        self.keep = p.keep
        self.tail = tail
        """Facts of the line's optional tail: a line without them clears them (the line is one record)."""
        self.needs = frozenset() if p.fatal else frozenset(p.groups) - frozenset(p.optional)
        """Groups every match sets (a cast may still fail on what the regex admitted)."""
        self._search: Callable[[str], re.Match[str] | None] | None = None

    def search(self, text: str) -> re.Match[str] | None:
        if self._search is None:
            self._search = re.compile(self.pattern.regex).search
        return self._search(text)

    def found(self, m: re.Match[str]) -> list[tuple[str, Any]]:
        """The facts a match gives: each group the match set whose value casts, then the constants."""
        out: list[tuple[str, Any]] = []
        for name, cast in self.casts:
            raw = m[name]
            if raw is not None:
                try:
                    out.append((name, cast(raw)))
                except ValueError:
                    continue  # a number the regex admitted but Python cannot read: no evidence
        out += self.constants
        return out


class _Latest:
    """Walking one pattern's lines from the chunk's end: the lines to keep so that each fact comes from the last
    line that gives it, as the reference reading has it. That is the last match, and an earlier one only where it
    gives a required group the later matches could not cast; the optional tail is the last match's (its record)."""

    __slots__ = ("c", "needed")

    def __init__(self, c: _Compiled) -> None:
        self.c = c
        self.needed: set[str] | None = None
        """None: no match yet; then the required groups no kept line has given."""

    @property
    def done(self) -> bool:
        return self.needed is not None and not self.needed

    def keeps(self, text: str) -> bool:
        m = self.c.search(text)
        if m is None:
            return False
        given = {name for name, _ in self.c.found(m)} if self.c.needs else set()
        if self.needed is None:
            self.needed = set(self.c.needs) - given
            return True
        if not self.needed & given:
            return False
        self.needed -= given
        return True


class Extractor:
    """Feed chunks of whole lines (as bytes); read `facts`.

    `engine` picks the prefilter (prefilter.py). `reference` also turns off the shortcuts below (only the
    last line of a `keep: last` pattern per chunk, dense anchors found from the chunk's end): every
    candidate line is matched in order, the plain reading every other engine must agree with."""

    def __init__(self, table: LogTable | ScanTable, engine: Engine = "auto") -> None:
        self.engine = resolve_engine(engine)
        scan = table if isinstance(table, ScanTable) else table.scan_table
        producers = Counter(name for p in scan.facts for name in set(p.produces()))
        quiet = set(scan.quiet_after)

        def tail(p: LinePattern) -> frozenset[str]:
            """A one-form `keep: last` line's optional tail is its own (no other pattern gives those facts): the
            line is one record, and a later line without the tail clears it (a line printed without the guard's
            manager list does not keep an earlier line's list)."""
            own = all(producers[name] == 1 for name in p.optional)
            return frozenset(p.optional) if (not p.fatal and not p.reset and p.keep == "last" and p.one_form
                                             and own) else frozenset()

        self._compiled = [_Compiled(p, tail(p)) for p in (*scan.facts, *scan.fatal)]
        self._anchors: dict[bytes, list[int]] = {}
        for index, c in enumerate(self._compiled):
            for anchor in c.pattern.anchors:
                self._anchors.setdefault(anchor.encode(), []).append(index)
        self._prefilter: AnchorFinder | None = None
        self._searched: list[bytes] = []
        """The anchors the prefilter looks for (all but the dense ones), by the number it reports."""
        self._patterns_of: list[frozenset[int]] = []
        self._resets_of: list[frozenset[int]] = []
        # A `count` fact is 0 until its line is seen: zero NameErrors is evidence, not its absence.
        self._counted = tuple(name for c in self._compiled if c.keep == "count" for name in c.pattern.produces())
        self.facts = Facts(values=dict.fromkeys(self._counted, 0))
        self._quiet_after = scan.quiet_after
        self._resets = {i for i, c in enumerate(self._compiled) if c.reset}
        # `keep: last` facts that nothing reads in line order (quiet_after does), of a line with one form
        # (table.FactPattern.one_form) whose tail is its record: within one chunk only their last line counts
        # (and an earlier one only for a number the last could not cast: _Latest), so the others are dropped
        # before they are decoded.
        self._last_only = {i for i, c in enumerate(self._compiled) if not c.fatal and not c.reset
                           and c.keep == "last" and not quiet & set(c.pattern.produces())
                           and c.pattern.one_form and c.tail == frozenset(c.pattern.optional)
                           and self.engine != "reference"}
        self._dense: set[bytes] = set()

    def feed(self, chunk: bytes) -> None:
        """Scan `chunk`, which holds whole lines (the last one may lack its newline)."""
        if self._prefilter is None:  # the first chunk tells which bytes are rare in this log
            self._new_prefilter(chunk)
        assert self._prefilter is not None
        found = self._prefilter.find(chunk)
        if self.engine == "reference":
            last_reset, hits = 0, group_lines(chunk, found, self._patterns_of)
        else:
            # A reset starts the facts afresh, so before the chunk's last one only reset lines count (as runs):
            # a crash-looping engine restarts every few thousand lines.
            last_reset = self._last_reset(chunk, found)
            hits = group_lines(chunk, found, self._patterns_of, last_reset, self._resets_of)
        self._drop_overwritten(chunk, hits)
        self._add_dense(chunk, hits, last_reset)
        if len(found) >= DENSE:
            frequent = [self._searched[number] for number, n in Counter(map(itemgetter(1), found)).items()
                        if n >= DENSE]
            dense = {a for a in frequent if set(self._anchors[a]) <= self._last_only}
            if dense:
                self._dense |= dense
                self._new_prefilter(chunk)
        order = sorted(hits)
        replaced = bisect_left(order, last_reset)  # lines of runs this chunk's last reset replaces: resets only
        self.facts.runs += sum(self._any_match(chunk, start, hits[start][1]) for start in order[:replaced])
        base, counted, index = self.facts.lines_read, 0, 0
        for start in order[replaced:]:
            end, indexes = hits[start]
            index += count_newlines(chunk, counted, start)
            counted = start
            self._apply(chunk[start:end].decode("utf-8", "replace"), base + index + 1, indexes)
        # One pass counts the newlines: up to the last hit above, from there to the end here.
        index += count_newlines(chunk, counted)
        self.facts.lines_read = base + index + (1 if chunk and not chunk.endswith(b"\n") else 0)

    def _new_prefilter(self, chunk: bytes) -> None:
        self._searched = [a for a in self._anchors if a not in self._dense]
        self._patterns_of = [frozenset(self._anchors[a]) for a in self._searched]
        self._resets_of = [p & self._resets for p in self._patterns_of]
        self._prefilter = make_prefilter(self._searched, chunk[: 1 << 18], self.engine)

    def _last_reset(self, chunk: bytes, found: Found) -> int:
        """The start of the chunk's last line that a reset pattern matches (0: none)."""
        resets_of, rfind = self._resets_of, chunk.rfind
        line, candidates = -1, set()
        for end, number in reversed(found):  # the occurrences of one line are neighbours
            if not resets_of[number]:
                continue
            start = rfind(b"\n", 0, end) + 1
            if start != line:
                if candidates and self._any_match(chunk, line, candidates):
                    return line
                line, candidates = start, set()
            candidates |= resets_of[number]
        return line if candidates and self._any_match(chunk, line, candidates) else 0

    def _any_match(self, chunk: bytes, start: int, indexes: set[int]) -> bool:
        end = chunk.find(b"\n", start)
        text = chunk[start:len(chunk) if end < 0 else end].decode("utf-8", "replace")
        return any(self._compiled[i].search(text) for i in indexes)

    def _drop_overwritten(self, chunk: bytes, hits: dict[int, tuple[int, set[int]]]) -> None:
        """Keep, of each last-only pattern, the lines _Latest keeps: its last matching line, as a rule (none is
        left before the chunk's last reset: group_lines kept only reset patterns there)."""
        order = sorted(hits)

        def line(start: int) -> str:
            return chunk[start:hits[start][0]].decode("utf-8", "replace")

        by_pattern: dict[int, list[int]] = {}
        for start in order:
            for i in hits[start][1] & self._last_only:
                by_pattern.setdefault(i, []).append(start)
        for i, starts in by_pattern.items():
            latest = _Latest(self._compiled[i])
            for start in reversed(starts):
                if latest.done or not latest.keeps(line(start)):
                    hits[start][1].discard(i)
        for start in order:
            if not hits[start][1]:
                del hits[start]

    def _add_dense(self, chunk: bytes, hits: dict[int, tuple[int, set[int]]], last_reset: int) -> None:
        """For each dense anchor, walk back from the chunk's end to the last line each of its patterns
        matches (bytes.rfind: a few microseconds where the regex pass would stop at every line), and on where
        _Latest needs an earlier line."""
        for anchor in self._dense:
            walks = {i: _Latest(self._compiled[i]) for i in self._anchors[anchor]}
            pos = len(chunk)
            while (todo := [i for i, w in walks.items() if not w.done]) and (at := chunk.rfind(anchor, 0, pos)) >= 0:
                start = chunk.rfind(b"\n", 0, at) + 1
                if start < last_reset:
                    break
                end = chunk.find(b"\n", at)
                end = len(chunk) if end < 0 else end
                text = chunk[start:end].decode("utf-8", "replace")
                kept = {i for i in todo if walks[i].keeps(text)}
                if kept:
                    hits.setdefault(start, (end, set()))[1].update(kept)
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
                self._fatal(c.pattern, text, line)
            else:
                self._fact(c, m, line)

    def _reset(self, line: int) -> None:
        old = self.facts
        self.facts = Facts(values=dict.fromkeys(self._counted, 0), runs=old.runs + 1, run_started_line=line,
                           lines_read=old.lines_read)

    @property
    def stopping(self) -> bool:
        """A `quiet_after` fact was seen in this run: the engine is shutting down on request."""
        return any(name in self.facts.values for name in self._quiet_after)

    def _fatal(self, pattern: LinePattern, text: str, line: int) -> None:
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
        found = c.found(m)
        if keep == "last":
            values.update(found)
            lines.update((name, line) for name, _ in found)
            for name in c.tail.difference(name for name, _ in found):
                values.pop(name, None)
                lines.pop(name, None)
            return
        if keep == "count":
            for name, _ in found:
                values[name] = values.get(name, 0) + 1
                lines[name] = line
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
