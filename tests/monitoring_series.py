"""The series the monitoring bundle may name, from the fixtures: what an exporter built as `appliance exporter`
builds it shows on DeepSeek logs (a multi-node head with a worker and a canary, a fatal line, a start midway through
its weights, the memory watchdog and a real NCCL fabric report from docs/evidence/), vLLM's own /metrics of the CPU
serve, its speculative-decoding series written by vLLM's own code, and dcgm-exporter's GPU series (written from its
source). What only SM12x or several nodes print is checked here; the rest against the real CPU serve
(tests/test_monitoring_engine.py)."""

from __future__ import annotations

import json
import re
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.health.canary_state import CanaryState, write_state
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.hostmem.metrics import WatchdogCollector
from appliance.hostmem.sources import Pressure
from appliance.hostmem.watchdog import WatchState
from appliance.multinode.fabric_metrics import FabricCollector
from appliance.multinode.fabric_report import FabricReport
from appliance.profile.loader import load_profile

ROOT = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).parent / "fixtures" / "logs"
DEEPSEEK = LOGS / "deepseek"
FABRIC_REPORT = ROOT / "docs" / "evidence" / "fabric-h200x2" / "nccl-nvlink-64MiB.jsonl"
VLLM_METRICS = (LOGS / "cpu-smoke-metrics.txt", LOGS / "vllm-spec-decode-metrics.txt")
DCGM_METRICS = LOGS / "dcgm-exporter-metrics.txt"
"""NVIDIA dcgm-exporter's /metrics with its default counters, written from its source (the file's header cites it)."""
NAME = re.compile(r"\b(appliance_[a-z0-9_]+|vllm:[a-z0-9_:]+|DCGM_FI_[A-Z0-9_]+)")


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    return set(NAME.findall(expr))


def _mid_start(into: Path) -> Path:
    """The DeepSeek head's log cut midway through its weights (31 of 48 shards): the start-up's count and estimate."""
    lines = (DEEPSEEK / "gb10-tp2-dspark-head.log").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "checkpoint shards" in line)
    log = into / "mid-start.log"
    log.write_text("".join(lines[:cut]) + "Loading safetensors checkpoint shards:  65% Completed | 31/48 "
                   "[01:31<00:50,  2.95s/it]\n")
    return log


def _watchdog() -> WatchState:
    return WatchState(mode="stop", level="not-ready", reasons=["K24 MemAvailable 9.1 GiB under the hold line"],
                      unknown=[], available_gib=9.1, fall_gib_per_s=0.4, pressure=Pressure(12.0, 3.0),
                      engine_stopped=False, stops=1, restarts=1, kernel_source="fixture", procfs="/proc")


def exporter_metrics(log: Path, tmp: Path, profile: str = "gb10-tp2") -> str:
    """/metrics of a head exporter after one poll of `log`, with a worker it cannot reach (the cross-rank series
    are there, unknown), a canary that has run, the watchdog and this rank's fabric report."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    peer = f"http://127.0.0.1:{free.getsockname()[1]}"
    free.close()
    state = tmp / "canary.json"
    write_state(state, CanaryState(status="ok", last_success_unix=1.0, last_round_unix=1.0,
                                   failures_total={"repetition-loop": 1}))
    exporter = build_exporter(ExporterConfig(load_profile(profile), log, "head", peers={1: peer}, engine_timeout=1,
                                             canary_state=state))
    report = FabricReport.from_json(json.loads(FABRIC_REPORT.read_text().splitlines()[0]))
    exporter.server.registry.register(WatchdogCollector(_watchdog))
    exporter.server.registry.register(FabricCollector(report))
    try:
        exporter.monitor.poll()
        return generate_latest(exporter.server.registry).decode()
    finally:
        exporter.close()


def names_in(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


@cache
def exporter_series_names() -> frozenset[str]:
    with tempfile.TemporaryDirectory() as tmp:
        logs = [DEEPSEEK / "illegal-memory-access.log", DEEPSEEK / "gb10-tp2-dspark-head.log", _mid_start(Path(tmp))]
        return frozenset(n for log in logs for n in names_in(exporter_metrics(log, Path(tmp))))


@cache
def vllm_series_names() -> frozenset[str]:
    return frozenset(n for path in VLLM_METRICS for n in names_in(path.read_text()))


@cache
def dcgm_series_names() -> frozenset[str]:
    return frozenset(names_in(DCGM_METRICS.read_text()))


def fixture_series_names() -> frozenset[str]:
    return exporter_series_names() | vllm_series_names() | dcgm_series_names()


@contextmanager
def serve_text(body: str) -> Iterator[int]:
    """A stand-in exporter on a loopback port: /metrics answers `body` in Prometheus' text format. For what cannot
    run here (dcgm-exporter needs a GPU and DCGM); yields the port."""
    payload = body.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:  # scrapes every second: keep the test's output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
