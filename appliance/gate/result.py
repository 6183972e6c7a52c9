"""One check's outcome as it goes into the receipt."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from appliance.jsonstrict import JsonObject

GateStatus = Literal["pass", "fail", "error", "not_applicable", "unavailable", "interrupted", "inconclusive",
                     "timeout"]
"""`inconclusive`: the measurement sits between a healthy and a failing band (recall): neither pass nor fail.
`timeout`: no result within the check's bound (a battery line's TIMEOUT, a blocker like a failure)."""
OK_STATUSES: frozenset[str] = frozenset({"pass", "not_applicable"})
"""A gate passes only when every selected check ends in one of these."""


@dataclass
class CheckResult:
    name: str
    status: GateStatus
    summary: str
    params: JsonObject = field(default_factory=dict)
    metrics: JsonObject = field(default_factory=dict)
    details: JsonObject = field(default_factory=dict)
    seconds: float = 0.0
    started_at: str = ""
    attach: JsonObject = field(default_factory=dict)
    """Top-level receipt entries a passing check adds (the canary's calibration), beside `checks`."""

    def to_json(self) -> JsonObject:
        return {"name": self.name, "status": self.status, "summary": self.summary, "seconds": round(self.seconds, 2),
                "started_at": self.started_at, "params": self.params, "metrics": self.metrics,
                "details": self.details}


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class CheckInterrupted(KeyboardInterrupt):
    """Ctrl-C inside a check that could still save what it measured (llama-benchy's partial table)."""

    def __init__(self, partial: CheckResult) -> None:
        super().__init__(partial.summary)
        self.partial = partial
