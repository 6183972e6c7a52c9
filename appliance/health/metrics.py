"""Prometheus view of the monitor: one custom Collector per concern on its own registry, built at scrape
time from the current snapshot (no global registry, no gauges to keep in sync). Prometheus conventions:
`_total` only on counters, base units (bytes, ratios 0-1, seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, get_args

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from appliance.health.expect import ExpectationStatus
from appliance.health.monitor import ExporterIdentity, Snapshot
from appliance.health.state import STATES
from appliance.lock import NCCL_DISTRIBUTIONS

STATUS_VALUES: tuple[ExpectationStatus, ...] = get_args(ExpectationStatus)
GIB = 1024**3
# fact -> (metric name, help, scale to the base unit); numeric facts worth a time series. Base units only:
# bytes (the log says GiB), ratios 0-1 (the log says percent), seconds.
NUMERIC_FACTS: dict[str, tuple[str, str, float]] = {
    "guard_active": ("appliance_guard_active_managers", "KV managers with the same-step ghost-block guard on (K4)", 1),
    "guard_total": ("appliance_guard_total_managers", "KV managers the guard could cover (K4)", 1),
    "kv_tokens": ("appliance_kv_cache_tokens", "KV cache capacity in tokens, read from the serve log", 1),
    "kv_max_concurrency": ("appliance_kv_max_concurrency",
                           "full-length requests the KV cache holds at once, from the serve log", 1),
    "kv_memory_gib": ("appliance_kv_cache_memory_bytes", "KV cache memory in bytes, from the serve log", GIB),
    "model_load_seconds": ("appliance_model_load_seconds", "model load time from the serve log", 1),
    "model_load_gib": ("appliance_model_weights_bytes", "weight memory per rank in bytes, from the serve log", GIB),
    "graph_capture_seconds": ("appliance_cudagraph_capture_seconds", "CUDA graph capture time from the serve log",
                              1),
    "spec_acceptance_rate": ("appliance_spec_decode_acceptance_ratio",
                             "latest 'Avg Draft acceptance rate' from the serve log, 0-1", 0.01),
    "spec_mean_acceptance_length": ("appliance_spec_decode_mean_acceptance_length",
                                    "latest mean acceptance length from the serve log", 1),
}


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class _SnapshotCollector(Collector):
    """Builds its metrics at scrape time from the monitor's latest snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot], identity: Callable[[], ExporterIdentity]) -> None:
        self._snapshot = snapshot
        self._identity = identity  # a step-down's new launch changes it (Monitor.poll)

    def describe(self) -> list[Metric]:
        return []  # metrics depend on the table and the log; collect() says what exists


class StateCollector(_SnapshotCollector):
    """Where the serve stands: its state, readiness, the engine's answer, a stall."""

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        state = GaugeMetricFamily("appliance_state", "1 for the serve's current state", labels=["state"])
        for one in STATES:
            state.add_metric([one], 1.0 if snap.state == one else 0.0)
        yield state
        yield GaugeMetricFamily("appliance_ready", "1 when /ready answers 200", value=float(snap.ready))
        yield GaugeMetricFamily("appliance_engine_healthy", "1 when vLLM /health answered 200",
                                value=float(snap.engine.healthy))
        yield GaugeMetricFamily("appliance_engine_progress_stalled",
                                "1 while requests run and no engine counter moves (K18)", value=float(snap.stalled))


class VerdictCollector(_SnapshotCollector):
    """What the log was judged against: each expectation, the fatal signatures, the ranks' agreement."""

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        expectation = GaugeMetricFamily(
            "appliance_expectation", "1 for each expectation's current status", labels=["rule", "name", "severity",
                                                                                       "status"])
        for r in snap.evaluation.results:
            for status in STATUS_VALUES:
                expectation.add_metric([r.rule, r.name, r.severity, status], 1.0 if r.status == status else 0.0)
        yield expectation
        # Counters: they only grow within an engine run and start again with the next (a counter reset).
        fatal = CounterMetricFamily("appliance_fatal_signature", "fatal signature lines in this engine run (K17)",
                                    labels=["rule", "signature"])
        for hit in snap.evaluation.fatal:
            fatal.add_metric([hit.rule, hit.id], float(hit.count))
        yield fatal
        yield CounterMetricFamily("appliance_fatal", "all fatal signature lines in this engine run",
                                  value=float(sum(h.count for h in snap.evaluation.fatal)))
        if snap.ranks:
            ranks = GaugeMetricFamily("appliance_ranks_agreement",
                                      "1 for the status of each fact the head compares across ranks (K15)",
                                      labels=["rule", "fact", "status"])
            for a in snap.ranks.agreements:
                for status in STATUS_VALUES:
                    ranks.add_metric([a.rule, a.fact, status], 1.0 if a.status == status else 0.0)
            yield ranks


class LogFactsCollector(_SnapshotCollector):
    """Numbers the serve log states (capacity, load times, acceptance) and how much of it was read."""

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        for fact, (name, help_text, scale) in NUMERIC_FACTS.items():
            value = snap.facts.get(fact)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield GaugeMetricFamily(name, help_text, value=float(value) * scale)
        yield CounterMetricFamily("appliance_engine_runs", "engine starts seen in the log", value=float(snap.runs))
        yield CounterMetricFamily("appliance_log_read_bytes", "bytes of serve log read", value=float(snap.bytes_read))


class IdentityCollector(_SnapshotCollector):
    """Who this exporter speaks for and the versions the serve reports."""

    def collect(self) -> Iterator[Metric]:
        snap, ident = self._snapshot(), self._identity()
        versions = snap.versions(ident)
        yield InfoMetricFamily("appliance_versions", "the serve's identity and the versions it reports", value={
            "profile": ident.profile, "profile_digest": ident.profile_digest[:12],
            "lock_digest": ident.lock_digest[:12], "channel": ident.channel, "role": ident.role,
            "vllm": _text(versions["vllm"]), "nccl_vllm": _text(versions["nccl_vllm"]),
            "nccl_library": _text(versions["nccl_library"]),
            "nccl_lock": next((ident.lock_versions[d] for d in NCCL_DISTRIBUTIONS if d in ident.lock_versions), ""),
        })


COLLECTORS = (StateCollector, VerdictCollector, LogFactsCollector, IdentityCollector)


def make_registry(snapshot: Callable[[], Snapshot], identity: Callable[[], ExporterIdentity]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for collector in COLLECTORS:
        registry.register(collector(snapshot, identity))
    return registry
