"""Prometheus view of the canary: a Collector built at scrape time from the exporter's latest read of
the canary's state file. Counters end in `_total`, times are Unix seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from appliance.health.canary_state import ROUND_RESULTS, STATUSES, CanaryState


class CanaryCollector(Collector):
    def __init__(self, state: Callable[[], CanaryState | None]) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._state()
        if s is None:
            return
        rounds = CounterMetricFamily("appliance_canary_rounds", "canary rounds by result (deferred = yielded to "
                                     "traffic)", labels=["result"])
        for result in ROUND_RESULTS:
            rounds.add_metric([result], float(s.rounds_total.get(result, 0)))
        yield rounds
        failures = CounterMetricFamily("appliance_canary_failures", "failing canary rounds by corruption signature",
                                       labels=["signature"])
        for sig, count in sorted(s.failures_total.items()):
            failures.add_metric([sig], float(count))
        yield failures
        status = GaugeMetricFamily("appliance_canary_status", "1 for the canary's current status", labels=["status"])
        for one in STATUSES:
            status.add_metric([one], 1.0 if s.status == one else 0.0)
        yield status
        yield GaugeMetricFamily("appliance_canary_consecutive_failures", "failing rounds in a row",
                                value=float(s.consecutive_failures))
        if s.last_success_unix is not None:
            yield GaugeMetricFamily("appliance_canary_last_success_timestamp_seconds",
                                    "Unix time of the last healthy canary round", value=s.last_success_unix)
        if s.last_round_unix is not None:
            yield GaugeMetricFamily("appliance_canary_last_round_timestamp_seconds",
                                    "Unix time of the last judged canary round", value=s.last_round_unix)
        seconds = (s.last_round or {}).get("seconds")
        if isinstance(seconds, int | float):
            yield GaugeMetricFamily("appliance_canary_last_round_duration_seconds", "how long the last round took",
                                    value=float(seconds))
        rung = GaugeMetricFamily("appliance_canary_rung", "the step-down rung the engine runs on (0 = the profile)",
                                 labels=["name"])
        rung.add_metric([str(s.rung.get("name", ""))], float(s.rung.get("index", 0)))
        yield rung
        yield GaugeMetricFamily("appliance_canary_rungs", "rungs the ladder has beyond the profile",
                                value=float(s.rungs))
        yield CounterMetricFamily("appliance_canary_step_downs", "step-down rungs taken",
                                  value=float(sum(1 for e in s.step_downs if e.get("outcome") == "taken")))
