"""`gate serves B1 B2 ... --against A1 A2 ...`: a candidate arm of fresh serves (B) judged against a reference arm
(A) on their recall serve means by the exact Mann-Whitney U test, the seed's comparison ("4 fresh serves per arm
... Mann-Whitney U, p = 0.0043").

Each arm is first judged on its own (recall_bands.judge_serves); the comparison then asks whether the candidate's
serve means sit lower than the reference's beyond what shuffling the serves between the arms gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from appliance.errors import ApplianceError
from appliance.gate.mannwhitney import MAX_EXACT_SPLITS, mann_whitney
from appliance.gate.receipt_model import Receipt
from appliance.gate.serves import ServesJudgement, judge_receipts
from appliance.jsonstrict import JsonObject

ALPHA = 0.05


@dataclass(frozen=True)
class ArmsJudgement:
    verdict: str
    reason: str
    u: float
    p: float
    min_attainable_p: float
    alpha: float
    mean_a: float
    mean_b: float
    a: ServesJudgement
    """The reference arm, judged on its own."""
    b: ServesJudgement
    """The candidate arm, judged on its own."""

    def to_json(self) -> JsonObject:
        return {"verdict": self.verdict, "reason": self.reason, "u": self.u, "p": self.p,
                "min_attainable_p": self.min_attainable_p, "alpha": self.alpha, "mean_a": self.mean_a,
                "mean_b": self.mean_b, "a": self.a.to_json(), "b": self.b.to_json()}


def judge_arms(reference: list[tuple[str, Receipt]], candidate: list[tuple[str, Receipt]]) -> ArmsJudgement:
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
    return ArmsJudgement(verdict, why, mw.u, round(mw.p, 5), round(mw.min_p, 5), ALPHA, round(mean_a, 4),
                         round(mean_b, 4), arm_a, arm_b)


def render(result: ArmsJudgement) -> str:
    def arm(name: str, r: ServesJudgement) -> list[str]:
        means = ", ".join(f"{s.mean:.3f}" for s in r.serves)
        return [f"arm {name}: serve means {means} -> {r.verdict} ({r.reason})"]

    return "\n".join([*arm("A (reference)", result.a), *arm("B (candidate)", result.b), "",
                      f"Mann-Whitney U = {result.u:g}, exact two-sided p = {result.p:.4f} (smallest attainable "
                      f"{result.min_attainable_p:.4f})",
                      f"{result.verdict.upper()}: {result.reason}"])
