"""The exporter's HTTP side: /live, /ready, /startup, /status, /metrics on a small threaded stdlib server, and the
probes again on a reserved listener that no network client can reach. Handlers read the monitor's latest snapshot
only, so a probe costs microseconds.

Hostile clients (issue 22): a thread per connection, at most `max_connections` of them, and
- every request has a **total deadline** from accept to the last byte of the reply (a client sending one header line
  every few seconds is closed when it runs out, not kept alive by each line);
- at the cap, the connection that has waited longest for its request is **evicted** to make room (idle and slow
  clients go first; a probe sends its request at once, so it is never the oldest), instead of refusing the newcomer;
- the probes have a **reserved path**: the same /live, /ready and /startup on an abstract Unix socket
  (`@appliance-probe-PORT`, the network namespace's own: the container's, the pod's), which a flood on the TCP port
  cannot fill. `healthchecks/probe` (Docker's HEALTHCHECK, the Kubernetes probes) asks there.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from appliance.health.monitor import Monitor
from appliance.health.verdicts import Verdict, Verdicts
from appliance.redact import clip, redact_tree

CONNECTION_TIMEOUT_S = 10.0
"""A client has this long, in all, to send its request and take the reply; then its connection is closed."""
MAX_CONNECTIONS = 64
"""Connections served at once per listener (probes and scrapes need a handful)."""
PROBE_ROUTES = ("live", "ready", "startup")
ROUTES = ["/live", "/ready", "/startup", "/status", "/metrics"]


def probe_socket_name(port: int) -> str:
    """The reserved probe listener of the exporter on `port`: an abstract Unix socket (no file; it lives in the
    network namespace, so only processes of this container or pod reach it). healthchecks/probe derives the same
    name from APPLIANCE_HEALTH_PORT."""
    return f"appliance-probe-{port}"


@dataclass(frozen=True)
class ConnectionPolicy:
    """How a listener treats its clients."""

    deadline_s: float = CONNECTION_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    deadline: Literal["request", "read"] = "request"
    """`request`: one deadline for the whole request. `read`: each read gets it anew, as a plain stdlib server does
    (a slowloris client lives forever): kept only as the unprotected baseline of benchmarks/exporter_floods.py."""
    evict_at_cap: bool = True
    """At the cap, evict the connection waiting longest for its request; False refuses the newcomer (the baseline)."""


class _Connection:
    __slots__ = ("accepted", "phase", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.accepted = time.monotonic()
        self.phase: Literal["request", "reply", "evicted"] = "request"


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes, each read given only what is left of the request's deadline."""

    def __init__(self, sock: socket.socket, deadline_at: float | None, per_read: float) -> None:
        self._sock, self._deadline_at, self._per_read = sock, deadline_at, per_read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        timeout = self._per_read
        if self._deadline_at is not None:
            timeout = self._deadline_at - time.monotonic()
            if timeout <= 0:
                raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(timeout)
        return self._sock.recv_into(buffer)


class _Guarded(socketserver.ThreadingMixIn):
    """The connection rules of both listeners (see the module's docstring)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    """The listen backlog: a burst of connections waits for accept instead of being reset."""
    policy: ConnectionPolicy

    def _guard(self, policy: ConnectionPolicy) -> None:
        self.policy = policy
        self._open: dict[int, _Connection] = {}
        self._evicted: set[int] = set()
        """Connections closed to make room whose threads are still ending: their errors are expected, not logged."""
        self._lock = threading.Lock()
        self.evicted = 0
        self.refused = 0
        self.accepted = 0
        """Connections taken off the listen backlog so far (a client's connect returns before this)."""

    def process_request(self, request: Any, client_address: Any) -> None:
        conn = _Connection(request)
        self.accepted += 1  # only the serving thread accepts: no lock needed
        victim: _Connection | None = None
        with self._lock:
            if len(self._open) >= self.policy.max_connections:
                victim = self._victim() if self.policy.evict_at_cap else None
                if victim is None:
                    self.refused += 1
                    refuse = True
                else:
                    self.evicted += 1
                    del self._open[id(victim.sock)]
                    victim.phase = "evicted"
                    self._evicted.add(id(victim.sock))
                    refuse = False
            else:
                refuse = False
            if not refuse:
                self._open[id(request)] = conn
        if victim is not None:
            _hang_up(victim.sock)  # its thread's read returns at once; the thread ends
        if refuse:
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # type: ignore[misc]
        except Exception:
            self._forget(request)
            raise

    def _victim(self) -> _Connection | None:
        waiting = [c for c in self._open.values() if c.phase == "request"]
        return min(waiting, key=lambda c: c.accepted) if waiting else None

    def _forget(self, request: Any) -> None:
        with self._lock:
            self._open.pop(id(request), None)
            self._evicted.discard(id(request))

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._forget(request)

    def replying(self, request: Any) -> float | None:
        """The handler has its request: it is no longer evictable. Seconds left for the reply (None: no deadline;
        0: the connection was evicted meanwhile, so nothing is answered)."""
        with self._lock:
            conn = self._open.get(id(request))
            if conn is None:
                return 0.0
            conn.phase = "reply"
        if self.policy.deadline == "read":
            return None
        return conn.accepted + self.policy.deadline_s - time.monotonic()

    def deadline_at(self, request: Any) -> float | None:
        if self.policy.deadline == "read":
            return None
        conn = self._open.get(id(request))
        return (conn.accepted if conn else time.monotonic()) + self.policy.deadline_s

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line per failed connection (a client that hung up mid-reply, or ran out of time), never a traceback;
        none for a connection evicted at the cap (a flood would fill the log with them)."""
        if id(request) in self._evicted:
            return
        exc = sys.exc_info()[1]
        who = f"{client_address[0]}:{client_address[1]}" if isinstance(client_address, tuple) else "probe socket"
        print(f"appliance exporter: client {who}: {type(exc).__name__}: {clip(str(exc), 200)}", file=sys.stderr,
              flush=True)


def _hang_up(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Views:
    """What both listeners answer from: the monitor's snapshot, judged by the one Verdicts (health/verdicts.py) the
    `appliance_ready` metric reads too."""

    monitor: Monitor
    clock: Callable[[], float]
    judge: Verdicts

    def _views(self, verdicts: Verdicts) -> None:
        self.judge = verdicts
        self.monitor = verdicts.monitor
        self.clock = verdicts.clock

    def verdicts(self) -> dict[str, Verdict]:
        return self.judge.all()


class HealthServer(_Guarded, _Views, http.server.HTTPServer):
    """The TCP listener: every route."""

    allow_reuse_address = True
    probes_only = False

    def __init__(self, address: tuple[str, int], verdicts: Verdicts, registry: CollectorRegistry, *,
                 policy: ConnectionPolicy = ConnectionPolicy()) -> None:
        self._guard(policy)
        self._views(verdicts)
        self.registry = registry
        if ":" in address[0]:  # an IPv6 address (a worker's fabric address may be one)
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


class ProbeServer(_Guarded, _Views, socketserver.UnixStreamServer):
    """The reserved listener: /live, /ready and /startup only, on an abstract Unix socket."""

    probes_only = True

    def __init__(self, name: str, verdicts: Verdicts, *, policy: ConnectionPolicy = ConnectionPolicy()) -> None:
        self._guard(policy)
        self._views(verdicts)
        self.name = name
        super().__init__("\0" + name, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer | ProbeServer  # type: ignore[assignment]
    server_version = "appliance-exporter"

    def setup(self) -> None:
        super().setup()
        policy = self.server.policy
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.server.deadline_at(self.connection),
                                                       policy.deadline_s))

    def address_string(self) -> str:
        return self.client_address[0] if isinstance(self.client_address, tuple) else "probe-socket"

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, *, head: bool) -> None:
        left = self.server.replying(self.connection)
        if left is not None:
            if left <= 0:
                self.close_connection = True
                return
            self.connection.settimeout(left)  # the reply must be taken within what is left of the deadline
        route = self.path.split("?", 1)[0].rstrip("/") or "/"
        name = route.lstrip("/")
        if name in PROBE_ROUTES:
            ok, body = self.server.verdicts()[name]
            self._send(200 if ok else 503, json.dumps(body).encode() + b"\n", "application/json", head)
        elif route == "/status" and not self.server.probes_only:
            snap = self.server.monitor.snapshot
            body = snap.to_json(self.server.monitor.identity, self.server.clock())
            body["poll_error"] = self.server.monitor.last_error
            body = redact_tree(body)  # /status is unauthenticated: no secret from a log line or an error
            self._send(200, json.dumps(body, indent=1).encode() + b"\n", "application/json", head)
        elif route == "/metrics" and isinstance(self.server, HealthServer):
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST, head)
        else:
            routes = [r for r in ROUTES if not self.server.probes_only or r.lstrip("/") in PROBE_ROUTES]
            self._send(404, json.dumps({"error": "not found", "routes": routes}).encode() + b"\n", "application/json",
                       head)

    def _send(self, code: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the exporter's own log


def serve(monitor: Monitor, server: HealthServer, *, interval: float, stop: threading.Event,
          probe: ProbeServer | None = None) -> None:
    """Serve HTTP (and the probe socket) in threads and poll in this one until `stop` is set; then close them."""
    servers = [s for s in (server, probe) if s is not None]
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, name=f"health-{i}",
                                daemon=True) for i, s in enumerate(servers)]
    for thread in threads:
        thread.start()
    try:
        monitor.run(stop, interval)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
        for thread in threads:
            thread.join(timeout=5)
