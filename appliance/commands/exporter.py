"""`appliance exporter --profile P --log LOG`: the health exporter in the foreground (a supervisord
program). Tails the serve log, asks vLLM, serves /live /ready /startup /status /metrics; exits 0 on
SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from appliance.commands.common import add_profile_args, load_from_args
from appliance.errors import ApplianceError


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--log", type=Path, help="the serve log to tail (default: the engine's, in $APPLIANCE_LOG_DIR)")
    parser.add_argument("--engine-url", help="vLLM base URL (default http://127.0.0.1:<server.port>; "
                        "on a worker rank the head's API at $APPLIANCE_MASTER_ADDR)")
    parser.add_argument("--no-engine", action="store_true", help="judge from the log alone")
    parser.add_argument("--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    parser.add_argument("--port", type=int,
                        help="port (default $APPLIANCE_HEALTH_PORT, else the profile's server.health_port)")
    parser.add_argument("--node-rank", type=int, help="this node's rank (default $APPLIANCE_NODE_RANK or 0)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
    parser.add_argument("--engine-timeout", type=float, default=1.5, help="vLLM HTTP timeout (default 1.5 s)")
    parser.add_argument("--progress-window", type=float, default=60.0,
                        help="K18: seconds without engine progress while requests run before not-ready")
    parser.add_argument("--live-grace", type=float, default=300.0,
                        help="seconds in `failed` before /live fails (lets supervisord restart the engine)")
    parser.add_argument("--peer", dest="peers", action="append", default=[], metavar="RANK=URL",
                        help="a worker's exporter, on the head: compare what each rank loaded (K15; repeatable; "
                             "`appliance run` passes the ranks that joined the rendezvous)")
    parser.add_argument("--peer-interval", type=float, default=10.0,
                        help="seconds between asking the workers' exporters (default 10)")
    parser.add_argument("--canary-state", type=Path, metavar="FILE",
                        help="the correctness canary's state file (canary.json; `appliance run` passes it)")
    parser.add_argument("--table", type=Path, help="log-check table (default healthchecks/logchecks.yaml)")


def run(args: argparse.Namespace) -> int:
    from appliance.health.build import HealthContext, lock_versions
    from appliance.health.engine import EngineProbe
    from appliance.health.metrics import make_registry
    from appliance.health.monitor import Identity, Monitor
    from appliance.health.peers import PeerWatch, compared_facts, parse_peer
    from appliance.health.server import HealthServer, serve
    from appliance.health.tail import LogTailer
    from appliance.render.plan import engine_api_url
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    from appliance.run.supervisord import ENGINE_LOG

    log = args.log or (settings.log_dir / ENGINE_LOG if settings.log_dir else None)
    if log is None:
        raise ApplianceError("no serve log given", field="--log",
                             fix="pass --log PATH (the engine's stdout/stderr file) or set APPLIANCE_LOG_DIR")
    ctx = HealthContext.load(loaded, args.table)
    rank = args.node_rank if args.node_rank is not None else settings.node_rank
    role = ctx.role(rank)
    profile = loaded.profile
    url = None if args.no_engine else args.engine_url or engine_api_url(role, profile.server.port, settings.master_addr)
    identity = Identity(profile=profile.name, profile_digest=loaded.digest, lock_digest=ctx.lock_digest,
                        stack=ctx.lock.stack, role=role, log=str(log), engine_url=url,
                        lock_versions=lock_versions(ctx.lock))
    clock = time.monotonic
    peer_urls = dict(parse_peer(p) for p in args.peers)
    if peer_urls and role != "head":
        raise ApplianceError(f"--peer is for the head's exporter; this one speaks for a {role}", field="--peer",
                             value=args.peers, fix="pass --peer only with --node-rank 0 of a multi-node profile")
    engine = EngineProbe(url, timeout=args.engine_timeout) if url else None
    peers = PeerWatch(peer_urls, compared_facts(ctx.table), clock=clock, every=args.peer_interval,
                      timeout=args.engine_timeout) if peer_urls else None
    canary = None
    if args.canary_state:
        from appliance.canary.status import read_state

        canary = lambda: read_state(args.canary_state)  # noqa: E731  (read each poll: a small file)
    monitor = Monitor(judge=ctx.judge(role), tailer=LogTailer(log), identity=identity, clock=clock,
                      engine=engine, progress_window=args.progress_window, peers=peers, canary=canary)
    port = args.port or settings.health_port_for(profile.server.health_port)
    try:
        registry = make_registry(lambda: monitor.snapshot, identity)
        if canary:
            from appliance.canary.metrics import CanaryCollector

            registry.register(CanaryCollector(lambda: monitor.snapshot.canary))
        server = HealthServer((args.host, port), monitor, registry,
                              clock=clock, stale_after=3 * args.interval + 2 * args.engine_timeout + 5,
                              live_grace=args.live_grace)
    except OSError as exc:
        raise ApplianceError(f"cannot listen on {args.host}:{port}: {exc.strerror}", field="--port", value=port,
                             fix="choose a free port (--port) or stop what holds it") from None
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"appliance exporter: {profile.name} ({role}) log {log} engine {url or '-'} on {args.host}:{port}",
          flush=True)
    try:
        serve(monitor, server, interval=args.interval, stop=stop)
    finally:
        if engine:
            engine.close()
        if peers:
            peers.close()
    return 0
