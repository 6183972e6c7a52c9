"""Prometheus view of the monitor: a custom Collector on its own registry, built at scrape time
from the current snapshot (no global registry, no gauges to keep in sync)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, get_args

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from appliance.health.expect import Status
from appliance.health.monitor import Identity, Snapshot
from appliance.health.state import STATES
from appliance.lock import NCCL_DISTRIBUTIONS

STATUS_VALUES: tuple[Status, ...] = get_args(Status)
# fact -> (metric name, help); numeric facts worth a time series.
NUMERIC_FACTS = {
    "guard_active": ("appliance_guard_active_managers", "KV managers with the same-step ghost-block guard on (K4)"),
    "guard_total": ("appliance_guard_total_managers", "KV managers the guard could cover (K4)"),
    "kv_tokens": ("appliance_kv_cache_tokens", "KV cache capacity in tokens, read from the serve log"),
    "kv_max_concurrency": ("appliance_kv_max_concurrency",
                           "full-length requests the KV cache holds at once, from the serve log"),
    "kv_memory_gib": ("appliance_kv_cache_memory_gib", "KV cache memory in GiB, from the serve log"),
    "model_load_seconds": ("appliance_model_load_seconds", "model load time from the serve log"),
    "model_load_gib": ("appliance_model_weights_gib", "weight memory per rank from the serve log"),
    "graph_capture_seconds": ("appliance_cudagraph_capture_seconds", "CUDA graph capture time from the serve log"),
    "spec_acceptance_rate": ("appliance_spec_decode_acceptance_percent",
                             "latest 'Avg Draft acceptance rate' from the serve log"),
    "spec_mean_acceptance_length": ("appliance_spec_decode_mean_acceptance_length",
                                    "latest mean acceptance length from the serve log"),
}


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class MonitorCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot], identity: Identity) -> None:
        self._snapshot = snapshot
        self._identity = identity

    def describe(self) -> list[Metric]:
        return []  # metrics depend on the table and the log; collect() says what exists

    def collect(self) -> Iterator[Metric]:
        snap, ident = self._snapshot(), self._identity
        state = GaugeMetricFamily("appliance_state", "1 for the serve's current state", labels=["state"])
        for one in STATES:
            state.add_metric([one], 1.0 if snap.state == one else 0.0)
        yield state
        yield GaugeMetricFamily("appliance_ready", "1 when /ready answers 200", value=float(snap.ready))
        yield GaugeMetricFamily("appliance_engine_healthy", "1 when vLLM /health answered 200",
                                value=float(snap.engine.healthy))
        yield GaugeMetricFamily("appliance_engine_progress_stalled",
                                "1 while requests run and no engine counter moves (K18)", value=float(snap.stalled))
        expectation = GaugeMetricFamily(
            "appliance_expectation", "1 for each expectation's current status", labels=["rule", "name", "severity",
                                                                                       "status"])
        for r in snap.evaluation.results:
            for status in STATUS_VALUES:
                expectation.add_metric([r.rule, r.name, r.severity, status], 1.0 if r.status == status else 0.0)
        yield expectation
        fatal = GaugeMetricFamily("appliance_fatal_count", "fatal signature lines in this engine run (K17)",
                                  labels=["rule", "signature"])
        for hit in snap.evaluation.fatal:
            fatal.add_metric([hit.rule, hit.id], float(hit.count))
        yield fatal
        yield GaugeMetricFamily("appliance_fatal_total", "all fatal signature lines in this engine run",
                                value=float(sum(h.count for h in snap.evaluation.fatal)))
        for fact, (name, help_text) in NUMERIC_FACTS.items():
            value = snap.facts.get(fact)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield GaugeMetricFamily(name, help_text, value=float(value))
        versions = snap.versions(ident)
        yield InfoMetricFamily("appliance_versions", "the serve's identity and the versions it reports", value={
            "profile": ident.profile, "profile_digest": ident.profile_digest[:12],
            "lock_digest": ident.lock_digest[:12], "stack": ident.stack, "role": ident.role,
            "vllm": _text(versions["vllm"]), "nccl_vllm": _text(versions["nccl_vllm"]),
            "nccl_library": _text(versions["nccl_library"]),
            "nccl_lock": next((ident.lock_versions[d] for d in NCCL_DISTRIBUTIONS if d in ident.lock_versions), ""),
        })
        if snap.ranks:
            ranks = GaugeMetricFamily("appliance_ranks_agreement",
                                      "1 for the status of each fact the head compares across ranks (K15)",
                                      labels=["rule", "fact", "status"])
            for a in snap.ranks.agreements:
                for status in STATUS_VALUES:
                    ranks.add_metric([a.rule, a.fact, status], 1.0 if a.status == status else 0.0)
            yield ranks
        yield GaugeMetricFamily("appliance_engine_runs", "engine starts seen in the log", value=float(snap.runs))
        yield GaugeMetricFamily("appliance_log_bytes_read", "bytes of serve log read", value=float(snap.bytes_read))


def make_registry(snapshot: Callable[[], Snapshot], identity: Identity) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(snapshot, identity))
    return registry
