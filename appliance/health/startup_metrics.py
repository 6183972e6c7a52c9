"""Prometheus view of the start-up (health/startup.py): the phase as a 1-of-N gauge like appliance_state, the time
in the start and in the phase, and, where the log counts, the fraction and the engine's own estimate. Built at
scrape time from the monitor's snapshot; base units (seconds, ratios 0-1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from appliance.health.startup import Startup
from appliance.metricfamilies import DescribedCollector, Family

PHASE = Family("gauge", "appliance_startup_phase", "1 for the engine start's current phase, read from the serve log",
               ("phase",))
ELAPSED = Family("gauge", "appliance_startup_elapsed_seconds",
                 "seconds since this engine run's first log line (after ready: the time it took)")
PHASE_ELAPSED = Family("gauge", "appliance_startup_phase_elapsed_seconds", "seconds in the current start-up phase")
PROGRESS = Family("gauge", "appliance_startup_progress_ratio",
                  "the counted phase's fraction done (weights shards, CUDA graphs), 0-1")
ETA = Family("gauge", "appliance_startup_eta_seconds", "the engine's own estimate of the counted phase's time left")


class StartupCollector(DescribedCollector):
    """The start's phase always; its times once the log began; the fraction and estimate while a count runs."""

    FAMILIES = (PHASE, ELAPSED, PHASE_ELAPSED, PROGRESS, ETA)

    def __init__(self, startup: Callable[[], Startup | None], phases: tuple[str, ...]) -> None:
        self._startup = startup
        self._phases = phases

    def collect(self) -> Iterator[Metric]:
        s = self._startup()
        phase = PHASE.new()
        for one in self._phases:
            phase.add_metric([one], 1.0 if s is not None and s.phase == one else 0.0)
        yield phase
        if s is None or s.phase is None:
            return
        yield ELAPSED.new(s.elapsed_s)
        yield PHASE_ELAPSED.new(s.phase_elapsed_s)
        if s.fraction is not None:
            yield PROGRESS.new(s.fraction)
        if s.eta_s is not None:
            yield ETA.new(s.eta_s)
