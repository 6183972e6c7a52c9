"""`gate paired A1:B1 A2:B2 ...`: the seed's blocked design, judged as the seed judged it.

Seed: "10 blocks, both arms inside each node pair, exact sign-flip permutation test, Holm-corrected across the
six prefill cells" — and why: "a coarse range screen over the same 10 blocks returns 'no measurable difference'
on all six prefill cells, while the paired test finds all six". Each block is one receipt of build A and one of
build B gated back to back on the same machines; each bench cell's per-block difference (log ratio B/A) is
tested by flipping signs over all 2^n assignments.

The Holm family is the prefill cells only (pp, ctx_pp), as the seed pre-registered: "Decode is not resolved in
either direction — `tg128` was declared unresolvable before the run (its within-build spread equals its entire
historical range) and is reported for the record only." Decode cells (tg, ctx_tg) get their mean change and raw p
for the record, never a verdict, and they do not widen the prefill family's correction.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from appliance.errors import ApplianceError
from appliance.gate.receipt_model import BenchRow, Receipt
from appliance.jsonstrict import JsonObject

ALPHA = 0.05
PREFILL_KINDS = frozenset({"pp", "ctx_pp"})
"""The cells judged (the Holm family); every other kind is reported for the record."""
FOR_THE_RECORD = "for the record (decode: pre-registered as unresolvable, no verdict)"
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


def _bench_rows(receipt: Receipt) -> dict[str, BenchRow]:
    bench = receipt.bench()
    if bench is None or bench.metrics is None:
        return {}
    return bench.metrics.measured()


def _rows(receipt: Receipt) -> dict[str, float]:
    return {test: float(row.t_s) for test, row in _bench_rows(receipt).items() if row.t_s}


def _kinds(receipt: Receipt) -> dict[str, str]:
    return {test: row.kind for test, row in _bench_rows(receipt).items()}


@dataclass(frozen=True)
class PairedCell:
    cell: str
    kind: str | None
    mean_change: float
    p: float
    p_holm: float | None
    """None for a cell outside the Holm family (decode: for the record)."""
    verdict: str


@dataclass(frozen=True)
class PairedJudgement:
    blocks: int
    alpha: float
    cells: list[PairedCell]
    holm_family: list[str]
    min_attainable_p: float

    def to_json(self) -> JsonObject:
        return asdict(self)


def judge_blocks(blocks: list[tuple[Receipt, Receipt]]) -> PairedJudgement:
    if not 2 <= len(blocks) <= MAX_BLOCKS:
        raise ApplianceError(f"{len(blocks)} block(s): the paired test needs 2 to {MAX_BLOCKS}", value=len(blocks),
                             fix="give one A:B receipt pair per block (the seed used 10)")
    cells = sorted(set.intersection(*(set(_rows(a)) & set(_rows(b)) for a, b in blocks)))
    if not cells:
        raise ApplianceError("no bench row is in every receipt", fix="gate every block with --checks bench")
    diffs = {c: [math.log(_rows(b)[c] / _rows(a)[c]) for a, b in blocks] for c in cells}
    kinds = _kinds(blocks[0][0])
    family = [c for c in cells if kinds.get(c) in PREFILL_KINDS]
    raw = {c: sign_flip_p(diffs[c]) for c in cells}
    adjusted = dict(zip(family, holm([raw[c] for c in family]), strict=True))
    out = []
    for cell in cells:
        mean = math.exp(sum(diffs[cell]) / len(blocks)) - 1
        if cell in adjusted:
            p_holm: float | None = round(adjusted[cell], 5)
            verdict = ("no measurable difference" if adjusted[cell] >= ALPHA
                       else "regression" if mean < 0 else "improvement")
        else:
            p_holm, verdict = None, FOR_THE_RECORD
        out.append(PairedCell(cell, kinds.get(cell), round(mean, 4), round(raw[cell], 5), p_holm, verdict))
    return PairedJudgement(len(blocks), ALPHA, out, family, 2 / 2 ** len(blocks))


def render(result: PairedJudgement) -> str:
    lines = [f"{result.blocks} blocks; exact sign-flip permutation test, Holm-corrected at {result.alpha} across "
             f"the {len(result.holm_family)} prefill cell(s) (smallest attainable p "
             f"{result.min_attainable_p:.4f})", ""]
    width = max(len(c.cell) for c in result.cells)
    for c in result.cells:
        holm_p = f"Holm {c.p_holm:.4f}" if c.p_holm is not None else "Holm    -  "
        lines.append(f"{c.cell:<{width}}  {c.mean_change * 100:+6.2f} %  p {c.p:.4f}  {holm_p}  {c.verdict}")
    return "\n".join(lines)
