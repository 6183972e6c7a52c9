"""`gate serves R1 R2 ...`: recall judged over several fresh serves, one receipt each (the seed's design:
"4 fresh serves per arm (a single clean serve proves nothing at ~50% incidence), 3 arthur c=12 runs each")."""

from __future__ import annotations

from typing import Any

from appliance.errors import ApplianceError
from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING, Bands, judge_serves
from appliance.gate.receipt import check
from appliance.redact import clip


def judge_receipts(receipts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    serves: list[dict[str, Any]] = []
    bands: Bands | None = None
    for label, r in receipts:
        c = check(r, "recall")
        m, p = (c or {}).get("metrics") or {}, (c or {}).get("params") or {}
        if not c or not m.get("total"):
            raise ApplianceError(f"{label}: no recall result in this receipt", value=label,
                                 fix="run `appliance gate --checks recall --recall-runs 3` on each fresh serve")
        line = PASS_LINE if p.get("min_found") is None else float(p["min_found"])  # null: the default line
        ceiling = POISONED_CEILING if p.get("poisoned_max") is None else float(p["poisoned_max"])  # older: none
        these = Bands(line, min(ceiling, line))
        if bands is not None and these != bands:
            raise ApplianceError(f"{label}: recall bands {these} differ from the first receipt's {bands}",
                                 value=label, fix="judge receipts of one profile and gate size together")
        bands = these
        serves.append({"receipt": label, "runs_found": m.get("runs_found") or [m["found"]],
                       "mean": m["found"] / m["total"], "needles_per_run": m.get("needles_per_run", m["total"])})
    assert bands is not None
    verdict, why = judge_serves([s["mean"] for s in serves], bands)
    return {"verdict": verdict, "reason": why, "pass_line": bands.pass_line,
            "poisoned_ceiling": bands.poisoned_ceiling, "serves": serves}


def render(result: dict[str, Any]) -> str:
    lines = [f"{clip(str(s['receipt']), 300)}: runs {s['runs_found']} of {s['needles_per_run']}, mean "
             f"{s['mean']:.3f}" for s in result["serves"]]
    return "\n".join([*lines, "", f"{result['verdict'].upper()}: {clip(result['reason'], 2000)}"])
