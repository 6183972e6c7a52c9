"""Whether real traffic is using the engine, as the canary sees it between its own requests.

Busy means requests running now above `busy_requests`, or, when that is 0 (the default), any engine
progress since the previous look: a client that sends requests back to back is seen in the gaps
between them too, where `num_requests_running` alone would read 0. Only meaningful while the canary
itself has no request in flight (before a round and between its steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.health.engine import EngineSample

QUIET_LOOK_S = 1.5
"""Two looks this far apart find a back-to-back client (its gaps are milliseconds)."""


@dataclass(frozen=True)
class Look:
    sample: EngineSample
    busy: str | None
    """Why the engine counts as busy with real traffic, or None."""
    compared: bool
    """False when there was no earlier look to compare progress with (look again before trusting `busy`)."""


class Traffic:
    def __init__(self, probe: Callable[[], EngineSample], busy_requests: int) -> None:
        self.probe, self.busy_requests = probe, busy_requests
        self._progress: float | None = None

    def forget(self) -> None:
        """The canary's own requests moved the counters: the next look starts a new comparison."""
        self._progress = None

    def look(self) -> Look:
        sample = self.probe()
        before, self._progress = self._progress, sample.progress
        compared = before is not None and sample.progress is not None
        if not sample.healthy:
            return Look(sample, None, compared)
        if sample.running is not None and sample.running > self.busy_requests:
            return Look(sample, f"{sample.running:g} requests running", True)
        if self.busy_requests == 0 and compared and sample.progress > before:  # type: ignore[operator]
            return Look(sample, "requests served since the last look", True)
        return Look(sample, None, compared)
