"""The fabric qualification's metrics (K25), apart from fabric.py: `appliance run` measures the fabric without
loading prometheus_client; only the exporter registers these."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from appliance.multinode.fabric import RULE


class FabricCollector(Collector):
    """This node's qualification before launch (static for the serve's life)."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.report = report

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        r = self.report
        verdict = GaugeMetricFamily("appliance_fabric_qualification", "1 for this node's fabric qualification "
                                    "verdict before launch", labels=["rule", "backend", "verdict"])
        for one in ("pass", "warn", "fail"):
            verdict.add_metric([RULE, str(r.get("backend")), one], 1.0 if r.get("verdict") == one else 0.0)
        yield verdict
        bw = GaugeMetricFamily("appliance_fabric_bandwidth_bytes_per_second",
                               "point-to-point bandwidth rank <-> head measured before launch", labels=["peer"])
        lat = GaugeMetricFamily("appliance_fabric_latency_seconds",
                                "small-message round trip / 2, rank <-> head, measured before launch", labels=["peer"])
        for peer, m in sorted(r.get("peers", {}).items()):
            bw.add_metric([peer], m["bandwidth_gbps"] * 1e9)
            lat.add_metric([peer], m["latency_us"] / 1e6)
        yield bw
        yield lat
        floor = r.get("floor") or {}
        if isinstance(floor.get("min_bandwidth_gbps"), int | float):
            yield GaugeMetricFamily("appliance_fabric_floor_bandwidth_bytes_per_second",
                                    "the profile's bandwidth floor the links were judged against",
                                    value=floor["min_bandwidth_gbps"] * 1e9)
        if isinstance(floor.get("max_latency_us"), int | float):
            yield GaugeMetricFamily("appliance_fabric_floor_latency_seconds",
                                    "the profile's latency ceiling the links were judged against",
                                    value=floor["max_latency_us"] / 1e6)
        if isinstance(r.get("allreduce_busbw_gbps"), int | float):
            yield GaugeMetricFamily("appliance_fabric_allreduce_bus_bandwidth_bytes_per_second",
                                    "all-reduce bus bandwidth over all ranks, measured before launch",
                                    value=r["allreduce_busbw_gbps"] * 1e9)
