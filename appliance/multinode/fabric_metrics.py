"""The fabric qualification's metrics (K25), apart from fabric.py: `appliance run` measures the fabric without
loading prometheus_client; only the exporter registers these."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from appliance.metricfamilies import DescribedCollector, Family
from appliance.multinode.fabric_report import VERDICTS, FabricReport

VERDICT = Family("gauge", "appliance_fabric_qualification",
                 "1 for this node's fabric qualification verdict before launch", ("rule", "backend", "verdict"))
BANDWIDTH = Family("gauge", "appliance_fabric_bandwidth_bytes_per_second",
                   "point-to-point bandwidth rank <-> head measured before launch", ("peer",))
LATENCY = Family("gauge", "appliance_fabric_latency_seconds",
                 "small-message round trip / 2, rank <-> head, measured before launch", ("peer",))
FLOOR_BANDWIDTH = Family("gauge", "appliance_fabric_floor_bandwidth_bytes_per_second",
                         "the profile's bandwidth floor the links were judged against")
FLOOR_LATENCY = Family("gauge", "appliance_fabric_floor_latency_seconds",
                       "the profile's latency ceiling the links were judged against")
ALLREDUCE = Family("gauge", "appliance_fabric_allreduce_bus_bandwidth_bytes_per_second",
                   "all-reduce bus bandwidth over all ranks, measured before launch")


class FabricCollector(DescribedCollector):
    """This node's qualification before launch (static for the serve's life)."""

    FAMILIES = (VERDICT, BANDWIDTH, LATENCY, FLOOR_BANDWIDTH, FLOOR_LATENCY, ALLREDUCE)

    def __init__(self, report: FabricReport) -> None:
        self.report = report

    def collect(self) -> Iterator[Metric]:
        r = self.report
        verdict = VERDICT.new()
        for one in VERDICTS:
            verdict.add_metric([r.rule, r.backend, one], 1.0 if r.verdict == one else 0.0)
        yield verdict
        bw, lat = BANDWIDTH.new(), LATENCY.new()
        for peer, link in sorted(r.peers.items()):
            bw.add_metric([peer], link.bandwidth_gbps * 1e9)
            lat.add_metric([peer], link.latency_us / 1e6)
        yield bw
        yield lat
        if r.floor.min_bandwidth_gbps is not None:  # the dashboard draws the links against it
            yield FLOOR_BANDWIDTH.new(r.floor.min_bandwidth_gbps * 1e9)
        if r.floor.max_latency_us is not None:
            yield FLOOR_LATENCY.new(r.floor.max_latency_us / 1e6)
        if r.allreduce_busbw_gbps is not None:
            yield ALLREDUCE.new(r.allreduce_busbw_gbps * 1e9)
