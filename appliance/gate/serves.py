"""`gate serves R1 R2 ...`: recall judged over several fresh serves, one receipt each (the seed's design:
"4 fresh serves per arm (a single clean serve proves nothing at ~50% incidence), 3 arthur c=12 runs each")."""

from __future__ import annotations

from typing import Any

from appliance.errors import ApplianceError
from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING, Bands, judge_serves
from appliance.gate.receipt_model import RecallParams, Receipt
from appliance.redact import clip


def judge_receipts(receipts: list[tuple[str, Receipt]]) -> dict[str, Any]:
    serves: list[dict[str, Any]] = []
    bands: Bands | None = None
    for label, r in receipts:
        c = r.recall()
        m = c.metrics if c else None
        if m is None or m.found is None or not m.total:
            raise ApplianceError(f"{label}: no recall result in this receipt", value=label,
                                 fix="run `appliance gate --checks recall --recall-runs 3` on each fresh serve")
        p = (c.params if c else None) or RecallParams()
        line = PASS_LINE if p.min_found is None else p.min_found
        these = Bands(line, min(POISONED_CEILING if p.poisoned_max is None else p.poisoned_max, line))  # older: none
        if bands is not None and these != bands:
            raise ApplianceError(f"{label}: recall bands {these} differ from the first receipt's {bands}",
                                 value=label, fix="judge receipts of one profile and gate size together")
        bands = these
        serves.append({"receipt": label, "runs_found": m.runs_found or [m.found], "mean": m.found / m.total,
                       "needles_per_run": m.total if m.needles_per_run is None else m.needles_per_run})
    assert bands is not None
    verdict, why = judge_serves([s["mean"] for s in serves], bands)
    return {"verdict": verdict, "reason": why, "pass_line": bands.pass_line,
            "poisoned_ceiling": bands.poisoned_ceiling, "serves": serves}


def render(result: dict[str, Any]) -> str:
    lines = [f"{clip(str(s['receipt']), 300)}: runs {s['runs_found']} of {s['needles_per_run']}, mean "
             f"{s['mean']:.3f}" for s in result["serves"]]
    return "\n".join([*lines, "", f"{result['verdict'].upper()}: {clip(result['reason'], 2000)}"])
