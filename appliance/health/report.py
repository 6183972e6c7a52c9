"""The one verdict on a serve log, as `logscan`, the exporter's /status and (through it) the gate report it.

A LogReport is a list of findings (each expectation's result, each fatal signature, a log that never said
ready, a fact the ranks disagree on), each with its K id, and one verdict from them (expect.verdict).
A finished log (logscan) that never said ready fails (K12: nothing it lacks can be judged); a live one
(the exporter) is `unknown` until it does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from appliance.health.expect import Evaluation, ExpectationStatus, Result, verdict
from appliance.health.facts import Facts
from appliance.health.peers import Agreement
from appliance.jsonstrict import JsonObject

ALL_LOGS = "*"
"""The `log` of a finding about the ranks together."""


@dataclass(frozen=True)
class LogFinding(Result):
    """An expectation's result (or a fatal line, a log that never said ready, a disagreement) of one log."""

    log: str = ""
    """The log it was found in (ALL_LOGS for the ranks together)."""
    text: str | None = None
    """The log line itself (a fatal signature's)."""

    def to_json(self) -> JsonObject:
        out = super().to_json()
        if self.text:
            out["text"] = self.text
        return out | {"log": self.log}


@dataclass(frozen=True)
class LogReport:
    findings: list[LogFinding]
    log_ready: bool
    """Every log judged said it was ready."""

    @property
    def verdict(self) -> ExpectationStatus:
        return verdict(any(f.blocking for f in self.findings), self.log_ready)

    def of_log(self, log: str) -> list[LogFinding]:
        return [f for f in self.findings if f.log == log]

    def __add__(self, other: LogReport) -> LogReport:
        return LogReport(self.findings + other.findings, self.log_ready and other.log_ready)


def log_report(log: str, evaluation: Evaluation, facts: Facts, evidence: Iterable[str], *,
               finished: bool) -> LogReport:
    """One rank's log judged: `evidence` is the readiness facts its judge looks for."""
    findings = [LogFinding(r.rule, r.name, r.status, r.severity, r.detail, r.warning, r.fix, log=log)
                for r in evaluation.results]
    findings += [LogFinding(h.rule, f"fatal:{h.id}", "fail", "error", f"line {h.line} (x{h.count}): {h.message}",
                            log=log, text=h.text) for h in evaluation.fatal]
    if finished and not evaluation.log_ready:
        missing = ", ".join(n for n in evidence if n not in facts)
        findings.append(LogFinding("K12", "log-ready", "fail", "error",
                                   f"the log never said ready (no {missing}): nothing it lacks can be judged", log=log))
    return LogReport(findings, evaluation.log_ready)


def cross_rank_report(agreements: Iterable[Agreement]) -> LogReport:
    """The ranks of one serve compared: a fact they disagree on fails."""
    return LogReport([LogFinding(a.rule, f"same-on-every-rank:{a.fact}", "fail", "error", a.message, log=ALL_LOGS)
                      for a in agreements if a.status == "fail"], log_ready=True)
