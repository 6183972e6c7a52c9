"""`gate battery R1 R2 R3`: the battery over the receipts of its arms (one serve each: the default serve and the
two escape hatches, which real hardware runs one after another), judged by the harness's rule.

The receipts must be one build: the same battery, lock, engine version and profile name (the arms differ by their
overrides only), each arm once. The output prints the harness's CHECK lines, the checks not run by the appliance,
and ACCEPTED or NOT ACCEPTED with every blocker.
"""

from __future__ import annotations

from appliance.errors import ApplianceError
from appliance.gate.battery.definition import BATTERIES, Battery
from appliance.gate.battery.verdict import BatteryResult, judge, word
from appliance.gate.receipt_model import Check, Receipt


def _build(r: Receipt) -> tuple[str | None, ...]:
    return r.provenance.lock_digest, r.engine_version, r.profile.name


def merge(receipts: list[tuple[str, Receipt]]) -> tuple[Battery, list[Check], dict[str, str]]:
    """(battery, every line of every arm, {arm: label}); ApplianceError when the receipts are not one battery run."""
    if not receipts:
        raise ApplianceError("no receipt given", fix="give the receipt of each arm of the battery")
    names = {r.battery.name if r.battery else None for _, r in receipts}
    not_battery = [label for label, r in receipts if r.battery is None]
    if not_battery:
        raise ApplianceError(f"{not_battery[0]} is not a battery receipt", value=not_battery[0],
                             fix="give receipts written by appliance gate --battery seed --arm ARM")
    if len(names) != 1 or next(iter(names)) not in BATTERIES:
        raise ApplianceError(f"receipts of different batteries: {sorted(map(str, names))}", value=str(names),
                             fix="give the receipts of one battery")
    battery = BATTERIES[str(next(iter(names)))]
    builds = {_build(r) for _, r in receipts}
    if len(builds) != 1:
        raise ApplianceError("the receipts are not of one build (lock, engine version, profile): "
                             + "; ".join(f"{label}: {_build(r)}" for label, r in receipts), field="receipts",
                             fix="gate every arm of the battery on the same build and profile",
                             reason="the harness: 'One script, one result set, one SHA'")
    arms: dict[str, str] = {}
    lines: list[Check] = []
    for label, r in receipts:
        assert r.battery is not None  # refused above
        arm = r.battery.arm
        if arm in arms:
            raise ApplianceError(f"two receipts of arm {arm}: {arms[arm]} and {label}", value=label,
                                 fix="give one receipt per arm (the newest of each)")
        arms[arm] = label
        if not r.complete:
            lines.append(Check(name=f"{arm}-incomplete", status="interrupted",
                               summary=f"{label} was interrupted before its checks finished"))
        lines += r.checks
    return battery, lines, arms


def check_line(check_id: str, title: str, verdict: str, evidence: str) -> str:
    """The harness's line: `CHECK <name> :: PASS|FAIL|TIMEOUT :: <evidence>`."""
    return f"CHECK {f'{check_id} {title}':<52} :: {verdict:<7} :: {evidence}"


def render(battery: Battery, lines: list[Check], result: BatteryResult, expect: str | None = None) -> str:
    by_id = {line.name: line for line in lines}
    out = []
    for c in battery.checks:
        line = by_id.get(c.id)
        if line is None:
            out.append(check_line(c.id, c.title, "MISSING", f"not measured: run the {c.arm} arm's serve"))
        else:
            out.append(check_line(c.id, c.title, word(line.status), line.summary))
    out += [check_line(o.id, o.title, "NOT RUN", f"outside the appliance: {o.why}") for o in battery.outside]
    out += ["", f"RESULT: {result.passed}/{result.recorded} PASS (the appliance runs {len(battery.checks)} of the "
                f"harness's {len(battery.checks) + len(battery.outside)} checks; the others are NOT RUN above)"]
    on = f" on {expect}" if expect else ""
    if result.accepted:
        out.append(f"ACCEPTED: every one of the {result.recorded} serve checks passed{on}")
    else:
        out.append(f"NOT ACCEPTED: {result.why}")
        out += [f"  BLOCKER: {b}" for b in result.blockers]
    return "\n".join(out)


def judge_receipts(receipts: list[tuple[str, Receipt]]) -> tuple[Battery, list[Check],
                                                                         BatteryResult]:
    battery, lines, _ = merge(receipts)
    return battery, lines, judge(lines, battery)
