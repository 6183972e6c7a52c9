"""Expectations from the profile, judged against the facts: pass / fail / unknown, each with its K id.

Missing evidence is `unknown` until the log says the rank is ready and `fail` after it: a line
that should have been printed during start-up and was not means the feature is not engaged
(silent fallbacks are failures, not passes). Any fatal signature fails the verdict at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from appliance.health.facts import Facts, FatalHit
from appliance.health.predicates import holds
from appliance.health.provable import unprovable
from appliance.health.table import COMPARE, PLACEHOLDER, Expectation, FactCheck, LogTable, Operand, Role
from appliance.jsonstrict import JsonObject
from appliance.profile.model import Profile
from appliance.profile.topology import RankView, rank_view

ExpectationStatus = Literal["pass", "fail", "unknown"]



@dataclass(frozen=True)
class Result:
    rule: str
    name: str
    status: ExpectationStatus
    severity: Literal["error", "warning"]
    detail: str
    warning: str | None = None
    fix: str | None = None
    provable: bool = True
    """False: the channel's DeepSeek-V4 code path prints no line this expectation needs (health/provable.py); it
    stays `unknown`, said so, and never blocks."""

    @property
    def blocking(self) -> bool:
        return self.status == "fail" and self.severity == "error"

    def to_json(self) -> JsonObject:
        out: JsonObject = {"rule": self.rule, "name": self.name, "status": self.status,
                           "severity": self.severity, "detail": self.detail}
        if self.warning:
            out["warning"] = self.warning
        if self.fix and self.status == "fail":
            out["fix"] = self.fix
        if not self.provable:
            out["provable"] = False
        return out


@dataclass(frozen=True)
class Evaluation:
    log_ready: bool
    results: list[Result]
    fatal: list[FatalHit]

    @property
    def verdict(self) -> ExpectationStatus:
        return verdict(bool(self.fatal) or any(r.blocking for r in self.results), self.log_ready)


def verdict(blocked: bool, log_ready: bool) -> ExpectationStatus:
    """The one verdict rule: any blocking failure (an error expectation failed, a fatal line) fails; else the
    log passes once it said ready, and is `unknown` before (health.report.LogReport says it for every reader)."""
    if blocked:
        return "fail"
    return "pass" if log_ready else "unknown"


def profile_value(profile: Profile, path: str) -> Any:
    node: Any = profile
    for part in path.split("."):
        node = getattr(node, part, None)
    return node


def node_view(profile: Profile, node: RankView | Role) -> RankView:
    """A role alone stands for the head (node 0) or, for a worker, the first worker node (node 1)."""
    if isinstance(node, RankView):
        return node
    return rank_view(profile, 1 if node == "worker" else 0)


class Judge:
    """Evaluates one table for one profile and node; lock versions come in as a mapping.

    An expectation applies on a node only when its role is listed, its profile predicates hold and the node's log
    can carry every line it needs (the table's printed_by): `vLLM is using nccl==` is rank 0's line, so a headless
    worker is held to NCCL's own banner, which every rank prints, and never waits for a line it cannot print."""

    def __init__(self, table: LogTable, profile: Profile, node: RankView | Role,
                 lock_versions: Mapping[str, str]) -> None:
        self.table = table
        self.profile = profile
        self.node = node_view(profile, node)
        self.role = self.node.role
        self.lock_versions = lock_versions
        self.printed_here = table.printed_on(self.node)
        applicable = [e for e in table.expectations
                      if self._applies(e.roles, e.when) and set(e.required()) <= self.printed_here]
        # An expectation the channel's DeepSeek-V4 path cannot prove is said, never waited for (health/provable.py).
        self.not_provable = {e.id: np for e in applicable if (np := unprovable(e, table, profile)) is not None}
        self.expectations = [e for e in applicable if e.id not in self.not_provable]
        # fact name -> the log-check pattern that sets it: a missing fact is said with the line it comes from.
        self.source = {name: p.id for p in table.facts for name in p.produces()}
        # Readiness is not filtered by what the node prints: a readiness line a node cannot print keeps it from
        # ready (fail closed); the table's own check refuses asking a worker for a head-only line.
        self.readiness = [r for r in table.readiness if self._applies(r.roles, r.when)]

    def _applies(self, roles: list[Role], when: list[str]) -> bool:
        return self.role in roles and holds(when, self.profile)

    def log_ready(self, facts: Facts) -> bool:
        return all(name in facts for r in self.readiness for name in r.present)

    def readiness_evidence(self) -> list[str]:
        return [name for r in self.readiness for name in r.present]

    def evaluate(self, facts: Facts) -> Evaluation:
        ready = self.log_ready(facts)
        results = [self._judge(e, facts, ready) for e in self.expectations]
        for e in self.table.expectations:
            if (np := self.not_provable.get(e.id)) is None:
                continue
            if e.seen_in(facts):  # the line appeared after all: judged as printed
                results.append(self._judge(e, facts, ready))
            else:
                results.append(Result(np.rule, np.expectation, "unknown", e.severity, np.detail, provable=False))
        return Evaluation(ready, results, sorted(facts.fatal.values(), key=lambda h: h.line))

    def _operand(self, o: Operand, facts: Facts) -> Any:
        if o.kind == "fact":
            return facts.get(str(o.value))
        if o.kind == "profile":
            return profile_value(self.profile, str(o.value))
        if o.kind == "lock":
            return self.lock_versions.get(str(o.value))
        return o.value

    def _holds(self, c: FactCheck, left: Any, right: Any) -> bool:
        lefts = left if isinstance(left, list) else [left]  # a `distinct` fact: every value must hold
        compare = COMPARE[c.op]
        try:
            return bool(lefts) and all(compare(_num(v, right), right) for v in lefts)
        except TypeError:
            return False

    def _missing(self, name: str) -> str:
        source = self.source.get(name)
        return f"no {name}" + (f" (no `{source}` line in the log)" if source else "")

    def _judge(self, e: Expectation, facts: Facts, ready: bool) -> Result:
        problems: list[str] = []
        missing = [self._missing(n) for n in e.present if n not in facts]
        if e.present_any and not any(n in facts for n in e.present_any):
            missing.append(f"none of {', '.join(e.present_any)}")
        problems += [f"{n}={show_value(facts.get(n))} at line {facts.lines.get(n)}" for n in e.absent if n in facts]
        for c in e.comparisons:
            left, right = self._operand(c.left, facts), self._operand(c.right, facts)
            if left is None or right is None:
                # A fact not seen yet is missing evidence (unknown until ready); only a lock operand that
                # is itself absent is a problem at once: no log line can ever supply it.
                missing += [self._missing(n) for n in c.facts() if n not in facts and self._missing(n) not in missing]
                for side in (c.left, c.right):
                    if side.kind == "lock" and self._operand(side, facts) is None:
                        problems.append(f"{c.text}: versions.json has no package {side.value!r}")
            elif not self._holds(c, left, right):
                problems.append(f"{c.text} is false ({show_value(left)} vs {show_value(right)})")
        report = self._report(e, facts)
        if problems:
            return self._result(e, "fail", "; ".join(problems) + (f" [{report}]" if report else ""))
        if missing:
            if ready and e.missing == "fail":
                return self._result(e, "fail", f"{', '.join(missing)} after the log said ready")
            return self._result(e, "unknown", ", ".join(missing) + (" yet" if not ready else ""))
        if e.absent and not ready and not (e.present or e.present_any or e.checks):
            return self._result(e, "unknown", f"none of {', '.join(e.absent)} so far; final once ready")
        detail = report or ", ".join(f"{n}={show_value(facts.get(n))}" for n in (*e.present, *e.present_any)
                                     if n in facts) or f"no {', '.join(e.absent)}"
        return self._result(e, "pass", detail, warning=e.warn)

    def _result(self, e: Expectation, status: ExpectationStatus, detail: str, warning: str | None = None) -> Result:
        return Result(e.rule, e.id, status, e.severity, detail, warning, e.fix)

    def _report(self, e: Expectation, facts: Facts) -> str:
        if not e.report:
            return ""

        def value(m: Any) -> str:
            got = self._operand(Operand.parse(m[1]), facts)
            return "?" if got is None else show_value(got)

        return PLACEHOLDER.sub(value, e.report)


def _num(value: Any, like: Any) -> Any:
    """A string fact compared with a number is read as one (a version stays a string)."""
    if isinstance(like, int | float) and not isinstance(like, bool) and isinstance(value, str):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return value
    return value


def show_value(value: Any) -> str:
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return f"{int(value):,}"
        return f"{value:,.2f}".rstrip("0").rstrip(".") if math.isfinite(value) else str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return "/".join(show_value(v) for v in value)
    return str(value)
