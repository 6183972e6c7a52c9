"""The exact Mann-Whitney U test for two small samples (serve means of two arms), ties included.

The seed compares arms of fresh serves by it ("Mann-Whitney U, p = 0.0043"; "Recall: p = 0.697"). With a few
serves per arm the exact null distribution is cheap: every way of splitting the pooled values into the two arms'
sizes is equally likely, and the two-sided p is twice the smaller tail of that distribution at the observed U
(the convention of scipy's permutation_test, against which tests/test_gate_statistics.py holds it). Midranks
handle ties (serve means repeat: "21.7 / 21.7"), which the textbook tables do not.
scipy would do it too, but it is ~40 MB the gate does not otherwise need.

What a small design can show: with n1 and n2 serves the smallest two-sided p is 2 / C(n1 + n2, n1) (4 vs 4:
2/70 = 0.029). The seed's p = 0.0043 is below what 4 vs 4 serve means can reach, so it was computed over more
values than four serve means a side (perhaps its 3 runs per serve: it does not say which); over the serve means
it does print for the runner arms (V1 22.3 / 21.7 / 21.7 / 21.0, V2 22.0 / 20.7 / 22.7 / 22.7) the exact test
gives p = 28/70 = 0.400 where the seed reports 0.697 — the same conclusion, no measurable difference
(tests/test_gate_statistics.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_EXACT_SPLITS = 2_000_000
"""C(n1 + n2, n1) above this (e.g. more than 12 serves per arm) is refused: the gate is not a statistics package."""


@dataclass(frozen=True)
class MannWhitney:
    u: float
    """U of the first sample: pairs (a, b) with a > b, ties counting one half."""
    p: float
    """Exact two-sided p."""
    min_p: float
    """The smallest two-sided p this design can reach."""
    n1: int
    n2: int


def midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of `values`, tied values sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def u_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """U of `a`: its rank sum (midranks over the pooled values) minus n1 (n1 + 1) / 2."""
    ranks = midranks([*a, *b])
    return sum(ranks[: len(a)]) - len(a) * (len(a) + 1) / 2


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> MannWhitney:
    n1, n2 = len(a), len(b)
    if n1 < 1 or n2 < 1:
        raise ValueError("each arm needs at least one value")
    splits = math.comb(n1 + n2, n1)
    if splits > MAX_EXACT_SPLITS:
        raise ValueError(f"{n1} and {n2} values: {splits} splits is past the exact test's bound")
    ranks = midranks([*a, *b])
    observed = u_statistic(a, b)
    base = n1 * (n1 + 1) / 2
    low = high = 0
    for picked in itertools.combinations(range(n1 + n2), n1):
        u = sum(ranks[i] for i in picked) - base
        low += u <= observed + 1e-9
        high += u >= observed - 1e-9
    return MannWhitney(observed, min(1.0, 2 * min(low, high) / splits), min(1.0, 2 / splits), n1, n2)
