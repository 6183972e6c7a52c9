"""The canary's state: written by the watch (one JSON file in the run dir), read by the exporter.

The file is the whole interface between them, so the exporter stays a cheap reader (no canary
code runs in it) and either side may restart without losing the counts. Written atomically.

status: pending (no round yet) | ok | suspect (failing, not yet confirmed) | corrupt (confirmed; a
step-down follows) | rechecking (a rung was taken; not ready until a round passes on it) | failed
(confirmed past the last rung). Readiness: ok, pending and suspect are no reason to leave `ready`;
corrupt and rechecking make the serve `degraded`; failed makes it `failed`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, TypedDict, get_args

from appliance.jsonstrict import JsonObject
from appliance.safe_write import write_json

CanaryStatus = Literal["pending", "ok", "suspect", "corrupt", "rechecking", "failed"]
STATUSES: tuple[CanaryStatus, ...] = get_args(CanaryStatus)
ROUND_RESULTS = ("healthy", "corruption", "error", "deferred")
STATE_FILE = "canary.json"
MAX_STATE_BYTES = 4 << 20
"""The state is a few KiB (the last round, the step-downs)."""


class RungJson(TypedDict):
    """The rung the serve runs on (canary/ladder.py `RungPlan.to_json`): 0 is the profile as written."""

    index: int
    name: str
    set: list[str]


StepDown = TypedDict("StepDown", {
    "at_unix": float, "from": str, "to": str | None, "set": list[str], "signatures": list[str], "evidence": str,
    "supervisorctl": str, "outcome": str}, total=False)
"""One ladder event (canary/watch.py): when, from which rung to which, the signatures that confirmed it, what
supervisorctl said, and its outcome (`taken`, `not taken: …`, `past the last rung: serve failed`)."""


@dataclass
class CanaryState:
    status: CanaryStatus = "pending"
    interval_s: float = 0.0
    confirm_after: int = 0
    calibration: str | None = None
    consecutive_failures: int = 0
    rounds_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUND_RESULTS, 0))
    failures_total: dict[str, int] = field(default_factory=dict)
    """Signature -> failing rounds that showed it."""
    last_round: JsonObject | None = None
    """The last round's result (canary/checks.py `RoundResult.to_json`)."""
    last_round_unix: float | None = None
    last_success_unix: float | None = None
    rung: RungJson = field(default_factory=lambda: {"index": 0, "name": "profile", "set": []})
    rungs: int = 0
    """Rungs the ladder has beyond the profile as written."""
    effective: dict[str, str] = field(default_factory=dict)
    """The settings the rungs taken so far changed (key -> value): what the engine runs with now."""
    step_downs: list[StepDown] = field(default_factory=list)
    """Each ladder event: when, from which rung to which, the signatures that confirmed it, outcome."""
    note: str = ""

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonObject) -> CanaryState:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    def readiness(self) -> tuple[list[str], bool]:
        """(reasons the serve is not ready, whether it has failed)."""
        sigs = ", ".join(sorted((self.last_round or {}).get("signatures", []))) or "-"
        if self.status == "failed":
            return [f"canary: corruption confirmed ({sigs}) past the last step-down rung ({self.rung['name']})"], True
        if self.status == "corrupt":
            return [f"canary: corruption confirmed ({sigs}) after {self.consecutive_failures} failing rounds on rung "
                    f"{self.rung['name']}"], False
        if self.status == "rechecking":
            return [f"canary: re-checking after the step-down to rung {self.rung['name']}"], False
        return [], False


def write_state(path: Path, state: CanaryState) -> None:
    write_json(path, state.to_json(), field="canary state")


def read_state(path: Path) -> CanaryState | None:
    """None when the file is absent (the watch has not written yet) or unreadable (mid-replace is impossible:
    the write is atomic; a corrupt file is reported as None rather than crashing the exporter)."""
    from appliance.errors import ApplianceError
    from appliance.jsonstrict import load_file

    if not path.exists():
        return None
    try:  # read every poll by the exporter: a FIFO or a huge file there must not stall or sink it
        data = load_file(path, "canary state", MAX_STATE_BYTES, "canary state file")
        return CanaryState.from_json(data) if isinstance(data, dict) else None
    except (ApplianceError, ValueError, TypeError):
        return None
