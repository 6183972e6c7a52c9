"""The exporter's HTTP side: /live, /ready, /startup, /status, /metrics on a small threaded stdlib
server. Handlers read the monitor's latest snapshot only, so a probe costs microseconds."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from appliance.health.monitor import Monitor
from appliance.health.verdicts import Verdict, Verdicts
from appliance.redact import redact, redact_tree

CONNECTION_TIMEOUT_S = 10.0
"""A client that sends nothing for this long is dropped: a slow or stuck client cannot hold a thread."""
MAX_CONNECTIONS = 64
"""Connections served at once; more are closed at accept (probes and scrapes need a handful)."""


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], verdicts: Verdicts, registry: CollectorRegistry, *,
                 connection_timeout: float = CONNECTION_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(address, _Handler)
        self.monitor: Monitor = verdicts.monitor
        self.judge = verdicts
        self.registry = registry
        self.clock: Callable[[], float] = verdicts.clock
        self.connection_timeout = connection_timeout
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # at the cap: refuse rather than grow a thread per client
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line per failed connection (a client that hung up mid-reply), never a traceback."""
        exc = sys.exc_info()[1]
        print(f"appliance exporter: client {client_address[0]}:{client_address[1]}: "
              f"{type(exc).__name__}: {redact(str(exc))[:200]}", file=sys.stderr, flush=True)

    def verdicts(self) -> dict[str, Verdict]:
        return self.judge.all()


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    server_version = "appliance-exporter"

    def setup(self) -> None:
        self.timeout = self.server.connection_timeout  # the socket's timeout for every read of this connection
        super().setup()

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, *, head: bool) -> None:
        route = self.path.split("?", 1)[0].rstrip("/") or "/"
        name = route.lstrip("/")
        if name in ("live", "ready", "startup"):
            ok, body = self.server.verdicts()[name]
            self._send(200 if ok else 503, json.dumps(body).encode() + b"\n", "application/json", head)
        elif route == "/status":
            snap = self.server.monitor.snapshot
            body = snap.to_json(self.server.monitor.identity, self.server.clock())
            body["poll_error"] = self.server.monitor.last_error
            body = redact_tree(body)  # /status is unauthenticated: no secret from a log line or an error
            self._send(200, json.dumps(body, indent=1).encode() + b"\n", "application/json", head)
        elif route == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST, head)
        else:
            self._send(404, b'{"error": "not found", "routes": ["/live", "/ready", "/startup", "/status", '
                            b'"/metrics"]}\n', "application/json", head)

    def _send(self, code: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the exporter's own log


def serve(monitor: Monitor, server: HealthServer, *, interval: float, stop: threading.Event) -> None:
    """Serve HTTP in a thread and poll in this one until `stop` is set; then close both."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="health-http", daemon=True)
    thread.start()
    try:
        monitor.run(stop, interval)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
