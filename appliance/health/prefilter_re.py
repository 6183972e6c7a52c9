"""The pure-Python line prefilter (prefilter.py's fallback where Hyperscan cannot load): the same lines, at
a quarter to a third of its speed.

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


class RePrefilter:
    engine = "re"

    def __init__(self, anchors: list[bytes], sample: bytes) -> None:
        keys = _keys(sorted(set(anchors)), sample)
        keyed: dict[bytes, list[tuple[bytes, int]]] = {}
        for number, anchor in enumerate(anchors):
            keyed.setdefault(keys[anchor], []).append((anchor, number))
        # A match yields the shortest key that is a prefix of the text, so every key also answers
        # for the keys it is a prefix of.
        self._entries = {k: [e for other, es in keyed.items() if other.startswith(k) for e in es] for k in keyed}
        groups: dict[int, list[bytes]] = {}
        for key in keyed:
            groups.setdefault(key[0], []).append(key)
        self._regexes = [re.compile(_trie_regex(group)) for group in groups.values()]

    def find(self, chunk: bytes) -> list[tuple[int, int]]:
        """(end offset, anchor number) of each anchor's first occurrence in each line holding it, by offset."""
        found: set[tuple[int, int]] = set()
        find, rfind, size = chunk.find, chunk.rfind, len(chunk)
        for regex in self._regexes:
            search = regex.search
            m = search(chunk)
            while m is not None:
                start = rfind(b"\n", 0, m.start()) + 1
                end = find(b"\n", m.end())
                end = size if end < 0 else end
                for anchor, number in self._entries[m.group()]:
                    if (at := find(anchor, start, end)) >= 0:
                        found.add((at + len(anchor), number))
                m = search(chunk, m.start() + 1)  # +1, not m.end(): another key may overlap this one
        return sorted(found)
