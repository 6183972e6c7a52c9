"""`gate paired A1:B1 A2:B2 ...`: the seed's blocked design, judged as the seed judged it.

Seed: "10 blocks, both arms inside each node pair, exact sign-flip permutation test, Holm-corrected across the
six prefill cells" — and why: "a coarse range screen over the same 10 blocks returns 'no measurable difference'
on all six prefill cells, while the paired test finds all six". Each block is one receipt of build A and one of
build B gated back to back on the same machines; each bench cell's per-block difference (log ratio B/A) is
tested by flipping signs over all 2^n assignments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from appliance.errors import ApplianceError
from appliance.gate.receipt_model import Receipt

ALPHA = 0.05
MAX_BLOCKS = 20
"""2^20 sign assignments: still exact, still quick."""


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Two-sided exact p of the mean difference under the null that each block's sign is a coin flip."""
    n = len(diffs)
    if n == 0:
        return 1.0
    observed = abs(sum(diffs)) - 1e-12
    hits = sum(1 for signs in itertools.product((1, -1), repeat=n)
               if abs(sum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed)
    return hits / 2**n


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p values, in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _rows(receipt: Receipt) -> dict[str, float]:
    bench = receipt.bench()
    if bench is None or bench.metrics is None:
        return {}
    return {test: float(row.t_s) for test, row in bench.metrics.measured().items() if row.t_s}


def judge_blocks(blocks: list[tuple[Receipt, Receipt]]) -> dict[str, Any]:
    if not 2 <= len(blocks) <= MAX_BLOCKS:
        raise ApplianceError(f"{len(blocks)} block(s): the paired test needs 2 to {MAX_BLOCKS}", value=len(blocks),
                             fix="give one A:B receipt pair per block (the seed used 10)")
    cells = sorted(set.intersection(*(set(_rows(a)) & set(_rows(b)) for a, b in blocks)))
    if not cells:
        raise ApplianceError("no bench row is in every receipt", fix="gate every block with --checks bench")
    diffs = {c: [math.log(_rows(b)[c] / _rows(a)[c]) for a, b in blocks] for c in cells}
    raw = [sign_flip_p(diffs[c]) for c in cells]
    out = []
    for cell, p, p_holm in zip(cells, raw, holm(raw), strict=True):
        mean = math.exp(sum(diffs[cell]) / len(blocks)) - 1
        verdict = ("no measurable difference" if p_holm >= ALPHA
                   else "regression" if mean < 0 else "improvement")
        out.append({"cell": cell, "mean_change": round(mean, 4), "p": round(p, 5), "p_holm": round(p_holm, 5),
                    "verdict": verdict})
    return {"blocks": len(blocks), "alpha": ALPHA, "cells": out,
            "min_attainable_p": 2 / 2 ** len(blocks)}


def render(result: dict[str, Any]) -> str:
    lines = [f"{result['blocks']} blocks; exact sign-flip permutation test, Holm-corrected at {result['alpha']} "
             f"(smallest attainable p {result['min_attainable_p']:.4f})", ""]
    width = max(len(c["cell"]) for c in result["cells"])
    lines += [f"{c['cell']:<{width}}  {c['mean_change'] * 100:+6.2f} %  p {c['p']:.4f}  Holm {c['p_holm']:.4f}  "
              f"{c['verdict']}" for c in result["cells"]]
    return "\n".join(lines)
