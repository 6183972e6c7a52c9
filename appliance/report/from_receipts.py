"""Receipts (as `gate.receipt.load` reads them back, typed and validated) → what the report draws of each
(evidence.py). The drawing reads the receipt as its JSON (the model keeps unknown keys): the hardware, the stack and
the per-check params and metrics it draws are a receipt's free-form parts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def check(receipt: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in receipt["checks"] if c.get("name") == name), None)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _bench(receipt: dict[str, Any]) -> dict[str, BenchPoint]:
    c = check(receipt, "bench")
    rows = ((c or {}).get("metrics") or {}).get("rows") or []
    out = {}
    for r in rows:
        t_s = _num(r.get("t_s"))
        if t_s:
            out[str(r["test"])] = BenchPoint(str(r.get("kind", "")), t_s,
                                             tuple(v for v in (_num(x) for x in r.get("values") or []) if v))
    return out


def _recall(receipt: dict[str, Any]) -> RecallPoint | None:
    c = check(receipt, "recall")
    m, p = (c or {}).get("metrics") or {}, (c or {}).get("params") or {}
    if not c or m.get("found") is None or not m.get("total"):
        return None
    runs = tuple(int(x) for x in m.get("runs_found") or [])
    per_run = int(m.get("needles_per_run") or (m["total"] // max(1, len(runs) or int(p.get("runs") or 1))))
    from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING

    return RecallPoint(int(m["found"]), int(m["total"]), per_run, runs,
                       _num(p.get("min_found")) or PASS_LINE, _num(p.get("poisoned_max")) or POISONED_CEILING,
                       str(c["status"]))


def _gsm8k(receipt: dict[str, Any]) -> Gsm8kPoint | None:
    c = check(receipt, "gsm8k")
    m, p = (c or {}).get("metrics") or {}, (c or {}).get("params") or {}
    score = _num(m.get("strict_match"))
    if not c or score is None:
        return None
    return Gsm8kPoint(score, _num(m.get("strict_match_stderr")), _num(p.get("min_accuracy")), str(c["status"]))


def _acceptance(receipt: dict[str, Any]) -> AcceptancePoint | None:
    facts = (receipt.get("engagement") or {}).get("facts") or {}
    positions = tuple(_num(facts.get(f"spec_pos{k}_rate")) for k in range(1, POSITIONS + 1))
    while positions and positions[-1] is None:
        positions = positions[:-1]
    spec = ((check(receipt, "bench") or {}).get("metrics") or {}).get("spec_decode") or {}
    mean = _num(spec.get("mean_acceptance_length")) or _num(facts.get("spec_mean_acceptance_length"))
    if not positions and mean is None:
        return None
    return AcceptancePoint(positions, mean)


def _engagement(e: dict[str, Any]) -> str:
    if not e.get("available"):
        return "not read back (no exporter answered)"
    parts = [f"guard {e.get('guard') or 'no line'}", f"runner {e.get('runner') or '?'}",
             "SM120 decode engaged" if e.get("sm120_decode") else "SM120 decode not engaged"]
    if e.get("kv_tokens"):
        parts.append(f"KV {e['kv_tokens']:,} tokens")
    return ", ".join(parts) + f"; log verdict {e.get('verdict') or '?'}"


def view(receipt: dict[str, Any], source: str, label: str) -> ReceiptView:
    prov = receipt.get("provenance") or {}
    hw = prov.get("hardware") or {}
    gpus = hw.get("gpus") or []
    cpus = f"{hw['cpus']} CPUs" if hw.get("cpus") else None
    devices = f"{len(gpus)} x {gpus[0].get('name')}" if gpus else "no GPU"
    host = ", ".join(str(x) for x in (hw.get("host"), hw.get("machine"), cpus, devices) if x)
    return ReceiptView(
        label=label, source=source, verdict=str(receipt["verdict"]), complete=bool(receipt["complete"]),
        profile=str((prov.get("profile") or {}).get("name") or "?"),
        engine=f"vLLM {(prov.get('engine') or {}).get('version') or '?'}",
        lock=str(prov.get("lock_digest") or "?")[:12], stack=str(prov.get("stack") or "?"),
        started_at=str(receipt.get("started_at", "")), host=host or "?",
        engagement=_engagement(receipt.get("engagement") or {}),
        checks=tuple(CheckRow(str(c["name"]), str(c["status"]), str(c.get("summary", ""))) for c in receipt["checks"]),
        bench=_bench(receipt), recall=_recall(receipt), gsm8k=_gsm8k(receipt), acceptance=_acceptance(receipt))


def labels(paths: Sequence[Path], receipts: Sequence[dict[str, Any]]) -> list[str]:
    """Short unique names: the receipt's folder (`gate --out`), else its profile and start time."""
    names = [p.parent.name if p.name == "receipt.json" else p.stem for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{n} #{i + 1}" for i, n in enumerate(names)]


def views(paths: Sequence[Path]) -> list[ReceiptView]:
    from appliance.gate.receipt import load

    receipts = [load(p).model_dump(mode="json", by_alias=True) for p in paths]
    return [view(r, str(p), name) for p, r, name in zip(paths, receipts, labels(paths, receipts), strict=True)]
