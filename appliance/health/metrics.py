"""Prometheus view of the monitor: one custom Collector per concern on its own registry, built at scrape
time from the current snapshot (no global registry, no gauges to keep in sync). Each declares its families
(appliance/metricfamilies.py), so the registry's duplicate-series check holds. Prometheus conventions:
`_total` only on counters, base units (bytes, ratios 0-1, seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, get_args

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from appliance.health.expect import ExpectationStatus
from appliance.health.monitor import ExporterIdentity, Snapshot
from appliance.health.state import STATES
from appliance.lock import NCCL_DISTRIBUTIONS
from appliance.metricfamilies import DescribedCollector, Family
from appliance.redact import clip

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
    """A label value from the serve's log (a version): through the one redaction, like /status."""
    if value is None:
        return ""
    if isinstance(value, list):
        return clip(",".join(str(v) for v in value), 400)
    return clip(str(value), 400)


class _SnapshotCollector(DescribedCollector):
    """Builds its metrics at scrape time from the monitor's latest snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot], identity: Callable[[], ExporterIdentity]) -> None:
        self._snapshot = snapshot
        self._identity = identity  # a step-down's new launch changes it (Monitor.poll)


STATE = Family("gauge", "appliance_state", "1 for the serve's current state", ("state",))
READY = Family("gauge", "appliance_ready", "1 when /ready answers 200 (a stale poll loop included)")
ENGINE_HEALTHY = Family("gauge", "appliance_engine_healthy", "1 when vLLM /health answered 200")
STALLED = Family("gauge", "appliance_engine_progress_stalled", "1 while requests run and no engine counter moves (K18)")


class StateCollector(_SnapshotCollector):
    """Where the serve stands: its state, readiness (what /ready answers), the engine's answer, a stall."""

    FAMILIES = (STATE, READY, ENGINE_HEALTHY, STALLED)

    def __init__(self, snapshot: Callable[[], Snapshot], identity: Callable[[], ExporterIdentity],
                 ready: Callable[[], bool]) -> None:
        super().__init__(snapshot, identity)
        self._ready = ready

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        state = STATE.new()
        for one in STATES:
            state.add_metric([one], 1.0 if snap.state == one else 0.0)
        yield state
        yield READY.new(float(self._ready()))
        yield ENGINE_HEALTHY.new(float(snap.engine.healthy))
        yield STALLED.new(float(snap.stalled))


EXPECTATION = Family("gauge", "appliance_expectation", "1 for each expectation's current status",
                     ("rule", "name", "severity", "status"))
# Counters: they only grow within an engine run and start again with the next (a counter reset).
FATAL_SIGNATURE = Family("counter", "appliance_fatal_signature", "fatal signature lines in this engine run (K17)",
                         ("rule", "signature"))
FATAL = Family("counter", "appliance_fatal", "all fatal signature lines in this engine run")
RANKS = Family("gauge", "appliance_ranks_agreement",
               "1 for the status of each fact the head compares across ranks (K15)", ("rule", "fact", "status"))


class VerdictCollector(_SnapshotCollector):
    """What the log was judged against: each expectation, the fatal signatures, the ranks' agreement."""

    FAMILIES = (EXPECTATION, FATAL_SIGNATURE, FATAL, RANKS)

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        expectation = EXPECTATION.new()
        for r in snap.evaluation.results:
            for status in STATUS_VALUES:
                expectation.add_metric([r.rule, r.name, r.severity, status], 1.0 if r.status == status else 0.0)
        yield expectation
        fatal = FATAL_SIGNATURE.new()
        for hit in snap.evaluation.fatal:
            fatal.add_metric([hit.rule, hit.id], float(hit.count))
        yield fatal
        yield FATAL.new(float(sum(h.count for h in snap.evaluation.fatal)))
        if snap.ranks:
            ranks = RANKS.new()
            for a in snap.ranks.agreements:
                for status in STATUS_VALUES:
                    ranks.add_metric([a.rule, a.fact, status], 1.0 if a.status == status else 0.0)
            yield ranks


FACT_FAMILIES = {fact: Family("gauge", name, help_text) for fact, (name, help_text, _) in NUMERIC_FACTS.items()}
NCCL_NETWORK = Family("gauge", "appliance_nccl_network",
                      "1 for each transport NCCL said it uses (NCCL INFO Using network X)", ("network",))
ENGINE_RUNS = Family("counter", "appliance_engine_runs", "engine starts seen in the log")
LOG_READ = Family("counter", "appliance_log_read_bytes", "bytes of serve log read")


class LogFactsCollector(_SnapshotCollector):
    """Numbers the serve log states (capacity, load times, acceptance) and how much of it was read."""

    FAMILIES = (*FACT_FAMILIES.values(), NCCL_NETWORK, ENGINE_RUNS, LOG_READ)

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        for fact, (_, _, scale) in NUMERIC_FACTS.items():
            value = snap.facts.get(fact)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield FACT_FAMILIES[fact].new(float(value) * scale)
        networks = snap.facts.get("nccl_network")
        if networks:  # K10: IB over RDMA, Socket is NCCL's silent fallback
            transport = NCCL_NETWORK.new()
            for network in networks if isinstance(networks, list) else [networks]:
                transport.add_metric([str(network)], 1.0)
            yield transport
        yield ENGINE_RUNS.new(float(snap.runs))
        yield LOG_READ.new(float(snap.bytes_read))


VERSIONS = Family("info", "appliance_versions", "the serve's identity and the versions it reports",
                  ("profile", "profile_digest", "lock_digest", "stack", "role", "vllm", "nccl_vllm", "nccl_library",
                   "nccl_lock"))


class IdentityCollector(_SnapshotCollector):
    """Who this exporter speaks for and the versions the serve reports."""

    FAMILIES = (VERSIONS,)

    def collect(self) -> Iterator[Metric]:
        snap, ident = self._snapshot(), self._identity()
        versions = snap.versions(ident)
        yield VERSIONS.info({
            "profile": ident.profile, "profile_digest": ident.profile_digest[:12],
            "lock_digest": ident.lock_digest[:12], "channel": ident.channel, "role": ident.role,
            "vllm": _text(versions["vllm"]), "nccl_vllm": _text(versions["nccl_vllm"]),
            "nccl_library": _text(versions["nccl_library"]),
            "nccl_lock": next((ident.lock_versions[d] for d in NCCL_DISTRIBUTIONS if d in ident.lock_versions), ""),
        })


def make_registry(snapshot: Callable[[], Snapshot], identity: Callable[[], ExporterIdentity],
                  ready: Callable[[], bool]) -> CollectorRegistry:
    """`ready`: what /ready answers now (health/verdicts.py), staleness included."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StateCollector(snapshot, identity, ready))
    for collector in (VerdictCollector, LogFactsCollector, IdentityCollector):
        registry.register(collector(snapshot, identity))
    return registry
