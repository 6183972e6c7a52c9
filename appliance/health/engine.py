"""The engine's own HTTP view: vLLM `/health` and the few `/metrics` series readiness needs (K18)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import httpx

from appliance.http_bounded import ReplyError, get
from appliance.redact import clip

MAX_METRICS_BYTES = 16 << 20
"""vLLM's /metrics is some hundred KiB (histograms per engine)."""
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
"""Admitted, not yet scheduled: a drain that read RUNNING alone would stop an engine with requests queued."""
# Any of these moving means the engine steps: decode adds generation tokens, a finished prefill adds
# prompt tokens, and every scheduler iteration adds one observation to the iteration histogram.
PROGRESS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:iteration_tokens_total_count")


@dataclass(frozen=True)
class EngineSample:
    checked: bool
    """False when no engine URL is configured (log-only judgement)."""
    healthy: bool = False
    """/health answered 200."""
    running: float | None = None
    """vllm:num_requests_running summed over engines; None when /metrics did not answer."""
    progress: float | None = None
    """Sum of the PROGRESS counters."""
    error: str | None = None
    waiting: float | None = None
    """vllm:num_requests_waiting summed over engines; None when /metrics did not answer or lacks it."""

    def to_json(self) -> dict[str, object]:
        return {"checked": self.checked, "healthy": self.healthy, "requests_running": self.running,
                "requests_waiting": self.waiting, "progress_counter": self.progress, "error": self.error}

    @property
    def idle(self) -> bool:
        """Answering, and neither running nor holding a request (an engine without the waiting series counts on
        the running one)."""
        return self.healthy and self.running == 0 and not self.waiting


NOT_CHECKED = EngineSample(checked=False)


def parse_metrics(text: str) -> tuple[float | None, float | None, float | None]:
    """(requests running, progress counter, requests waiting) from Prometheus text; a cheap scan, not a full
    parser."""
    running: float | None = None
    progress: float | None = None
    waiting: float | None = None
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in (RUNNING, WAITING) and name not in PROGRESS:
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        if name == RUNNING:
            running = (running or 0.0) + value
        elif name == WAITING:
            waiting = (waiting or 0.0) + value
        else:
            progress = (progress or 0.0) + value
    return running, progress, waiting


class EngineProbe:
    def __init__(self, base_url: str, *, timeout: float = 2.0, client: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout, trust_env=False)
        self.timeout = timeout

    def sample(self) -> EngineSample:
        """/health then /metrics, each whole within the timeout and a size cap: an engine wedged mid-reply (or
        whatever else answers on its port) must not stall the exporter's poll loop."""
        try:
            health = get(self._client, f"{self.base_url}/health", deadline=self.timeout, max_bytes=1 << 16)
        except (httpx.HTTPError, ReplyError) as exc:
            return EngineSample(True, error=f"/health: {type(exc).__name__}: {clip(str(exc), 300)}")
        if health.status != 200:
            return EngineSample(True, error=f"/health answered {health.status}")
        try:
            metrics = get(self._client, f"{self.base_url}/metrics", deadline=self.timeout, max_bytes=MAX_METRICS_BYTES)
            if metrics.status != 200:
                raise ReplyError(f"HTTP {metrics.status}")
        except (httpx.HTTPError, ReplyError) as exc:
            return EngineSample(True, healthy=True, error=f"/metrics: {type(exc).__name__}: {clip(str(exc), 300)}")
        running, progress, waiting = parse_metrics(metrics.text)
        return EngineSample(True, healthy=True, running=running, progress=progress, waiting=waiting)

    def close(self) -> None:
        self._client.close()


SILENT_LOOKS = 3
"""Looks in a row without an answer that count as an engine gone (each bounded by the probe's timeout): one slow reply
of a busy engine is no stop."""
Idle = Literal["idle", "gone", "busy"]


def wait_idle(url: str, bound_s: float, poll_s: float) -> tuple[Idle, float, EngineSample]:
    """Until the engine at `url` runs and queues no request (`idle`), has stopped answering (`gone`), or `bound_s`
    has passed with requests still running or waiting (`busy`): the drain before a stop (`appliance drain`, a
    promote's bridge, a promote's stop). At least one look, even with `bound_s` 0."""
    began = time.monotonic()
    probe = EngineProbe(url)
    silent = 0
    try:
        while True:
            sample = probe.sample()
            silent = 0 if sample.healthy else silent + 1
            if silent >= SILENT_LOOKS:
                return "gone", time.monotonic() - began, sample
            if sample.idle:
                return "idle", time.monotonic() - began, sample
            if time.monotonic() - began >= bound_s:
                return "busy", time.monotonic() - began, sample
            time.sleep(poll_s)
    finally:
        probe.close()
