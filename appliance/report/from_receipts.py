"""Receipts (as `gate.receipt.load` reads them back, typed and validated) → what the report draws of each
(evidence.py). The drawing reads the typed receipt's attributes; only the engine's log facts (engagement.facts) are
open, as the exporter extracted them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from appliance.gate.receipt_model import Engagement, Gsm8kCheck, Provenance, Receipt
from appliance.report.evidence import (
    AcceptancePoint,
    BenchPoint,
    CheckRow,
    Gsm8kPoint,
    RecallPoint,
    ReceiptView,
)

POSITIONS = 7
"""Draft positions the log-check table reads (spec_pos1_rate ... spec_pos7_rate)."""


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _bench(receipt: Receipt) -> dict[str, BenchPoint]:
    c = receipt.bench()
    if c is None or c.metrics is None:
        return {}
    return {test: BenchPoint(r.kind, r.t_s, tuple(v for v in r.values or [] if v))
            for test, r in c.metrics.measured().items() if r.t_s}


def _recall(receipt: Receipt) -> RecallPoint | None:
    c = receipt.recall()
    m = c.metrics if c else None
    if c is None or m is None or m.found is None or not m.total:
        return None
    runs = tuple(m.runs_found or [])
    asked = c.params.runs if c.params and c.params.runs else 1
    per_run = m.needles_per_run or m.total // max(1, len(runs) or asked)
    from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING

    p = c.params
    return RecallPoint(m.found, m.total, per_run, runs, (p.min_found if p else None) or PASS_LINE,
                       (p.poisoned_max if p else None) or POISONED_CEILING, c.status)


def _gsm8k(receipt: Receipt) -> Gsm8kPoint | None:
    c = next((c for c in receipt.checks if isinstance(c, Gsm8kCheck)), None)
    m = c.metrics if c else None
    if c is None or m is None or m.strict_match is None:
        return None
    return Gsm8kPoint(m.strict_match, m.strict_match_stderr, c.params.min_accuracy if c.params else None, c.status)


def _acceptance(receipt: Receipt) -> AcceptancePoint | None:
    facts = receipt.engagement.facts  # the engine log's facts: open (each channel's engine prints its own)
    positions = tuple(_num(facts.get(f"spec_pos{k}_rate")) for k in range(1, POSITIONS + 1))
    while positions and positions[-1] is None:
        positions = positions[:-1]
    bench = receipt.bench()
    spec = bench.metrics.spec_decode if bench and bench.metrics else None
    mean = (spec.mean_acceptance_length if spec else None) or _num(facts.get("spec_mean_acceptance_length"))
    if not positions and mean is None:
        return None
    return AcceptancePoint(positions, mean)


def _engagement(e: Engagement) -> str:
    if not e.available:
        return "not read back (no exporter answered)"
    parts = [f"guard {e.guard or 'no line'}", f"runner {e.runner or '?'}",
             "SM120 decode engaged" if e.sm120_decode else "SM120 decode not engaged"]
    if e.kv_tokens:
        parts.append(f"KV {e.kv_tokens:,} tokens")
    return ", ".join(parts) + f"; log verdict {e.verdict or '?'}"


def _stack(prov: Provenance) -> str:
    """The engine line the serve ran, as the receipt records it: its channel (an older receipt: its `stack`), and the
    image's engine and revision when it ran in one."""
    parts = [prov.channel or prov.stack or "?"]
    if prov.image:
        image = ", ".join(f"{k} {prov.image[k]}" for k in ("engine", "revision") if prov.image.get(k))
        parts.append(f"image ({image})" if image else "image")
    return "; ".join(parts)


def view(receipt: Receipt, source: str, label: str) -> ReceiptView:
    prov = receipt.provenance
    hw = prov.hardware
    gpus = hw.gpus if hw else []
    cpus = f"{hw.cpus} CPUs" if hw and hw.cpus else None
    devices = f"{len(gpus)} x {gpus[0].name}" if gpus else "no GPU"
    host = ", ".join(str(x) for x in (hw.host if hw else None, hw.machine if hw else None, cpus, devices) if x)
    return ReceiptView(
        label=label, source=source, verdict=receipt.verdict, complete=receipt.complete,
        profile=receipt.profile.name or "?", engine=f"vLLM {receipt.engine_version or '?'}",
        lock=(prov.lock_digest or "?")[:12], stack=_stack(prov), started_at=receipt.started_at, host=host or "?",
        engagement=_engagement(receipt.engagement),
        checks=tuple(CheckRow(c.name, c.status, c.summary) for c in receipt.checks),
        bench=_bench(receipt), recall=_recall(receipt), gsm8k=_gsm8k(receipt), acceptance=_acceptance(receipt))


def labels(paths: Sequence[Path], receipts: Sequence[Receipt]) -> list[str]:
    """Short unique names: the receipt's folder (`gate --out`), else its profile and start time."""
    names = [p.parent.name if p.name == "receipt.json" else p.stem for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{n} #{i + 1}" for i, n in enumerate(names)]


def views(paths: Sequence[Path], receipts: Sequence[Receipt] | None = None) -> list[ReceiptView]:
    """The receipts at `paths` drawn; `receipts` when the caller has read them already."""
    from appliance.gate.receipt import load

    receipts = receipts if receipts is not None else [load(p) for p in paths]
    return [view(r, str(p), name) for p, r, name in zip(paths, receipts, labels(paths, receipts), strict=True)]
