"""`appliance run`: the container entrypoint (also usable natively).

settings (env) -> validate (exit 2 on errors) -> doctor (exit 1 on a failed check) -> locate the
checkpoint (real facts re-validated) -> render -> [multi-node: consistency exchange; the head's
exporter gets the workers' exporters] -> write supervisord.conf -> exec supervisord -n.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.commands.common import add_placement_args, add_profile_args, load_from_args, placement_from_args

if TYPE_CHECKING:
    from appliance.multinode.rendezvous import Peer
    from appliance.render.plan import ServePlan


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    add_placement_args(parser)
    parser.add_argument("--run-dir", type=Path, help="supervisor files and the serve log (default $APPLIANCE_LOG_DIR"
                        " or $APPLIANCE_HOME/run/PROFILE)")
    parser.add_argument("--skip-doctor", action="store_true", help="start even if preflight fails (not advised)")
    parser.add_argument("--dry-run", action="store_true", help="write supervisord.conf and print it; start nothing")


def _resolved(plan: ServePlan) -> ServePlan:
    """The plan with its programs (the engine and any setup step, e.g. `ray start`) made absolute:
    supervisord's PATH may not hold this environment's bin/."""
    from appliance.paths import venv_executable

    def absolute(argv: list[str]) -> list[str]:
        return [venv_executable(argv[0]) or argv[0], *argv[1:]]

    return replace(plan, argv=absolute(plan.argv), setup=[absolute(step) for step in plan.setup])


def _fail(message: str) -> int:
    print(f"appliance run: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    from appliance.errors import ApplianceError
    from appliance.lock import lock_digest
    from appliance.paths import appliance_home, venv_executable
    from appliance.profile.loader import engine_digest
    from appliance.render import build_plan
    from appliance.render.plan import engine_api_url
    from appliance.rules import context_for, require_valid
    from appliance.run.caches import cache_env
    from appliance.run.model_location import hf_offline, locate, read_facts
    from appliance.run.netif import with_host_ip
    from appliance.run.supervisord import RunFiles, render_conf
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    profile = loaded.profile
    place = placement_from_args(args, settings)

    model_dir = locate(profile.model.checkpoint, profile.model.revision, place.model_dir)
    ctx = context_for(profile)
    if model_dir is not None:
        ctx = context_for(profile, read_facts(model_dir, ctx.checkpoint))
    for f in require_valid(ctx, "nothing started"):
        print(f.render(), file=sys.stderr)
    if model_dir is None and hf_offline():
        raise ApplianceError(
            f"checkpoint {profile.model.checkpoint} is not on disk and HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}",
            field="APPLIANCE_MODEL_DIR", value=None,
            fix="set APPLIANCE_MODEL_DIR, or run `appliance fetch-model` (or `appliance smoke-model` for cpu-smoke)",
            reason="the engine would fail to load and be restarted in a loop")

    if not args.skip_doctor:
        from appliance.commands.doctor import print_checks
        from appliance.doctor import run_doctor
        from appliance.render.plan import role_for

        checks = run_doctor(profile, role_for(profile, place.node_rank))
        failed = [c for c in checks if c.status == "fail"]
        print_checks(checks, False, profile.name)
        if failed:
            return _fail(f"preflight failed ({len(failed)} check(s)); nothing started")

    place = with_host_ip(place)
    if model_dir is not None:
        place = replace(place, model_dir=model_dir)
    plan = build_plan(profile, place)

    health_port = settings.health_port_for(profile.server.health_port)
    peers: dict[int, Peer] = {}
    if plan.role != "single":
        from appliance.multinode.rendezvous import preflight

        peers = preflight(profile, plan, place, timeout_s=settings.rendezvous_timeout_s, health_port=health_port)

    home = appliance_home()  # APPLIANCE_HOME: caches keyed by lock + engine digest, prepared models
    run_dir = args.run_dir or settings.log_dir or home / "run" / profile.name
    run_dir.mkdir(parents=True, exist_ok=True)
    sock = Path(tempfile.gettempdir()) / f"appliance-{hashlib.sha256(str(run_dir).encode()).hexdigest()[:10]}.sock"
    files = RunFiles(run_dir, sock)
    env = plan.env | cache_env(lock_digest(), engine_digest(profile), home / "cache")
    if model_dir is not None:
        env.setdefault("HF_HUB_OFFLINE", "1")
    exporter = [sys.executable, "-m", "appliance", "exporter", loaded.source.as_posix(), "--log",
                str(files.engine_log), "--port", str(health_port), "--node-rank", str(place.node_rank)]
    engine_url = engine_api_url(plan.role, profile.server.port, place.master_addr)
    if engine_url:  # said here, from the placement flags too, not re-derived from the exporter's env
        exporter += ["--engine-url", engine_url]
    for rank, peer in sorted(peers.items()):  # the head compares the NCCL each worker loaded (K15)
        if peer.health_url:
            exporter += ["--peer", f"{rank}={peer.health_url}"]
    for item in args.overrides:  # APPLIANCE_SET reaches the exporter through the inherited environment
        exporter += ["--set", item]
    canary = None
    if profile.canary and profile.canary.enabled and plan.role != "worker" and engine_url:
        from appliance.canary.wiring import watch_argv

        canary = watch_argv(loaded.source, files.run_dir, engine_url, args.overrides)
        exporter += ["--canary-state", str(files.run_dir / "canary.json")]
    conf = render_conf(_resolved(plan), files, env, exporter, canary)
    tmp = files.conf.with_suffix(".tmp")
    tmp.write_text(conf)
    tmp.replace(files.conf)  # atomically: a half-written config is never left behind
    if args.dry_run:
        print(conf)
        return 0
    supervisord = venv_executable("supervisord") or "supervisord"
    print(f"appliance run: {profile.name} as {plan.role}; log {files.engine_log}; exec supervisord", flush=True)
    os.execv(supervisord, [supervisord, "-n", "-c", str(files.conf)])
    return 0  # not reached
