"""`gate serves B1 B2 ... --against A1 A2 ...`: a candidate arm of fresh serves (B) judged against a reference arm
(A) on their recall serve means by the exact Mann-Whitney U test, the seed's comparison ("4 fresh serves per arm
... Mann-Whitney U, p = 0.0043").

Each arm is first judged on its own (recall_bands.judge_serves); the comparison then asks whether the candidate's
serve means sit lower than the reference's beyond what shuffling the serves between the arms gives.
"""

from __future__ import annotations

import math
from typing import Any

from appliance.errors import ApplianceError
from appliance.gate.mannwhitney import MAX_EXACT_SPLITS, mann_whitney
from appliance.gate.receipt_model import Receipt
from appliance.gate.serves import judge_receipts

ALPHA = 0.05


def judge_arms(reference: list[tuple[str, Receipt]], candidate: list[tuple[str, Receipt]]) -> dict[str, Any]:
    """A = the reference arm, B = the candidate arm (the one judged)."""
    arm_a, arm_b = judge_receipts(reference), judge_receipts(candidate)
    if (arm_a.pass_line, arm_a.poisoned_ceiling) != (arm_b.pass_line, arm_b.poisoned_ceiling):
        raise ApplianceError("the two arms were gated with different recall bands", value="--against",
                             fix="compare receipts of one profile and gate size")
    means_a = [s.mean for s in arm_a.serves]
    means_b = [s.mean for s in arm_b.serves]
    if math.comb(len(means_a) + len(means_b), len(means_a)) > MAX_EXACT_SPLITS:
        raise ApplianceError(f"--against: {len(means_b)} vs {len(means_a)} serves: the exact test would count past "
                             f"{MAX_EXACT_SPLITS:,} splits of them", field="--against",
                             value=f"{len(means_a)} reference receipts", fix="compare at most 11 serves per arm "
                             "(4 per arm can already reach p < 0.05)",
                             reason="the test enumerates every split exactly; past the bound it would run for minutes")
    mw = mann_whitney(means_a, means_b)
    mean_a, mean_b = sum(means_a) / len(means_a), sum(means_b) / len(means_b)
    if mw.min_p >= ALPHA:
        verdict = "unresolved"
        why = (f"{mw.n1} vs {mw.n2} serves can reach p >= {mw.min_p:.3f} at best, never below {ALPHA}: add serves "
               f"(the seed used 4 per arm)")
    elif mw.p < ALPHA:
        verdict = "regression" if mean_b < mean_a else "improvement"
        why = (f"p = {mw.p:.4f} < {ALPHA}: the candidate's serve means sit {'below' if mean_b < mean_a else 'above'} "
               f"the reference's")
    else:
        verdict = "no measurable difference"
        why = f"p = {mw.p:.4f} >= {ALPHA}"
    return {"verdict": verdict, "reason": why, "u": mw.u, "p": round(mw.p, 5), "min_attainable_p": round(mw.min_p, 5),
            "alpha": ALPHA, "mean_a": round(mean_a, 4), "mean_b": round(mean_b, 4), "a": arm_a.to_json(),
            "b": arm_b.to_json()}


def render(result: dict[str, Any]) -> str:
    def arm(name: str, r: dict[str, Any]) -> list[str]:
        means = ", ".join(f"{s['mean']:.3f}" for s in r["serves"])
        return [f"arm {name}: serve means {means} -> {r['verdict']} ({r['reason']})"]

    return "\n".join([*arm("A (reference)", result["a"]), *arm("B (candidate)", result["b"]), "",
                      f"Mann-Whitney U = {result['u']:g}, exact two-sided p = {result['p']:.4f} (smallest attainable "
                      f"{result['min_attainable_p']:.4f})",
                      f"{result['verdict'].upper()}: {result['reason']}"])
