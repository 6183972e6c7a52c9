"""U2: a qualification's verdict, from the candidate's gate receipt compared with the incumbent's by `gate compare`'s
noise rules (receipts of two channels, compared knowingly: `across_channels`).

- refuse: the candidate never turned ready; its receipt fails (a check, its log expectations, a fatal line); or a
  difference beyond the noise is a regression (bench beyond the seed's band and 5 x the run spread, recall into the
  poisoned band, structured output or think leaks, an engagement fact lost);
- inconclusive: nothing refuses it, but something could not decide (recall between its bands, an interrupted gate):
  run more serves;
- promote: otherwise. Differences within the noise are listed as notes, never reasons to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from appliance.gate.compare import ReceiptComparison, compare
from appliance.gate.receipt_model import Receipt
from appliance.jsonstrict import JsonObject

Verdict = Literal["promote", "refuse", "inconclusive"]
EXIT: dict[Verdict, int] = {"promote": 0, "refuse": 1, "inconclusive": 3}


@dataclass
class Judgement:
    verdict: Verdict
    reasons: list[str]
    notes: list[str] = field(default_factory=list)
    comparison: ReceiptComparison | None = None

    def to_json(self) -> JsonObject:
        return {"verdict": self.verdict, "reasons": self.reasons, "notes": self.notes,
                "comparison": self.comparison.to_json() if self.comparison else None}


def never_ready(why: str) -> Judgement:
    return Judgement("refuse", [f"U2 the candidate never turned ready: {why}"])


def judge(inc: Receipt, cand: Receipt) -> Judgement:
    """`inc`, `cand`: the typed receipts, as the gate returned or `gate.receipt.load` read them."""
    refuse, undecided, notes = [], [], []
    if not cand.complete:
        undecided.append("the candidate's gate was interrupted (receipt incomplete): only its finished checks count")
    for c in cand.checks:
        if c.status in ("fail", "error"):
            refuse.append(f"gate check {c.name} {c.status}: {c.summary[:240]}")
        elif c.status == "inconclusive":
            undecided.append(f"gate check {c.name} inconclusive: {c.summary[:240]}")
    eng = cand.engagement
    if eng.available and eng.verdict == "fail":
        failed = [f"{e.rule} {e.name}" for e in eng.expectations if e.status == "fail"]
        refuse.append("the candidate's log expectations fail: " + (", ".join(failed) or "see its engagement"))
    if eng.fatal:
        refuse.append("fatal lines in the candidate's log: " + ", ".join(str(h.id) for h in eng.fatal))
    if not eng.available:
        undecided.append(f"the candidate's engagement was not read back from its log ({eng.error})")
    comparison = compare(inc, cand, across_channels=True)
    notes += comparison.warnings
    for f in comparison.findings:
        line = f"{f.area} {f.metric}: {f.a} -> {f.b}" + (f" ({f.change})" if f.change else "") + \
            (f"; {f.note}" if f.note else "")
        if f.verdict == "regression":
            refuse.append(f"regression vs the incumbent's receipt: {line}")
        elif f.verdict == "inconclusive":
            undecided.append(f"inconclusive vs the incumbent's receipt: {line}")
        elif f.verdict in ("unresolved", "noise", "changed", "improvement", "not comparable"):
            notes.append(f"{f.verdict}: {line}")
    if refuse:
        return Judgement("refuse", [f"U2 {r}" for r in refuse], notes + undecided, comparison)
    if undecided:
        return Judgement("inconclusive", [f"U2 {r}" for r in undecided], notes, comparison)
    ran = ", ".join(f"{c.name} {c.status}" for c in cand.checks)
    return Judgement("promote", [f"the candidate's gate passes ({ran})",
                                 "no difference from the incumbent's receipt beyond the noise rules"], notes,
                     comparison)
