"""The battery's verdict, the harness's rule: every check recorded once, every one PASS, and at least the
minimum count. Anything but PASS is a blocker: FAIL, TIMEOUT, and any word a later check may bring."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from appliance.gate.battery.definition import Battery
from appliance.gate.receipt_model import Check
from appliance.jsonstrict import JsonObject


def word(status: str) -> str:
    """The harness's verdict word of a check's status: PASS, FAIL, TIMEOUT, or the status itself in capitals."""
    return {"pass": "PASS", "fail": "FAIL", "error": "FAIL", "unavailable": "FAIL", "timeout": "TIMEOUT"}.get(
        status, status.upper())


@dataclass
class BatteryResult:
    accepted: bool
    passed: int
    recorded: int
    minimum: int
    blockers: list[str] = field(default_factory=list)
    """`ID WORD: evidence` for every line that is not PASS, every duplicate and every line that is no check."""
    missing: list[str] = field(default_factory=list)
    """Check ids no line was recorded for (an arm not measured)."""

    @property
    def why(self) -> str:
        if self.accepted:
            return f"every one of the {self.recorded} serve checks passed"
        parts = []
        if self.blockers:
            parts.append(f"{len(self.blockers)} blocker(s)")
        if self.missing:
            parts.append(f"{len(self.missing)} check(s) not recorded ({', '.join(self.missing)})")
        if self.recorded < self.minimum:
            parts.append(f"{self.recorded} recorded, at least {self.minimum} needed")
        return "; ".join(parts)

    def to_json(self) -> JsonObject:
        return {"accepted": self.accepted, "passed": self.passed, "recorded": self.recorded, "minimum": self.minimum,
                "blockers": self.blockers, "missing": self.missing, "why": self.why}


def judge(lines: Sequence[Check], battery: Battery) -> BatteryResult:
    """`lines`: receipt check lines (`name` = check id, `status`, `summary` = evidence)."""
    defined = {c.id for c in battery.checks}
    seen: dict[str, int] = {}
    blockers: list[str] = []
    for line in lines:
        name, status = line.name, line.status
        seen[name] = seen.get(name, 0) + 1
        if name not in defined:
            said = line.summary or f"not a check of the {battery.name} battery"
            blockers.append(f"{name} {word(status)}: {said[:240]}")
        elif seen[name] > 1:
            blockers.append(f"{name}: recorded {seen[name]} times (one line each)")
        elif word(status) != "PASS":
            blockers.append(f"{name} {word(status)}: {line.summary[:240]}")
    recorded = len([n for n in seen if n in defined])
    passed = sum(1 for line in lines if line.name in defined and word(line.status) == "PASS")
    missing = [c.id for c in battery.checks if c.id not in seen]
    accepted = not blockers and not missing and recorded >= battery.min_checks
    return BatteryResult(accepted, passed, recorded, battery.min_checks, blockers, missing)


def receipt_verdict(lines: Sequence[Check], battery: Battery) -> str:
    """A battery receipt's verdict: pass = accepted; fail = a recorded check is not PASS; inconclusive = what was
    recorded passed but checks are missing (another arm's serve, merged by `gate battery`)."""
    result = judge(lines, battery)
    if result.accepted:
        return "pass"
    return "fail" if result.blockers else "inconclusive"
