"""`appliance exporter --profile P --log LOG`: the health exporter in the foreground (a supervisord
program). Tails the serve log, asks vLLM, serves /live /ready /startup /status /metrics; exits 0 on
SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from appliance import port_holder
from appliance.cliargs import add_profile_args, load_from_args
from appliance.errors import ApplianceError
from appliance.health import exporter_args as arg

if TYPE_CHECKING:
    from appliance.profile.loader import LoadedProfile


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--launch", type=Path, help="RUN_DIR/launch.json of `appliance run`: the profile the engine "
                        "was started with and this exporter's arguments, instead of a profile and flags")
    parser.add_argument("--log", type=arg.log_file,
                        help="the serve log to tail (default: the engine's, in $APPLIANCE_LOG_DIR)")
    parser.add_argument("--engine-url", type=arg.http_url,
                        help="vLLM base URL (default http://127.0.0.1:<server.port>; "
                        "on a worker rank the head's API at $APPLIANCE_MASTER_ADDR)")
    parser.add_argument("--no-engine", action="store_true", help="judge from the log alone")
    parser.add_argument("--host", type=arg.bind_host, default="0.0.0.0", help="bind address (default 0.0.0.0)")
    parser.add_argument("--port", type=arg.port,
                        help="port (default $APPLIANCE_HEALTH_PORT, else the profile's server.health_port)")
    parser.add_argument("--node-rank", type=arg.rank, help="this node's rank (default $APPLIANCE_NODE_RANK or 0)")
    parser.add_argument("--interval", type=arg.seconds, default=2.0, help="seconds between polls (default 2)")
    parser.add_argument("--engine-timeout", type=arg.seconds, default=1.5, help="vLLM HTTP timeout (default 1.5 s)")
    parser.add_argument("--progress-window", type=arg.seconds, default=60.0,
                        help="K18: seconds without engine progress while requests run before not-ready")
    parser.add_argument("--live-grace", type=arg.seconds, default=300.0,
                        help="seconds in `failed` before /live fails (lets supervisord restart the engine)")
    parser.add_argument("--peer", dest="peers", type=arg.peer, action="append", default=[], metavar="RANK=URL",
                        help="a worker's exporter, on the head: compare what each rank loaded (K15; repeatable; "
                             "`appliance run` passes the ranks that joined the rendezvous)")
    parser.add_argument("--peer-interval", type=arg.seconds, default=10.0,
                        help="seconds between asking the workers' exporters (default 10)")
    parser.add_argument("--canary-state", type=Path, metavar="FILE",
                        help="the correctness canary's state file (canary.json; `appliance run` passes it)")
    parser.add_argument("--table", type=Path, help="log-check table (default healthchecks/logchecks.yaml)")
    parser.add_argument("--memory-interval", type=arg.seconds, default=0.5,
                        help="seconds between the memory watchdog's looks at the host (K24; default 0.5)")
    parser.add_argument("--engine-program", default="vllm",
                        help="the supervisord program the memory watchdog stops and starts (default vllm)")
    parser.add_argument("--fabric-report", type=Path,
                        help="this node's fabric qualification (K25), written by `appliance run`, for /status")


def run(args: argparse.Namespace) -> int:
    from appliance.bounds import check_health_port
    from appliance.health.exporter import ExporterConfig, build_exporter
    from appliance.health.peers import parse_peer
    from appliance.profile.topology import role_for
    from appliance.render.serveplan import engine_api_url
    from appliance.render.supervisord import ENGINE_LOG
    from appliance.run.host_side import host_side_for
    from appliance.run.launch_profile import LaunchFollower
    from appliance.settings import load_settings

    settings = load_settings()
    follow = None
    if args.launch:
        launch_path = args.launch
        args, loaded = _from_launch(launch_path)
        follow = LaunchFollower(launch_path, loaded)
    else:
        loaded = load_from_args(args, settings)
    log = args.log or (settings.log_dir / ENGINE_LOG if settings.log_dir else None)
    if log is None:
        raise ApplianceError("no serve log given", field="--log",
                             fix="pass --log PATH (the engine's stdout/stderr file) or set APPLIANCE_LOG_DIR")
    profile = loaded.profile
    role = role_for(profile, args.node_rank if args.node_rank is not None else settings.node_rank)
    url = None if args.no_engine else args.engine_url or engine_api_url(role, profile.server.port, settings.master_addr)
    peer_urls = dict(parse_peer(p) for p in args.peers)
    if peer_urls and role != "head":
        raise ApplianceError(f"--peer is for the head's exporter; this one speaks for a {role}", field="--peer",
                             value=args.peers, fix="pass --peer only with --node-rank 0 of a multi-node profile")
    port = args.port or settings.health_port_for(profile.server.health_port)
    host = host_side_for(profile, settings, args.engine_program, args.fabric_report)
    config = ExporterConfig(loaded=loaded, log=log, role=role, engine_url=url, peers=peer_urls, host=args.host,
                            port=port, interval=args.interval, engine_timeout=args.engine_timeout,
                            progress_window=args.progress_window, live_grace=args.live_grace,
                            peer_interval=args.peer_interval, table=args.table, canary_state=args.canary_state,
                            follow=follow)
    if role != "worker":
        check_health_port("--port" if args.port else "APPLIANCE_HEALTH_PORT", port, profile.server.port)
    try:
        exporter = build_exporter(config, host=host)
        host.register(exporter.server.registry)
    except OSError as exc:
        held = f"; {port_holder.describe(port)}" if port_holder.in_use(exc) else ""
        raise ApplianceError(f"cannot listen on {args.host}:{port}: {exc.strerror}{held}", field="--port", value=port,
                             fix="choose a free port (--port) or stop what holds it") from None
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"appliance exporter: {profile.name} ({role}) log {log} engine {url or '-'} on {args.host}:{port}",
          flush=True)
    host.start(stop, args.memory_interval)
    exporter.serve(stop)
    return 0


def _from_launch(path: Path) -> tuple[argparse.Namespace, LoadedProfile]:
    """The arguments and the resolved profile `appliance run` wrote: a profile YAML edited mid-serve does not
    change what this exporter judges (a step-down's rewritten launch.json does: run/launch_profile.py)."""
    from appliance.run.launch_profile import loaded_from_launch
    from appliance.run.launchfile import LaunchFileError, read_launch

    try:
        launch = read_launch(path)
    except LaunchFileError as exc:
        raise ApplianceError(str(exc), field="--launch", value=str(path),
                             fix="pass the launch.json `appliance run` wrote into its run folder") from None
    parser = argparse.ArgumentParser(prog="appliance exporter")
    register(parser)
    return parser.parse_args(launch.exporter_args), loaded_from_launch(launch, path)
