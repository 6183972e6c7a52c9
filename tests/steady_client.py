"""Test and benchmark equipment: a client sending small completions to a serve the whole time, and a probe of its
exporter's /ready beside it, so an upgrade's cost to users is counted: failed requests, the seconds between a
request failing and the next one succeeding (out of service), and the seconds the exporter said not ready.
Loopback only."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class Event:
    start: float
    end: float
    ok: bool
    error: str = ""


@dataclass
class Window:
    """What the client saw between two marks."""

    name: str
    seconds: float
    requests: int
    failed: int
    out_of_service_s: float
    not_ready_s: float
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"phase": self.name, "seconds": round(self.seconds, 1), "requests": self.requests,
                "failed": self.failed, "out_of_service_s": round(self.out_of_service_s, 1),
                "not_ready_s": round(self.not_ready_s, 1), "errors": self.errors[:5]}


class SteadyClient:
    def __init__(self, url: str, exporter: str, model: str, *, pause_s: float = 0.25, timeout_s: float = 60.0,
                 probe_s: float = 0.5) -> None:
        self.url, self.exporter, self.model = url.rstrip("/"), exporter.rstrip("/"), model
        self.pause_s, self.timeout_s, self.probe_s = pause_s, timeout_s, probe_s
        self.events: list[Event] = []
        self.ready: list[tuple[float, bool]] = []
        self.marks: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._probe, daemon=True)]
        self._lock = threading.Lock()

    def _send(self) -> None:
        body = {"model": self.model, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
        with httpx.Client(timeout=self.timeout_s, trust_env=False) as client:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    r = client.post(f"{self.url}/v1/completions", json=body)
                    ok, error = r.status_code == 200, "" if r.status_code == 200 else f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    ok, error = False, type(exc).__name__
                with self._lock:
                    self.events.append(Event(began, time.monotonic(), ok, error))
                self._stop.wait(self.pause_s if ok else 0.5)

    def _probe(self) -> None:
        with httpx.Client(timeout=3, trust_env=False) as client:
            while not self._stop.is_set():
                try:
                    ready = client.get(f"{self.exporter}/ready").status_code == 200
                except httpx.HTTPError:
                    ready = False
                with self._lock:
                    self.ready.append((time.monotonic(), ready))
                self._stop.wait(self.probe_s)

    def __enter__(self) -> SteadyClient:
        for t in self._threads:
            t.start()
        self.mark("start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s + 5)

    def mark(self, name: str) -> None:
        self.marks.append((name, time.monotonic()))

    def window(self, name: str, since: str) -> Window:
        """From mark `since` to now."""
        start = dict(self.marks)[since]
        return self.between(name, start, time.monotonic())

    def between(self, name: str, start: float, end: float) -> Window:
        with self._lock:
            events = [e for e in self.events if start <= e.start < end]
            ready = [(t, r) for t, r in self.ready if start <= t < end]
        out, down_since = 0.0, None
        for e in events:
            if not e.ok and down_since is None:
                down_since = e.start
            elif e.ok and down_since is not None:
                out += e.end - down_since
                down_since = None
        if down_since is not None:
            out += end - down_since
        not_ready = sum(min(self.probe_s, end - t) for t, r in ready if not r)
        errors = sorted({e.error for e in events if not e.ok})
        return Window(name, end - start, len(events), sum(1 for e in events if not e.ok), out, not_ready, errors)

    def ok_since(self, since: float) -> bool:
        with self._lock:
            return any(e.ok and e.start >= since for e in self.events)
