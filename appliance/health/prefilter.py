"""Find the few lines of a chunk that hold one of the table's anchors, at C speed.

Python's regex engine scans fast (GB/s) for a pattern that starts with one fixed byte, and slowly
(~0.2 GB/s) for an alternation of different first bytes. So the anchors are split into a few
groups, each searched by one regex whose alternatives all start with the same byte: an anchor is
represented by its suffix from that byte (its "key"). The bytes are picked by a greedy weighted set
cover over byte and key frequencies in a sample of the log (a rare byte, shared by many anchors,
wins). A candidate line is kept for a pattern only if it holds the pattern's full anchor, so what
matches never depends on the sample, only the speed does.
"""

from __future__ import annotations

import re

MIN_KEY = 4
# Costs in microseconds per MiB of log, to compare groupings (measured on CPython 3.11):
PASS_COST = 400.0  # one more regex pass over the chunk
STOP_COST = 0.05  # the regex stopping at one occurrence of a group's first byte
HIT_COST = 2.0  # a key found: one more candidate line to check


def _keys(anchors: list[bytes], sample: bytes) -> dict[bytes, bytes]:
    """anchor -> key (a suffix of the anchor starting at a chosen byte)."""
    scale = (1 << 20) / max(1, len(sample))
    freq: dict[int, float] = {}

    def key_of(anchor: bytes, byte: int) -> bytes | None:
        i = anchor.find(bytes([byte]))
        return anchor[i:] if i >= 0 and (len(anchor) - i >= MIN_KEY or i == 0) else None

    hits: dict[bytes, float] = {}

    def key_hits(key: bytes) -> float:
        if key not in hits:
            hits[key] = sample.count(key) * scale
        return hits[key]

    chosen: dict[bytes, bytes] = {}
    while len(chosen) < len(anchors):
        open_ = [a for a in anchors if a not in chosen]
        best: tuple[float, int] | None = None
        for byte in {b for a in open_ for b in a}:
            covered = [k for a in open_ if (k := key_of(a, byte))]
            if not covered:
                continue
            if byte not in freq:
                freq[byte] = sample.count(bytes([byte])) * scale
            weight = PASS_COST + STOP_COST * freq[byte] + HIT_COST * sum(key_hits(k) for k in covered)
            if best is None or weight / len(covered) < best[0]:
                best = (weight / len(covered), byte)
        assert best is not None
        for anchor in open_:
            if key := key_of(anchor, best[1]):
                chosen[anchor] = key
    return chosen


def _trie_regex(keys: list[bytes]) -> bytes:
    root: dict[int | None, dict] = {}
    for key in keys:
        node = root
        for byte in key:
            node = node.setdefault(byte, {})
        node[None] = {}

    def build(node: dict[int | None, dict]) -> bytes:
        if None in node:  # a shorter key ends here: finding it is enough
            return b""
        alts = [re.escape(bytes([b])) + build(sub) for b, sub in sorted((k, v) for k, v in node.items()
                                                                       if k is not None)]
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return build(root)


class Prefilter:
    def __init__(self, anchors: dict[bytes, list[int]], sample: bytes) -> None:
        self.counts: dict[bytes, int] = {}
        """Lines found per anchor by the last `lines` call."""
        keys = _keys(sorted(anchors), sample)
        keyed: dict[bytes, list[tuple[bytes, list[int]]]] = {}
        for anchor, indexes in anchors.items():
            keyed.setdefault(keys[anchor], []).append((anchor, indexes))
        # A match yields the shortest key that is a prefix of the text, so every key also answers
        # for the keys it is a prefix of.
        self._entries = {k: [e for other, es in keyed.items() if other.startswith(k) for e in es] for k in keyed}
        groups: dict[int, list[bytes]] = {}
        for key in keyed:
            groups.setdefault(key[0], []).append(key)
        self._regexes = [re.compile(_trie_regex(group)) for group in groups.values()]

    def lines(self, chunk: bytes) -> dict[int, tuple[int, set[int]]]:
        """{line start: (line end, pattern indexes)} for lines holding an anchor."""
        hits: dict[int, tuple[int, set[int]]] = {}
        counts: dict[bytes, int] = {}
        self.counts = counts
        find, rfind, size = chunk.find, chunk.rfind, len(chunk)
        for regex in self._regexes:
            search = regex.search
            m = search(chunk)
            while m is not None:
                start = rfind(b"\n", 0, m.start()) + 1
                end = find(b"\n", m.end())
                end = size if end < 0 else end
                found = []
                for anchor, indexes in self._entries[m.group()]:
                    if find(anchor, start, end) >= 0:
                        counts[anchor] = counts.get(anchor, 0) + 1
                        found += indexes
                if found:
                    entry = hits.get(start)
                    if entry is None:
                        hits[start] = (end, set(found))
                    else:
                        entry[1].update(found)
                m = search(chunk, m.start() + 1)  # +1, not m.end(): another key may overlap this one
        return hits
