"""`appliance drain` (a surge pod's preStop hook, `appliance k8s --rollout surge`) against the REAL CPU engine of the
session's shared serve: it returns only once a running request has finished, and says so when its bound comes
first. No pod here: the kubelet's part (run the hook, then SIGTERM) is Kubernetes' own."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import BIN, wait_for
from tests.shared_serve import SharedServe


@dataclass
class LongRequest:
    """One completion of `tokens` tokens (ignore_eos: the engine runs it to the end), timed by the client."""

    url: str
    tokens: int
    finished_at: float | None = None
    status: int | None = None

    def start(self) -> threading.Thread:
        body = {"model": "smollm2", "prompt": "Count slowly:", "max_tokens": self.tokens, "ignore_eos": True}

        def send() -> None:
            answer = httpx.post(f"{self.url}/v1/completions", json=body, timeout=600, trust_env=False)
            self.finished_at, self.status = time.monotonic(), answer.status_code

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        return thread


def running(url: str) -> float:
    from appliance.health.engine import parse_metrics

    value, _, _ = parse_metrics(httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text)
    return value or 0.0


def drain(url: str, *flags: str) -> tuple[subprocess.CompletedProcess[str], float]:
    done = subprocess.run([str(BIN / "appliance"), "drain", "--url", url, *flags], capture_output=True, text=True,
                          timeout=600, check=False)
    return done, time.monotonic()


@pytest.fixture
def idle(shared_serve: SharedServe) -> str:
    url = shared_serve.serve.url
    assert wait_for(lambda: running(url) == 0, timeout=120, interval=0.5), "the shared serve stays busy"
    return url


def test_drain_returns_once_the_running_request_has_finished(idle: str) -> None:
    request = LongRequest(idle, tokens=400)
    thread = request.start()
    assert wait_for(lambda: running(idle) >= 1, timeout=60, interval=0.1), "the request never ran"
    done, returned_at = drain(idle, "--settle-s", "0", "--max-s", "300")
    thread.join(60)
    assert done.returncode == 0, done.stderr
    assert "runs no request" in done.stdout
    assert request.status == 200 and request.finished_at is not None
    assert request.finished_at <= returned_at  # it waited for the request, not for a fixed time


def test_drain_says_when_its_bound_comes_before_the_requests_end(idle: str) -> None:
    request = LongRequest(idle, tokens=400)
    thread = request.start()
    assert wait_for(lambda: running(idle) >= 1, timeout=60, interval=0.1), "the request never ran"
    done, returned_at = drain(idle, "--settle-s", "0", "--max-s", "1")
    assert done.returncode == 1
    assert "1 request(s) still running after 1 s" in done.stderr and "--drain-s" in done.stderr
    assert request.finished_at is None or request.finished_at > returned_at  # it did not wait for the end
    thread.join(300)
    assert request.status == 200  # the engine was never stopped: the hook only waits
