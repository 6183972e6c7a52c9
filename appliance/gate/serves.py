"""`gate serves R1 R2 ...`: recall judged over several fresh serves, one receipt each (the seed's design:
"4 fresh serves per arm (a single clean serve proves nothing at ~50% incidence), 3 arthur c=12 runs each")."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from appliance.errors import ApplianceError
from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING, Bands, judge_serves
from appliance.gate.receipt_model import RecallParams, Receipt
from appliance.jsonstrict import JsonObject
from appliance.redact import clip


@dataclass(frozen=True)
class ServeRecall:
    """One fresh serve's recall, from its receipt."""
    receipt: str
    runs_found: list[int]
    mean: float
    needles_per_run: int


@dataclass(frozen=True)
class ServesJudgement:
    verdict: str
    reason: str
    pass_line: float
    poisoned_ceiling: float
    serves: list[ServeRecall]

    def to_json(self) -> JsonObject:
        return asdict(self)


def judge_receipts(receipts: list[tuple[str, Receipt]]) -> ServesJudgement:
    serves: list[ServeRecall] = []
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
        serves.append(ServeRecall(label, list(m.runs_found or [m.found]), m.found / m.total,
                                  m.total if m.needles_per_run is None else m.needles_per_run))
    assert bands is not None
    verdict, why = judge_serves([s.mean for s in serves], bands)
    return ServesJudgement(verdict, why, bands.pass_line, bands.poisoned_ceiling, serves)


def render(result: ServesJudgement) -> str:
    lines = [f"{clip(s.receipt, 300)}: runs {s.runs_found} of {s.needles_per_run}, mean {s.mean:.3f}"
             for s in result.serves]
    return "\n".join([*lines, "", f"{result.verdict.upper()}: {clip(result.reason, 2000)}"])
