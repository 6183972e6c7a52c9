"""The cross-node consistency exchange, run by every rank BEFORE any engine starts (K15).

NCCL hangs, rather than failing, when nodes differ. So the head (rank 0) publishes its identity and
waits, bounded, for the nodes-1 workers; each worker publishes its own and reads the head's. Any
difference in a compared field (lock digest, profile digest, engine/torch/NCCL version, image
revision) refuses the serve on BOTH sides, naming the field and both values; a worker that agrees
but whose serve was refused because of another worker is told so too. Nothing starts unless all agree.

Why a small HTTP exchange on the head's master port + 1, and not torch.distributed's TCPStore:
- no torch import in the entrypoint (seconds and hundreds of MB before supervisord starts anything);
- a TCPStore has no way to say "refused, and why": workers would block in `wait()` until a timeout,
  and a torch mismatch between nodes (one of the things checked) can break the store's own wire
  format: the check would fail exactly where it is needed;
- vLLM's own TCPStore (mp) or Ray's GCS binds the master port once the engine starts; the exchange
  uses the next port and has closed it before the engine starts, so the two never meet;
- stdlib `http.server`/`http.client` only: unlike urllib, http.client ignores HTTP_PROXY, which in a
  cluster would send a fabric-local exchange through a proxy.

Protocol (JSON, HTTP/1.0): a worker POSTs `/v1/join` {protocol, rank, nonce, identity} until the head
answers `go` or `refused`; every answer carries the head's identity. Joining is idempotent, so a
worker may start before the head (it retries with backoff, bounded) and a head restarted while
workers wait is joined again. `GET /v1/state` shows the head's view for a person with curl.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from appliance import port_holder
from appliance.bounds import RENDEZVOUS_PORT_OFFSET, show
from appliance.errors import ApplianceError
from appliance.jsonstrict import loads
from appliance.multinode.identity import Difference, NodeIdentity, differences, local_identity
from appliance.placement import ResolvedPlacement, http_url
from appliance.profile.model import Profile
from appliance.render.serveplan import ServePlan
from appliance.rules.upgrade import RULES

log = logging.getLogger(__name__)

PROTOCOL = 1
POLL_S = 0.5
BACKOFF_MAX_S = 2.0
REFUSAL_GRACE_S = 15.0
"""How long a refusing head keeps answering, so that waiting workers learn why and stop too."""
ACK_WAIT_S = 15.0
MAX_BODY = 64 * 1024
JOIN_PATH = "/v1/join"
STATE_PATH = "/v1/state"
K15_REASON = ("K15: nodes with different NCCL (or engine, lock, profile) hang in the NCCL handshake "
              "instead of failing, so the serve is refused before any engine starts")
SAME_EVERYWHERE = ("run the same image, versions.json and profile (with the same APPLIANCE_SET) on every node; "
                   "`appliance versions --check` on each node shows its drift")


def _show(field: str, value: str) -> str:
    return value[:12] if field.endswith("_digest") and len(value) == 64 else value


def describe(diffs: list[Difference], rank: int) -> str:
    return "; ".join(f"{d.field}: head {_show(d.field, d.head)}, rank {rank} {_show(d.field, d.other)}" for d in diffs)


def refusal(head: NodeIdentity, other: NodeIdentity, rank: int, diffs: list[Difference],
            where: str = "") -> ApplianceError:
    at = f" at {where}" if where else ""
    if head.channel != other.channel:  # U5: one node promoted (or rolled back) and the other not
        return ApplianceError(
            f"U5 a half-upgraded serve, refused: the head ({head.host}) runs engine channel {head.channel}, rank "
            f"{rank} ({other.host}{at}) channel {other.channel}: {describe(diffs, rank)}",
            field="engine.channel", value={"head": head.channel, f"rank {rank}": other.channel},
            fix=f"put every node on one channel: the same `appliance upgrade promote --compose-env` file (or "
                f"Kubernetes manifests) on each node, or `appliance upgrade rollback` on the node that moved "
                f"(`appliance upgrade status` on each node says which channel it runs); {SAME_EVERYWHERE}",
            reason=f"{RULES['U5'].reason}; {K15_REASON}")
    return ApplianceError(
        f"nodes differ, serve refused: rank {rank} ({other.host}{at}) vs the head ({head.host}): "
        f"{describe(diffs, rank)}",
        field=diffs[0].field, value={"head": diffs[0].head, f"rank {rank}": diffs[0].other},
        fix=SAME_EVERYWHERE, reason=K15_REASON,
    )


@dataclass(frozen=True)
class Peer:
    identity: NodeIdentity
    address: str
    nonce: str
    health_port: int | None = None
    """The worker's exporter port, so the head's exporter can compare what each rank loaded (K15)."""

    @property
    def health_url(self) -> str | None:
        return None if self.health_port is None else http_url(self.address, self.health_port)


class _Exchange:
    """The head's view: who joined, and whether the serve may go. Guarded by `cond`."""

    def __init__(self, head: NodeIdentity, nodes: int) -> None:
        self.head, self.nodes = head, nodes
        self.cond = threading.Condition()
        self.members: dict[int, Peer] = {}
        self.refused: ApplianceError | None = None
        self.told: set[int] = set()

    def missing(self) -> list[int]:
        return [r for r in range(1, self.nodes) if r not in self.members]

    def state(self) -> str:
        return "refused" if self.refused else "waiting" if self.missing() else "go"

    def _refuse(self, error: ApplianceError) -> None:
        if self.refused is None:
            self.refused = error

    def _admit(self, data: dict[str, object], address: str) -> int | None:
        rank, nonce = data.get("rank"), data.get("nonce")
        if data.get("protocol") != PROTOCOL or not isinstance(rank, int) or not isinstance(nonce, str):
            self._refuse(ApplianceError(
                f"a node at {address} speaks another rendezvous protocol ({show(data.get('protocol'))}, "
                f"head {PROTOCOL})",
                fix=SAME_EVERYWHERE, reason=K15_REASON))
            return None
        try:
            identity = NodeIdentity.from_json(data.get("identity"), peer=f"rank {rank} at {address}")
        except ApplianceError as exc:
            self._refuse(exc)
            return None
        if not 1 <= rank < self.nodes:
            self._refuse(ApplianceError(
                f"a node at {address} ({identity.host}) joined as rank {rank}, outside 1..{self.nodes - 1}",
                field="APPLIANCE_NODE_RANK", value=rank,
                fix=f"give each worker its own APPLIANCE_NODE_RANK from 1 to {self.nodes - 1}"))
            return None
        known = self.members.get(rank)
        if known and known.nonce != nonce and known.identity.host != identity.host:
            self._refuse(ApplianceError(
                f"rank {rank} joined twice: {known.identity.host} at {known.address} and {identity.host} at {address}",
                field="APPLIANCE_NODE_RANK", value=rank,
                fix=f"give each worker its own APPLIANCE_NODE_RANK from 1 to {self.nodes - 1}"))
            return None
        port = data.get("health_port")
        health_port = port if isinstance(port, int) and 0 < port < 65536 else None
        self.members[rank] = Peer(identity, address, nonce, health_port)  # same host, new nonce: a restart
        diffs = differences(self.head, identity)
        if diffs:
            self._refuse(refusal(self.head, identity, rank, diffs, address))
        return rank

    def join(self, data: object, address: str) -> tuple[int, dict[str, object], int | None]:
        """(HTTP code, reply, the rank this reply tells the verdict to, if any)."""
        if not isinstance(data, dict):
            return 400, {"protocol": PROTOCOL, "state": "error", "message": "expected a JSON object"}, None
        with self.cond:
            rank = self._admit(data, address)
            state = self.state()
            self.cond.notify_all()
            verdict_for = rank if rank is not None and state != "waiting" else None
            return (409 if state == "refused" else 200), self.view(), verdict_for

    def delivered(self, rank: int) -> None:
        """The verdict's bytes are written to `rank`'s connection. Only now may the head stop answering:
        marked before the write, the head's process could exit mid-reply and leave that worker polling a
        closed port with half an answer."""
        with self.cond:
            self.told.add(rank)
            self.cond.notify_all()

    def view(self) -> dict[str, object]:
        return {"protocol": PROTOCOL, "state": self.state(), "head": self.head.to_json(),
                "message": str(self.refused) if self.refused else None, "missing": self.missing()}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # a stalled client cannot hold a handler thread for long

    def _reply(self, code: int, payload: dict[str, object]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != JOIN_PATH:
            return self._reply(404, {"message": f"POST {JOIN_PATH} only"})
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            return self._reply(400, {"message": f"a body of 1..{MAX_BODY} bytes is required"})
        try:
            data = loads(self.rfile.read(length), "join")  # strict: a 30,000-deep body is refused, not a traceback
        except ValueError:
            return self._reply(400, {"message": "the body is not JSON"})
        code, payload, verdict_for = self.server.exchange.join(data, self.client_address[0])
        self._reply(code, payload)
        self.wfile.flush()
        if verdict_for is not None:
            self.server.exchange.delivered(verdict_for)
        return None

    def do_GET(self) -> None:
        if self.path != STATE_PATH:
            return self._reply(404, {"message": f"GET {STATE_PATH} only"})
        with self.server.exchange.cond:
            return self._reply(200, self.server.exchange.view())

    def log_message(self, format: str, *args: object) -> None:
        log.debug("rendezvous %s: " + format, self.client_address[0], *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    exchange: _Exchange

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        # A worker that hung up mid-reply asks again (or times out and says so): a line, not a traceback.
        # Anything else is a bug of ours and keeps its traceback.
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.warning("rendezvous: answering %s failed: %s", client_address[0], error)
        else:
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Server6(_Server):
    address_family = socket.AF_INET6


def _listen(port: int, ipv6: bool, exchange: _Exchange) -> _Server:
    # All interfaces: in Kubernetes the leader's own DNS name may not resolve yet when it starts, and a
    # NAT'd master address cannot be bound. The workers' connect to master_addr is what proves the path.
    try:
        server = _Server6(("::", port), _Handler) if ipv6 else _Server(("0.0.0.0", port), _Handler)
    except OSError as exc:
        held = f"; {port_holder.describe(port)}" if port_holder.in_use(exc) else ""
        raise ApplianceError(
            f"the head cannot listen on rendezvous port {port}: {exc}{held}",
            field="APPLIANCE_MASTER_PORT", value=port - RENDEZVOUS_PORT_OFFSET,
            fix="stop the other serve (or stale appliance run) using it, or choose another master port; "
                f"the rendezvous uses master port + {RENDEZVOUS_PORT_OFFSET}",
        ) from None
    server.exchange = exchange
    return server


def serve_head(identity: NodeIdentity, nodes: int, port: int, timeout_s: float, *,
               ipv6: bool = False) -> dict[int, Peer]:
    """Head side: wait for every worker, return them when all agree; raise ApplianceError otherwise."""
    exchange = _Exchange(identity, nodes)
    server = _listen(port, ipv6, exchange)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    log.info("rendezvous: head waiting up to %gs on port %d for %d worker(s)", timeout_s, port, nodes - 1)
    try:
        deadline = time.monotonic() + timeout_s
        with exchange.cond:
            while exchange.state() == "waiting":
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _head_timeout(exchange, port, timeout_s)
                exchange.cond.wait(min(left, 1.0))
            # Keep answering until every worker has heard the verdict (bounded): on a refusal all nodes stop
            # together, even those that join late; after `go` none polls a port that has closed.
            until = time.monotonic() + (REFUSAL_GRACE_S if exchange.refused else ACK_WAIT_S)
            while not set(range(1, nodes)) <= exchange.told and time.monotonic() < until:
                exchange.cond.wait(min(until - time.monotonic(), 0.5))
            if exchange.refused:
                raise exchange.refused
            unheard = sorted(set(exchange.members) - exchange.told)
            if unheard:
                raise ApplianceError(
                    f"rank(s) {unheard} joined but stopped asking before hearing `go`: they gave up or died",
                    fix="restart the whole serve (head and workers); see the workers' logs")
            members = dict(exchange.members)
    finally:
        server.shutdown()
        server.server_close()
    for rank, peer in sorted(members.items()):
        log.info("rendezvous: rank %d (%s at %s) agrees with the head", rank, peer.identity.host, peer.address)
    return members


def _head_timeout(exchange: _Exchange, port: int, timeout_s: float) -> ApplianceError:
    missing = exchange.missing()
    return ApplianceError(
        f"the head waited {timeout_s:g}s on rendezvous port {port} and rank(s) {missing} never joined "
        f"({len(exchange.members)} of {exchange.nodes - 1} worker(s) did)",
        field="APPLIANCE_NODE_RANK", value=missing,
        fix="start `appliance run` on each missing worker with its APPLIANCE_NODE_RANK and APPLIANCE_MASTER_ADDR "
            f"set to this head's fabric address; check that port {port} is reachable over the fabric",
        reason="K10: every rank rendezvous at the head before the engine starts")


class NotRendezvous(ValueError):
    """An answer that is not ours: a half-read reply under load, or another service on the port.
    Retried like a refused connection; if it persists, the timeout message names it."""


def _post(host: str, port: int, body: bytes, timeout: float, source_ip: str | None) -> tuple[int, object]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout,
                                      source_address=(source_ip, 0) if source_ip else None)
    try:
        conn.request("POST", JOIN_PATH, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read(MAX_BODY + 1)
        status = response.status
    finally:
        conn.close()
    try:
        return status, loads(raw, f"{host}:{port}")
    except ValueError:  # JsonError too: no JSON this reader takes
        raise NotRendezvous(f"{host}:{port} answered but is not the appliance rendezvous (HTTP {status}, not "
                            f"JSON); the rendezvous uses master port + {RENDEZVOUS_PORT_OFFSET}") from None


def join_head(identity: NodeIdentity, rank: int, master_addr: str, port: int, timeout_s: float, *,
              source_ip: str | None = None, health_port: int | None = None) -> NodeIdentity:
    """Worker side: join, then wait for the head's verdict. Returns the head's identity on `go`."""
    where = f"{master_addr}:{port}"
    body = json.dumps({"protocol": PROTOCOL, "rank": rank, "nonce": secrets.token_hex(8),
                       "identity": identity.to_json(), "health_port": health_port}).encode()
    deadline = time.monotonic() + timeout_s
    delay, attempts, answered = 0.2, 0, False
    last_error, foreign = "none", ""
    while (left := deadline - time.monotonic()) > 0:
        attempts += 1
        try:
            status, reply = _post(master_addr, port, body, min(5.0, left), source_ip)
        except (OSError, http.client.HTTPException, NotRendezvous) as exc:
            if source_ip and getattr(exc, "errno", None) == errno.EADDRNOTAVAIL:
                raise ApplianceError(f"APPLIANCE_HOST_IP={source_ip} is not an address of this machine",
                                     field="APPLIANCE_HOST_IP", value=source_ip,
                                     fix="set it to this node's address on the fabric, or unset it") from None
            last_error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, NotRendezvous):
                foreign = f"; earlier {exc}"
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, BACKOFF_MAX_S)  # the head may start minutes after its workers
            continue
        answered, delay = True, 0.2
        if not isinstance(reply, dict) or reply.get("protocol") != PROTOCOL:
            raise ApplianceError(f"the head at {where} speaks another rendezvous protocol: {show(reply)}",
                                 fix=SAME_EVERYWHERE, reason=K15_REASON)
        head = NodeIdentity.from_json(reply.get("head"), peer=f"the head at {where}")
        diffs = differences(head, identity)
        if diffs:
            raise refusal(head, identity, rank, diffs)
        if reply.get("state") == "go" and status == 200:
            log.info("rendezvous: rank %d agrees with the head at %s", rank, where)
            return head
        if reply.get("state") == "refused":
            raise ApplianceError(f"the head at {where} refused the serve: {reply.get('message')}",
                                 fix=SAME_EVERYWHERE, reason=K15_REASON)
        time.sleep(POLL_S)
    if answered:
        raise ApplianceError(
            f"rank {rank} joined the head at {where} but no `go` came within {timeout_s:g}s "
            f"(the head stopped answering or still waits for other ranks; last error: {last_error})",
            fix="start the missing workers; if the head already serves, restart it too: the check runs once per "
                "start of the whole serve", reason="K10: every rank rendezvous at the head before the engine starts")
    raise ApplianceError(
        f"no answer from the head's rendezvous at {where} within {timeout_s:g}s ({attempts} attempts; "
        f"last error: {last_error}{foreign})",
        field="APPLIANCE_MASTER_ADDR", value=master_addr,
        fix=f"start rank 0 (the head) with the same profile, or check APPLIANCE_MASTER_ADDR={master_addr} and that "
            f"port {port} is open on the fabric",
        reason="K10: every rank rendezvous at the head before the engine starts")


def preflight(profile: Profile, plan: ServePlan, placement: ResolvedPlacement, *, timeout_s: float) -> dict[int, Peer]:
    """The call `appliance run` makes between render and supervisord: exchange this node's identity with the
    other nodes; ApplianceError (exit 2) when they differ or never come; a no-op for single-node.

    A worker tells the head its exporter's port; the head gets back its workers (rank -> Peer)."""
    if plan.role == "single":
        return {}
    if not placement.master_addr:
        raise ApplianceError("a multi-node serve needs the head's fabric address", field="APPLIANCE_MASTER_ADDR",
                             fix="set APPLIANCE_MASTER_ADDR on every node to the head's address on the fabric")
    port = placement.rendezvous_port
    identity = local_identity(profile, env={**os.environ, **plan.env}, fabric_ifname=placement.fabric_ifname)
    if plan.role == "head":
        return serve_head(identity, profile.hardware.nodes, port, timeout_s, ipv6=":" in placement.master_addr)
    join_head(identity, placement.node_rank, placement.master_addr, port, timeout_s,
              source_ip=placement.host_ip, health_port=placement.health_port)
    return {}
