"""`appliance exporter`: the health exporter in the foreground. Tails the serve log, asks vLLM, serves /live /ready
/startup /status /metrics; exits 0 on SIGTERM or SIGINT.

Two ways in: `--launch RUN_DIR/launch.json` (what supervisord runs): the config is built straight from the
launch's exporter section and profile, the values `appliance run` resolved; or `--profile P --log LOG` and the
flags, to run one by hand (the placement flags resolved against the profile as `appliance run` resolves them)."""

from __future__ import annotations

import argparse
import signal
import threading
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from appliance import port_holder
from appliance.cliargs import add_profile_args, load_from_args
from appliance.errors import ApplianceError
from appliance.health import exporter_args as arg

if TYPE_CHECKING:
    from appliance.health.exporter import ExporterConfig
    from appliance.run.host_side import HostSide
    from appliance.settings import ApplianceSettings


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--launch", type=Path, help="RUN_DIR/launch.json of `appliance run`: the profile the engine "
                        "was started with and this exporter's section, instead of a profile and flags")
    parser.add_argument("--log", type=arg.log_file,
                        help="the serve log to tail (default: the engine's, in $APPLIANCE_LOG_DIR)")
    parser.add_argument("--engine-url", type=arg.http_url,
                        help="vLLM base URL (default http://127.0.0.1:<server.port>; "
                        "on a worker rank the head's API at $APPLIANCE_MASTER_ADDR)")
    parser.add_argument("--no-engine", action="store_true", help="judge from the log alone")
    parser.add_argument("--host", type=arg.bind_host,
                        help="bind address (default $APPLIANCE_EXPORTER_HOST, else 127.0.0.1; on a worker rank its "
                             "$APPLIANCE_HOST_IP, where the head asks it, else 0.0.0.0)")
    parser.add_argument("--port", dest="health_port", type=arg.port,
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
                        help="a fabric qualification report (K25; a line of `python -m appliance.multinode.fabric "
                             "here`) to show in /status; `appliance run` hands its own over in launch.json")


HAND_FLAGS = ("profile", "profile_option", "overrides", "log", "engine_url", "host", "health_port", "node_rank",
              "peers", "canary_state", "table", "fabric_report")
"""Flags that say what `--launch` already says: refused beside it, so a value typed there is never silently lost."""


def run(args: argparse.Namespace) -> int:
    from appliance.health.exporter import build_exporter
    from appliance.health.server import probe_socket_name
    from appliance.settings import load_settings

    settings = load_settings()
    config, host = _from_launch(args, settings) if args.launch else _by_hand(args, settings)
    from appliance.health.events import EventLog

    events = EventLog(lambda line: print(line, flush=True), settings.log_format)
    try:
        exporter = build_exporter(config, host=host, report=events)
        host.register(exporter.server.registry)
    except OSError as exc:
        held = f"; {port_holder.describe(config.port)}" if port_holder.in_use(exc) else ""
        raise ApplianceError(f"cannot listen on {config.host}:{config.port}: {exc.strerror}{held} (the exporter "
                             f"listens there and on its probe socket @{probe_socket_name(config.port)})",
                             field="--port", value=config.port,
                             fix="choose a free port (--port) or stop what holds it") from None
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"appliance exporter: {config.loaded.profile.name} ({config.role}) log {config.log} engine "
          f"{config.engine_url or '-'} on {config.host}:{config.port}, probes also on "
          f"@{probe_socket_name(exporter.server.server_address[1])}", flush=True)
    host.start(stop, args.memory_interval)
    exporter.serve(stop)
    return 0


def _by_hand(args: argparse.Namespace, settings: ApplianceSettings) -> tuple[ExporterConfig, HostSide]:
    from appliance.cliargs import placement_from_args
    from appliance.health.exporter import ExporterConfig
    from appliance.health.peers import parse_peer
    from appliance.render.supervisord import ENGINE_LOG
    from appliance.run.exposure import exporter_bind
    from appliance.run.host_side import host_side_for, read_fabric_report
    from appliance.serve.resolve import placement

    loaded = load_from_args(args, settings)
    log = args.log or (settings.log_dir / ENGINE_LOG if settings.log_dir else None)
    if log is None:
        raise ApplianceError("no serve log given", field="--log",
                             fix="pass --log PATH (the engine's stdout/stderr file) or set APPLIANCE_LOG_DIR")
    place = placement(loaded.profile, placement_from_args(args, settings))
    peer_urls = dict(parse_peer(p) for p in args.peers)
    if peer_urls and place.role != "head":
        raise ApplianceError(f"--peer is for the head's exporter; this one speaks for a {place.role}", field="--peer",
                             value=args.peers, fix="pass --peer only with --node-rank 0 of a multi-node profile")
    fabric = read_fabric_report(args.fabric_report) if args.fabric_report else None
    config = ExporterConfig(loaded=loaded, log=log, role=place.role, node_rank=place.node_rank, peers=peer_urls,
                            host=args.host or exporter_bind(place.role, place.host_ip, settings.exporter_host).host,
                            engine_url=None if args.no_engine else place.engine_url, port=place.health_port,
                            table=args.table, canary_state=args.canary_state)
    return _polling(config, args), host_side_for(loaded.profile, settings, args.engine_program, fabric)


def _from_launch(args: argparse.Namespace, settings: ApplianceSettings) -> tuple[ExporterConfig, HostSide]:
    """The config from launch.json's exporter section and the resolved profile `appliance run` wrote: a profile YAML
    edited mid-serve does not change what this exporter judges (a step-down's rewritten launch.json does:
    run/launch_profile.py)."""
    from appliance.health.exporter import ExporterConfig
    from appliance.run.host_side import host_side_for
    from appliance.run.launch_profile import LaunchFollower, serve_from_launch
    from appliance.run.launchfile import LaunchFileError, read_launch

    flag = {"profile_option": "--profile", "overrides": "--set", "health_port": "--port", "peers": "--peer"}
    given = [flag.get(name, f"--{name.replace('_', '-')}") for name in HAND_FLAGS
             if getattr(args, name, None) not in (None, [])]
    if given:
        raise ApplianceError(f"--launch with {', '.join(given)}: the launch file already says this",
                             field=given[0], value=args.launch,
                             fix="pass only --launch (and polling flags), or run without --launch by hand")
    try:
        launch = read_launch(args.launch)
    except LaunchFileError as exc:
        raise ApplianceError(str(exc), field="--launch", value=str(args.launch),
                             fix="pass the launch.json `appliance run` wrote into its run folder") from None
    serve = serve_from_launch(launch, args.launch)
    loaded, section = serve.loaded, launch.exporter
    config = ExporterConfig(loaded=loaded, log=section.log, role=section.role, node_rank=serve.place.node_rank,
                            engine_url=None if args.no_engine else section.engine_url, peers=dict(section.peers),
                            host=section.host, port=section.port, canary_state=section.canary_state,
                            lock=serve.lock, follow=LaunchFollower(args.launch, loaded))
    return _polling(config, args), host_side_for(loaded.profile, settings, args.engine_program, section.fabric)


def _polling(config: ExporterConfig, args: argparse.Namespace) -> ExporterConfig:
    """How the exporter polls: flags either way in (their defaults are the serve's)."""
    return replace(config, interval=args.interval, engine_timeout=args.engine_timeout,
                   progress_window=args.progress_window, live_grace=args.live_grace, peer_interval=args.peer_interval)
