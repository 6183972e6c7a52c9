"""Prometheus view of the canary: a Collector built at scrape time from the exporter's latest read of
the canary's state file. Counters end in `_total`, times are Unix seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from appliance.health.canary_state import ROUND_RESULTS, STATUSES, CanaryState
from appliance.metricfamilies import DescribedCollector, Family

ROUNDS = Family("counter", "appliance_canary_rounds", "canary rounds by result (deferred = yielded to traffic)",
                ("result",))
FAILURES = Family("counter", "appliance_canary_failures", "failing canary rounds by corruption signature",
                  ("signature",))
STATUS = Family("gauge", "appliance_canary_status", "1 for the canary's current status", ("status",))
CONSECUTIVE = Family("gauge", "appliance_canary_consecutive_failures", "failing rounds in a row")
LAST_SUCCESS = Family("gauge", "appliance_canary_last_success_timestamp_seconds",
                      "Unix time of the last healthy canary round")
LAST_ROUND = Family("gauge", "appliance_canary_last_round_timestamp_seconds",
                    "Unix time of the last judged canary round")
LAST_DURATION = Family("gauge", "appliance_canary_last_round_duration_seconds", "how long the last round took")
RUNG = Family("gauge", "appliance_canary_rung", "the step-down rung the engine runs on (0 = the profile)", ("name",))
RUNGS = Family("gauge", "appliance_canary_rungs", "rungs the ladder has beyond the profile")
STEP_DOWNS = Family("counter", "appliance_canary_step_downs", "step-down rungs taken")


class CanaryCollector(DescribedCollector):
    FAMILIES = (ROUNDS, FAILURES, STATUS, CONSECUTIVE, LAST_SUCCESS, LAST_ROUND, LAST_DURATION, RUNG, RUNGS,
                STEP_DOWNS)

    def __init__(self, state: Callable[[], CanaryState | None]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        s = self._state()
        if s is None:
            return
        rounds = ROUNDS.new()
        for result in ROUND_RESULTS:
            rounds.add_metric([result], float(s.rounds_total.get(result, 0)))
        yield rounds
        failures = FAILURES.new()
        for sig, count in sorted(s.failures_total.items()):
            failures.add_metric([sig], float(count))
        yield failures
        status = STATUS.new()
        for one in STATUSES:
            status.add_metric([one], 1.0 if s.status == one else 0.0)
        yield status
        yield CONSECUTIVE.new(float(s.consecutive_failures))
        if s.last_success_unix is not None:
            yield LAST_SUCCESS.new(s.last_success_unix)
        if s.last_round_unix is not None:
            yield LAST_ROUND.new(s.last_round_unix)
        seconds = (s.last_round or {}).get("seconds")
        if isinstance(seconds, int | float):
            yield LAST_DURATION.new(float(seconds))
        rung = RUNG.new()
        rung.add_metric([str(s.rung.get("name", ""))], float(s.rung.get("index", 0)))
        yield rung
        yield RUNGS.new(float(s.rungs))
        yield STEP_DOWNS.new(float(sum(1 for e in s.step_downs if e.get("outcome") == "taken")))
