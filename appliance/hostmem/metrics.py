"""Prometheus view of the memory watchdog (K24): a collector built from its current state at scrape time.
Base units (bytes, seconds, ratios); `_total` only on counters."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from appliance.hostmem.sources import GIB
from appliance.hostmem.watchdog import LEVELS, RULE, WatchState
from appliance.metricfamilies import DescribedCollector, Family

LEVEL = Family("gauge", "appliance_memory_watchdog_level", "1 for the memory watchdog's current level",
               ("rule", "mode", "level"))
STOPPED = Family("gauge", "appliance_memory_watchdog_engine_stopped",
                 "1 while the engine is stopped by the memory watchdog (K24)")
STOPS = Family("counter", "appliance_memory_watchdog_engine_stops", "engine stops by the memory watchdog")
RESTARTS = Family("counter", "appliance_memory_watchdog_engine_restarts",
                  "engine starts by the memory watchdog after memory recovered")
READABLE = Family("gauge", "appliance_memory_source_readable",
                  "1 when the watchdog could read the source (0 = unknown, never healthy)", ("source",))
AVAILABLE = Family("gauge", "appliance_host_memory_available_bytes", "MemAvailable of the host (procfs)")
FALL = Family("gauge", "appliance_host_memory_available_fall_bytes_per_second",
              "how fast MemAvailable falls (positive = falling), over the last 3 s")
PSI = Family("gauge", "appliance_host_memory_pressure_avg10_ratio",
             "memory PSI avg10: share of time some / all tasks stalled on memory", ("kind",))


class WatchdogCollector(DescribedCollector):
    FAMILIES = (LEVEL, STOPPED, STOPS, RESTARTS, READABLE, AVAILABLE, FALL, PSI)

    def __init__(self, state: Callable[[], WatchState]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        s = self._state()
        level = LEVEL.new()
        for one in LEVELS:
            level.add_metric([RULE, s.mode, one], 1.0 if s.level == one else 0.0)
        yield level
        yield STOPPED.new(float(s.engine_stopped))
        yield STOPS.new(float(s.stops))
        yield RESTARTS.new(float(s.restarts))
        readable = READABLE.new()
        unknown = " ".join(s.unknown)
        for source, word in (("meminfo", "MemAvailable"), ("psi", "PSI"), ("kernel_log", "kernel log")):
            readable.add_metric([source], 0.0 if word in unknown else 1.0)
        yield readable
        if s.available_gib is not None:
            yield AVAILABLE.new(s.available_gib * GIB)
        if s.fall_gib_per_s is not None:
            yield FALL.new(s.fall_gib_per_s * GIB)
        if s.pressure is not None:
            psi = PSI.new()
            psi.add_metric(["some"], s.pressure.some_avg10 / 100)
            psi.add_metric(["full"], s.pressure.full_avg10 / 100)
            yield psi
