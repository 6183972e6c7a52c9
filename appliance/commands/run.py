"""`appliance run`: the container entrypoint (also usable natively).

Parses, then delegates to appliance.run.launch: this node's placement -> (a worker with distributed.sync_model:
the head's snapshot) -> check the profile -> the resolved serve (appliance/serve/) -> doctor (exit 1 on a failed
check) -> resolve the launch (programs, peers, fabric, env) -> write launch.json + supervisord.conf -> exec
supervisord -n.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from appliance.cliargs import add_placement_args, add_profile_args, load_from_args, placement_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    add_placement_args(parser)
    parser.add_argument("--run-dir", type=Path, help="supervisor files and the serve log (default $APPLIANCE_LOG_DIR"
                        " or $APPLIANCE_HOME/run/PROFILE)")
    parser.add_argument("--skip-doctor", action="store_true", help="start even if preflight fails (not advised)")
    parser.add_argument("--dry-run", action="store_true", help="write supervisord.conf and print it; start nothing")


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from appliance.paths import appliance_home
    from appliance.run.launch import (
        check_profile,
        describe,
        preflight_host,
        resolve_launch,
        resolve_place,
        resolve_serve,
        run_files,
        sync_from_head,
        write_launch,
    )
    from appliance.run.tether import tether_to
    from appliance.settings import load_settings

    settings = load_settings()
    tether_to(settings.tether_pid)  # first: a starter killed from here on takes this serve with it
    loaded = load_from_args(args, settings)
    from appliance.multinode.netident import Tables

    tables = Tables(procfs=settings.procfs, sysfs=settings.sysfs)
    place = resolve_place(loaded, placement_from_args(args, settings), tables=tables)
    sync_from_head(loaded, place, settings, _stderr)  # distributed.sync_model: a worker's copy comes from the head
    serve = resolve_serve(loaded, place, check_profile(loaded, place, _stderr))
    place = serve.place
    if not args.skip_doctor:
        failed = preflight_host(serve, settings, print)
        if failed:
            _stderr(f"appliance run: preflight failed ({len(failed)} check(s)); nothing started")
            return 1
    home = appliance_home()  # APPLIANCE_HOME: caches keyed by lock + engine digest, prepared models
    run_dir = args.run_dir or settings.log_dir or home / "run" / loaded.profile.name
    # Before the rendezvous: a bad run folder must not keep the other nodes waiting.
    field = "--run-dir" if args.run_dir else "APPLIANCE_LOG_DIR" if settings.log_dir else "APPLIANCE_HOME"
    files = run_files(run_dir, field)
    launch = resolve_launch(serve, settings, files, home, measure_fabric=not args.dry_run)
    from appliance.run.fresh_logs import start_fresh_logs

    kept = [] if args.dry_run else start_fresh_logs(launch.files, field)  # before anything is written
    conf = write_launch(launch, starting=True)
    from appliance.run.exposure import exposure_warnings

    for warning in exposure_warnings(place.role, loaded.profile.server.host, place.api_port, launch.exporter_host,
                                     place.health_port, os.environ):
        _stderr(warning)
    if args.dry_run:
        print(conf)
        print(describe(launch))
        return 0
    earlier = f" (the last run's: {launch.files.engine_log.name}.1)" if launch.files.engine_log in kept else ""
    print(f"appliance run: {loaded.profile.name} as {launch.plan.role}; log {launch.files.engine_log}{earlier}; "
          "exec supervisord", flush=True)
    # supervisord whose first poll does not idle a second before the engine starts (run/supervisord_boot.py)
    # -P: the working folder (the image's writable state folder) is not put first on the import path
    os.execv(sys.executable, [sys.executable, "-P", "-m", "appliance.run.supervisord_boot", "-n", "-c",
                              str(launch.files.conf)])
    return 0  # not reached
