"""One factory for the exporter's wiring (context -> judge, tailer, engine probe, peer watch, monitor,
registry, HTTP server), used by `appliance exporter` and by the tests alike."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from appliance.health.canary_metrics import CanaryCollector
from appliance.health.canary_state import read_state
from appliance.health.context import HealthContext, lock_versions
from appliance.health.engine import EngineProbe
from appliance.health.expect import Judge
from appliance.health.metrics import make_registry
from appliance.health.monitor import ExporterIdentity, HostSections, Monitor, Snapshot
from appliance.health.peers import PeerWatch, compared_facts, ranks_printing
from appliance.health.server import (
    CONNECTION_TIMEOUT_S,
    MAX_CONNECTIONS,
    ConnectionPolicy,
    HealthServer,
    ProbeServer,
    probe_socket_name,
    serve,
)
from appliance.health.startup_metrics import StartupCollector
from appliance.health.tail import LogTailer
from appliance.health.verdicts import Verdicts
from appliance.jsonstrict import JsonObject
from appliance.lock import ChannelLock
from appliance.profile.loader import LoadedProfile
from appliance.profile.topology import Role


@dataclass(frozen=True)
class ExporterConfig:
    """What an exporter speaks for and how it polls; the defaults are the command's."""

    loaded: LoadedProfile
    log: Path
    role: Role
    engine_url: str | None = None
    node_rank: int | None = None
    """This node's rank (what its log can carry: vLLM prints some lines from a group's rank 0 only); None = the head,
    or the first worker for role worker."""
    peers: dict[int, str] = field(default_factory=dict)
    """The head's workers' exporters (rank -> URL)."""
    host: str = "127.0.0.1"
    port: int = 0
    interval: float = 2.0
    engine_timeout: float = 1.5
    progress_window: float = 60.0
    live_grace: float = 300.0
    peer_interval: float = 10.0
    table: Path | None = None
    stale_after: float | None = None
    """Default: three polls and two engine timeouts, plus 5 s."""
    connection_timeout: float = CONNECTION_TIMEOUT_S
    """Seconds a client may take over one request in all (its request and the reply) before it is closed."""
    max_connections: int = MAX_CONNECTIONS
    """Connections served at once per listener; at the cap the one waiting longest for its request is evicted (a
    thousand slow clients must not become a thousand threads, nor keep a probe out)."""
    probe_socket: bool = True
    """Also answer /live, /ready and /startup on the reserved abstract socket @appliance-probe-PORT (server.py)."""
    canary_state: Path | None = None
    """The correctness canary's state file (`appliance run` writes it beside launch.json), read every poll."""
    lock: ChannelLock | None = None
    """The lock of `loaded`'s channel, where the serve was resolved with it (launch.json read back); else read."""
    follow: Callable[[], LoadedProfile | None] | None = None
    """Asked every poll: the profile the engine was relaunched with, when it changed (a canary step-down rewrote
    launch.json); the exporter then judges that one. None = judge `loaded` for the exporter's life."""


@dataclass
class Exporter:
    config: ExporterConfig
    context: HealthContext
    identity: ExporterIdentity
    monitor: Monitor
    server: HealthServer
    engine: EngineProbe | None
    peers: PeerWatch | None
    probe: ProbeServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def serve(self, stop: threading.Event) -> None:
        """Poll and serve until `stop` is set, then release the server, the engine probe and the peer watch."""
        try:
            serve(self.monitor, self.server, interval=self.config.interval, stop=stop, probe=self.probe)
        finally:
            self.close()

    def close(self) -> None:
        self.server.server_close()
        if self.probe:
            self.probe.server_close()
        if self.engine:
            self.engine.close()
        if self.peers:
            self.peers.close()


def identity_of(config: ExporterConfig, loaded: LoadedProfile, ctx: HealthContext) -> ExporterIdentity:
    return ExporterIdentity(profile=loaded.profile.name, profile_digest=loaded.digest, lock_digest=ctx.lock_digest,
                            channel=ctx.lock.name, role=config.role, log=str(config.log), engine_url=config.engine_url,
                            lock_versions=lock_versions(ctx.lock), groups=installed_groups(ctx.lock))


def installed_groups(lock: ChannelLock) -> dict[str, JsonObject]:
    """The channel's pin groups as this environment holds them (the image's venv is the engine's), with the build's
    reason for any it left out: /status says whether FlashInfer's jit-cache is present."""
    from appliance.lock import SKIPPED_RECORD, group_state, host_platform, image_record, read_skipped

    if not lock.groups():
        return {}
    return group_state(lock, skipped=read_skipped(image_record(SKIPPED_RECORD), host_platform()))


def _follower(config: ExporterConfig) -> Callable[[], tuple[Judge, ExporterIdentity] | None]:
    assert config.follow is not None

    def follow() -> tuple[Judge, ExporterIdentity] | None:
        loaded = config.follow()  # type: ignore[misc]
        if loaded is None:
            return None
        ctx = HealthContext.load(loaded, config.table)
        return ctx.judge(config.role, config.node_rank), identity_of(config, loaded, ctx)

    return follow


def build_exporter(config: ExporterConfig, *, clock: Callable[[], float] = time.monotonic,
                   context: HealthContext | None = None, host: HostSections | None = None,
                   report: Callable[[Snapshot], None] | None = None) -> Exporter:
    """Raises OSError when the port (or the probe socket of that port) cannot be bound; the command names it. `host`:
    what the host side (memory watchdog, fabric report) adds to each poll; `report`: told each new snapshot
    (health/events.py)."""
    ctx = context or HealthContext.load(config.loaded, config.table, config.lock)
    identity = identity_of(config, config.loaded, ctx)
    engine = EngineProbe(config.engine_url, timeout=config.engine_timeout) if config.engine_url else None
    peers = PeerWatch(config.peers, compared_facts(ctx.table), clock=clock, every=config.peer_interval,
                      timeout=config.engine_timeout,
                      printed=ranks_printing(ctx.table, config.loaded.profile, [0, *config.peers])) \
        if config.peers else None
    state_file = config.canary_state
    canary = (lambda: read_state(state_file)) if state_file else None  # a small file: read each poll
    monitor = Monitor(judge=ctx.judge(config.role, config.node_rank), tailer=LogTailer(config.log),
                      identity=identity, clock=clock, engine=engine, progress_window=config.progress_window,
                      peers=peers, host=host, canary=canary, follow=_follower(config) if config.follow else None,
                      report=report)
    stale_after = config.stale_after
    if stale_after is None:
        stale_after = 3 * config.interval + 2 * config.engine_timeout + 5
    verdicts = Verdicts(monitor, clock, stale_after, config.live_grace)
    policy = ConnectionPolicy(deadline_s=config.connection_timeout, max_connections=config.max_connections)
    server: HealthServer | None = None
    try:
        registry = make_registry(lambda: monitor.snapshot, lambda: monitor.identity, verdicts.ready)
        if canary:
            registry.register(CanaryCollector(lambda: monitor.snapshot.canary))
        registry.register(StartupCollector(lambda: monitor.snapshot.startup,
                                           tuple(p.id for p in ctx.table.startup)))
        server = HealthServer((config.host, config.port), verdicts, registry, policy=policy)
        probe = ProbeServer(probe_socket_name(server.server_address[1]), verdicts,
                            policy=policy) if config.probe_socket else None
    except OSError:
        if server is not None:
            server.server_close()
        if engine:
            engine.close()
        if peers:
            peers.close()
        raise
    return Exporter(config, ctx, identity, monitor, server, engine, peers, probe)
