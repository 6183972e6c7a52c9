"""End to end with the REAL vLLM CPU engine: the exporter (the real `appliance exporter` command)
tails the engine's log and asks its HTTP API.

starting -> ready; a wedged engine core (SIGSTOP while a request runs) turns /ready red behind a
green vLLM /health and SIGCONT brings it back; a SIGKILLed engine turns /ready red within two
probe intervals, and a restarted engine appending to the same log is ready again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

BIN = Path(sys.executable).parent
PROBE_INTERVAL = 4.0  # what a readiness probe would use (k8s periodSeconds); the exporter polls every 1 s
PROGRESS_WINDOW = 5.0
START_TIMEOUT = 180.0


@dataclass
class Rig:
    model_dir: Path
    log: Path
    engine_port: int
    health_port: int
    exporter: subprocess.Popen[bytes]
    engine: subprocess.Popen[bytes] | None = None
    states: list[str] = field(default_factory=list)

    @property
    def health(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    def start_engine(self) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
        with self.log.open("ab") as out:  # a restart appends, as supervisord does
            self.engine = subprocess.Popen(
                [str(BIN / "vllm"), "serve", str(self.model_dir), "--enforce-eager", "--served-model-name",
                 "smollm2", "--max-model-len", "2048", "--max-num-seqs", "8", "--port", str(self.engine_port)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def kill_engine(self) -> None:
        if self.engine and self.engine.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.engine.pid, signal.SIGKILL)
            self.engine.wait(30)

    def engine_core(self):  # -> psutil.Process (psutil comes with the engine's environment)
        import psutil

        assert self.engine is not None
        for child in psutil.Process(self.engine.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
                    return child
        raise AssertionError("no EngineCore process under the engine")

    def status(self) -> dict:
        return httpx.get(f"{self.health}/status", timeout=5).json()

    def ready_code(self) -> int:
        return httpx.get(f"{self.health}/ready", timeout=5).status_code

    def note_state(self) -> None:
        state = self.status()["state"]
        if not self.states or self.states[-1] != state:
            self.states.append(state)

    def wait(self, predicate, timeout: float, what: str) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            with contextlib.suppress(httpx.HTTPError):
                self.note_state()
                if predicate():
                    # /status was read before the predicate's own request, and the exporter's snapshot can turn
                    # between the two (CI saw states ['starting', 'loading'] with /ready already 200): read it
                    # again, so the states end with what the predicate saw.
                    self.note_state()
                    return time.monotonic() - start
            if self.engine is not None and self.engine.poll() is not None and what.startswith("ready"):
                break
            time.sleep(0.25)
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        raise AssertionError(f"{what} not reached in {timeout} s; states {self.states}\n{tail}")


@pytest.fixture(scope="module")
def rig(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    log = tmp_path_factory.mktemp("e2e") / "vllm.log"
    engine_port, health_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "appliance", "exporter", "--profile", "cpu-smoke", "--set",
         f"server.port={engine_port}", "--log", str(log), "--host", "127.0.0.1", "--port", str(health_port),
         "--interval", "1", "--progress-window", str(PROGRESS_WINDOW), "--live-grace", "600"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rig = Rig(smoke_model_dir, log, engine_port, health_port, exporter)
    try:
        rig.wait(lambda: True, 30, "exporter up")
        yield rig
    finally:
        rig.kill_engine()
        exporter.send_signal(signal.SIGTERM)
        try:
            assert exporter.wait(15) == 0
        finally:
            if exporter.poll() is None:
                exporter.kill()


def test_state_goes_from_starting_to_ready_with_the_real_engine(rig: Rig):
    assert rig.status()["state"] == "starting"  # no log yet
    rig.start_engine()
    took = rig.wait(lambda: rig.ready_code() == 200, START_TIMEOUT, "ready")
    print(f"ready {took:.1f} s after the engine started; states {rig.states}")
    assert rig.states[0] == "starting" and rig.states[-1] == "ready"
    assert set(rig.states) <= {"starting", "loading", "ready"}
    status = rig.status()
    assert status["log_ready"] and status["engine"]["healthy"]
    assert {e["name"]: e["status"] for e in status["expectations"]}["kv-holds-max-model-len"] == "pass"
    assert status["facts"]["kv_device"] == "CPU"


@dataclass
class StreamedRequest:
    """A long streamed completion, so the test knows whether tokens still arrive (not just a gauge)."""

    url: str
    chunks: int = 0
    last_chunk: float = 0.0
    done: bool = False
    error: str | None = None

    def start(self) -> threading.Thread:
        body = {"model": "smollm2", "prompt": "Count slowly:", "max_tokens": 1900, "ignore_eos": True,
                "stream": True}

        def consume() -> None:
            try:
                with httpx.stream("POST", f"{self.url}/v1/completions", json=body, timeout=600,
                                  trust_env=False) as response:
                    for line in response.iter_lines():
                        if line.startswith("data:"):
                            self.chunks += 1
                            self.last_chunk = time.monotonic()
            except httpx.HTTPError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
            finally:
                self.done = True

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        return thread

    def stalled(self, quiet_s: float) -> bool:
        return not self.done and time.monotonic() - self.last_chunk >= quiet_s


class Wedge:
    """SIGSTOP of the engine core and the workers under it: the engine process tree hangs (as on a stuck
    collective) while the API server, its /health and its /metrics keep answering. The client's stream
    says whether it took: the request stays open and its tokens stop."""

    def __init__(self, rig: Rig) -> None:
        self.rig, self.timeline = rig, []  # what happened when, for a failure message
        self.t0 = time.monotonic()
        self.stopped: list = []  # psutil.Process
        self.stopped_at = 0.0

    def note(self, what: str) -> None:
        self.timeline.append(f"+{time.monotonic() - self.t0:.2f}s {what}")

    def suspend(self) -> None:
        core = self.rig.engine_core()
        self.stopped = [core, *core.children(recursive=True)]
        for proc in self.stopped:  # the scheduler first: nothing new is handed to a worker after it
            proc.suspend()
        self.stopped_at = time.monotonic()
        self.note(f"SIGSTOP {[p.pid for p in self.stopped]}")

    def resume(self) -> None:
        for proc in reversed(self.stopped):
            proc.resume()
        self.note("SIGCONT")
        self.stopped = []

    def take(self, attempts: int = 3) -> tuple[StreamedRequest, threading.Thread]:
        """A request in flight, seen running by the exporter, then the wedge; retried when the request
        finished before the stop took (a setup race, not the exporter's), failed when tokens keep coming."""
        url = f"http://127.0.0.1:{self.rig.engine_port}"
        for attempt in range(1, attempts + 1):
            stream = StreamedRequest(url)
            thread = stream.start()
            self.note(f"attempt {attempt}: request sent")

            def in_flight(stream: StreamedRequest = stream) -> bool:
                engine = self.rig.status()["engine"]
                self.note(f"{stream.chunks} chunks; exporter: running={engine['requests_running']} "
                          f"progress={engine['progress_counter']} error={engine['error']}")
                if stream.done:
                    raise AssertionError(f"the request ended before it was seen in flight: {self.timeline}")
                return stream.chunks >= 10 and (engine["requests_running"] or 0) >= 1

            self.rig.wait(in_flight, 60, "a request in flight")
            self.suspend()
            chunks = stream.chunks
            deadline = time.monotonic() + 6.0
            while time.monotonic() < deadline and not stream.done and not stream.stalled(1.5):
                time.sleep(0.1)
            self.note(f"{stream.chunks - chunks} chunks after SIGSTOP; done={stream.done} error={stream.error}")
            if stream.stalled(1.5):
                return stream, thread
            self.resume()
            assert stream.done, f"tokens still arrive with the engine core stopped: {self.timeline}"
            thread.join(5)
        raise AssertionError(f"the request ended before the wedge took, {attempts} times: {self.timeline}")


def test_a_wedged_engine_core_behind_a_green_health_is_not_ready_and_recovers(rig: Rig):
    rig.wait(lambda: rig.ready_code() == 200, 60, "ready before the wedge")
    wedge = Wedge(rig)
    stream, thread = wedge.take()
    try:
        budget = PROGRESS_WINDOW + 3 * PROBE_INTERVAL - (time.monotonic() - wedge.stopped_at)
        rig.wait(lambda: rig.ready_code() == 503, budget, "wedge noticed")
        took = time.monotonic() - wedge.stopped_at
        print(f"wedge noticed {took:.1f} s after SIGSTOP (progress window {PROGRESS_WINDOW:g} s); {wedge.timeline}")
        assert stream.stalled(1.0), f"the request moved during the wedge: {wedge.timeline}"
        assert httpx.get(f"http://127.0.0.1:{rig.engine_port}/health", timeout=5).status_code == 200  # K18
        reasons = httpx.get(f"{rig.health}/ready", timeout=5).json()["reasons"]
        assert any(r.startswith("K18") for r in reasons), reasons
    finally:
        wedge.resume()
    took = rig.wait(lambda: rig.ready_code() == 200, 60, "ready after SIGCONT")
    print(f"ready again {took:.1f} s after SIGCONT")
    chunks_at_resume = stream.chunks
    rig.wait(lambda: stream.chunks > chunks_at_resume, 30, "tokens flowing again after SIGCONT")
    thread.join(600)
    assert stream.done and stream.error is None, stream.error


def test_a_killed_engine_fails_ready_within_two_probe_intervals_and_a_restart_recovers(rig: Rig):
    rig.wait(lambda: rig.ready_code() == 200, 60, "ready before the kill")
    rig.engine_core().kill()  # SIGKILL the engine core under a live API server
    took = rig.wait(lambda: rig.ready_code() == 503, 2 * PROBE_INTERVAL, "not ready after the kill")
    assert took < 2 * PROBE_INTERVAL
    print(f"/ready 503 {took:.1f} s after SIGKILL of the engine core (two probe intervals: {2 * PROBE_INTERVAL:g} s)")
    rig.wait(lambda: rig.status()["state"] == "failed", 30, "failed (K17 in the log)")
    assert {h["id"] for h in rig.status()["fatal"]} >= {"engine-core-exited"}
    rig.kill_engine()
    rig.start_engine()  # what supervisord does: a new run appended to the same log
    took = rig.wait(lambda: rig.ready_code() == 200, START_TIMEOUT, "ready after the restart")
    print(f"ready {took:.1f} s after the restart")
    status = rig.status()
    assert status["log"]["runs"] == 2 and status["fatal"] == []
