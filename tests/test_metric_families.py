"""Every custom collector describes its fixed families (appliance/metricfamilies.py), so prometheus-client's registry
knows each series at register time and refuses a second collector of one ("Duplicated timeseries") instead of
serving it twice, and a scrape never yields a family its collector did not declare."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from appliance.health.canary_metrics import CanaryCollector
from appliance.health.canary_state import CanaryState
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.health.metrics import IdentityCollector, LogFactsCollector, StateCollector, VerdictCollector
from appliance.health.startup_metrics import StartupCollector
from appliance.hostmem.metrics import WatchdogCollector
from appliance.hostmem.sources import Pressure
from appliance.hostmem.watchdog import WatchState
from appliance.metricfamilies import DescribedCollector
from appliance.multinode.fabric import judge
from appliance.multinode.fabric_metrics import FabricCollector
from appliance.profile.loader import load_profile
from tests.test_fabric import MEASURED

SERVE_LOG = (Path(__file__).parent / "fixtures" / "logs" / "cpu-smoke-serve.log").read_text()
COLLECTOR_MODULES = ("appliance.health.metrics", "appliance.health.canary_metrics", "appliance.hostmem.metrics",
                     "appliance.multinode.fabric_metrics", "appliance.health.startup_metrics")


def _all_subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def appliance_collectors() -> list[type]:
    for module in COLLECTOR_MODULES:
        importlib.import_module(module)
    return sorted({c for c in _all_subclasses(Collector) if c.__module__.startswith("appliance.")
                   and not c.__name__.startswith("_") and c is not DescribedCollector}, key=lambda c: c.__name__)


@pytest.fixture(scope="module")
def collectors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Collector]]:
    """One of each, over a state that makes it yield every family it can: a read serve log, a canary that ran, a
    watchdog that read everything, a measured fabric."""
    log = tmp_path_factory.mktemp("families") / "vllm.log"
    log.write_text(SERVE_LOG)
    exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single"))
    exporter.monitor.poll()
    snap, ident = (lambda: exporter.monitor.snapshot), (lambda: exporter.monitor.identity)
    canary = CanaryState(status="ok", last_round={"seconds": 3.5}, last_round_unix=2.0, last_success_unix=2.0,
                         failures_total={"needle": 1}, rungs=1)
    watch = WatchState(mode="stop", level="ok", reasons=[], unknown=[], available_gib=40.0, fall_gib_per_s=0.1,
                       pressure=Pressure(1.0, 0.5), engine_stopped=False, stops=0, restarts=0, kernel_source="file",
                       procfs="/proc")
    try:
        yield [StateCollector(snap, ident, lambda: True), VerdictCollector(snap, ident), LogFactsCollector(snap, ident),
               IdentityCollector(snap, ident), CanaryCollector(lambda: canary), WatchdogCollector(lambda: watch),
               FabricCollector(judge(MEASURED, 2, None, "warn")),
               StartupCollector(lambda: exporter.monitor.snapshot.startup,
                                tuple(p.id for p in exporter.monitor.judge.table.startup))]
    finally:
        exporter.close()


def test_no_collector_of_the_appliance_leaves_describe_empty(collectors: list[Collector]) -> None:
    assert {type(c) for c in collectors} == set(appliance_collectors()), "a new collector: add it to the fixture"
    empty = [type(c).__name__ for c in collectors if not list(c.describe())]
    assert empty == []


def test_a_scrape_yields_only_declared_families_of_the_declared_kind(collectors: list[Collector]) -> None:
    assert collectors, "no collector to scrape"
    for collector in collectors:
        declared = {m.name: m.type for m in collector.describe()}
        collected = {m.name: m.type for m in collector.collect()}
        assert collected, type(collector).__name__
        assert {n: declared.get(n) for n in collected} == collected, type(collector).__name__


@pytest.mark.parametrize("index", range(8))
def test_the_registry_refuses_a_second_collector_of_the_same_series(collectors: list[Collector], index: int) -> None:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collectors[index])
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(collectors[index])


def test_the_exporters_registry_holds_every_collector_once_and_serves_them(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(SERVE_LOG)
    exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", canary_state=tmp_path / "c"))
    try:
        registry = exporter.server.registry
        with pytest.raises(ValueError, match="Duplicated timeseries"):
            registry.register(StateCollector(lambda: exporter.monitor.snapshot, lambda: exporter.monitor.identity,
                                             lambda: False))
        exporter.monitor.poll()
        assert b"appliance_ready " in generate_latest(registry)
    finally:
        exporter.close()
