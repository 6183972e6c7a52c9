"""`appliance upgrade plan|qualify|promote|rollback|status`: move a serve to another engine channel safely.

    plan PROFILE --to C       what changes (packages, flags/env/backends renamed or gone, rules, log expectations,
                              disk, memory); exit 2 when the profile cannot be rendered on C (U1)
    qualify PROFILE --to C    serve C beside the incumbent or in a window (U3), gate it, judge it against the
                              incumbent's last receipt (U2): exit 0 promote, 1 refuse, 3 inconclusive
    promote PROFILE --to C    switch the active channel atomically, restart, prove it (ready, expectations, first
                              canary rounds) or roll back (U4): exit 0 promoted, 1 rolled back
    rollback PROFILE          back to the channel the promote replaced
    status [PROFILE]          the active channel, the rollback target, the history with its receipts

PROFILE and --set are `appliance run`'s: run these commands with the environment the serve was started with
(APPLIANCE_SET, APPLIANCE_HOME, APPLIANCE_MODEL_DIR). `--with a.b=v` is what the move itself carries on the
candidate (e.g. a setting another engine line needs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.bounds import MAX_DRAIN_S, PROMOTE_DRAIN_S
from appliance.cliargs import add_k8s_options, add_profile_args, profile_name_from_args

if TYPE_CHECKING:
    from appliance.upgrade.history import RecordJson


def _common(p: argparse.ArgumentParser, *, to: bool = True, run_dir: bool = True) -> None:
    add_profile_args(p)
    if to:
        p.add_argument("--to", metavar="CHANNEL", help="the candidate channel (appliance channels lists them)")
        p.add_argument("--with", dest="sets", action="append", default=[], metavar="a.b=VALUE",
                       help="an override the move carries on the candidate (repeatable)")
    if run_dir:
        p.add_argument("--run-dir", type=Path, help="the serve's run folder (default as `appliance run`: "
                       "$APPLIANCE_LOG_DIR, else $APPLIANCE_HOME/run/PROFILE)")
    p.add_argument("--json", action="store_true", help="machine-readable")


def _budget(text: str) -> float:
    value = float(text)
    if not 1 <= value <= 86400:
        raise argparse.ArgumentTypeError("seconds between 1 and 86400")
    return value


def _drain(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_DRAIN_S:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"{value:g} is outside 0-{MAX_DRAIN_S:g} seconds (0 stops the engine at once; "
                                         f"the serve keeps serving while a promote waits)")
    return value


def _port(text: str) -> int:
    from appliance.bounds import PORT_MAX, PORT_MIN

    value = int(text)
    if not PORT_MIN <= value <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"a port between {PORT_MIN} and {PORT_MAX}")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    from appliance.upgrade.mode import MODES

    sub = parser.add_subparsers(dest="upgrade_action", metavar="plan|qualify|promote|rollback|status", required=True)
    p = sub.add_parser("plan", help="what moving this profile's serve to another channel changes")
    _common(p, run_dir=False)
    p.add_argument("--mode", choices=MODES, default="auto", help="the qualification mode to plan for")
    p.add_argument("--save", action="store_true", help="keep the plan in the profile's upgrade history (`upgrade "
                   "status` lists it); without it a plan writes nothing")
    q = sub.add_parser("qualify", help="serve the candidate, gate it, judge it against the incumbent's receipt")
    _common(q)
    q.add_argument("--mode", choices=MODES, default="auto",
                   help="side-by-side (beside the incumbent), window (the incumbent stopped meanwhile, then "
                        "restored), or auto: side by side when the host holds both (U3)")
    q.add_argument("--incumbent-receipt", type=Path, help="the incumbent's receipt.json (default its last one, "
                   "else the gate is run on the incumbent first)")
    q.add_argument("--checks", help="the gate's checks (default the gate's defaults)")
    q.add_argument("--budget-s", type=_budget, help="seconds the candidate may take to turn ready (default the "
                   "profile's startup budget: 40 min on a GPU, 5 min on the CPU)")
    q.add_argument("--candidate-port", type=_port, help="the candidate's API port (default a free one)")
    q.add_argument("--candidate-health-port", type=_port, help="the candidate's exporter port (default a free one)")
    q.add_argument("--gate-url", help="gate the candidate through this URL (a proxy or load balancer in front of "
                   "its API) instead of its own port")
    for name, help_text in (("promote", "switch the serve to the candidate channel; roll back if it fails"),
                            ("rollback", "switch the serve back to the channel the last promote replaced")):
        x = sub.add_parser(name, help=help_text)
        _common(x, to=name == "promote")  # the node's placement is the serve's own (its launch.json)
        x.add_argument("--budget-s", type=_budget, help="seconds the switched serve has to turn ready and pass its "
                       "first canary rounds (default the profile's startup budget)")
        x.add_argument("--drain-s", type=_drain, metavar="S",
                       help="a native serve: before the engine's stop, wait at most this long for a moment when it "
                            f"runs no request, so the stop aborts none (0: stop at once; default {PROMOTE_DRAIN_S:g})")
        if name == "promote":
            x.add_argument("--canary-rounds", type=int, default=1, choices=range(0, 11), metavar="N",
                           help="healthy canary rounds the switched serve must pass (default 1)")
            x.add_argument("--force", action="store_true", help="promote without a qualification (not advised)")
            x.add_argument("--beside", action="store_true",
                           help="no time out of service: the candidate serves as a bridge behind the serve's front "
                                "(server.front) while the engine restarts on it; needs room for both (U3)")
        media = x.add_argument_group("containers (instead of the native active launch)")
        media.add_argument("--compose-env", type=Path, metavar="FILE",
                           help="the env file compose reads the image and active channel from (docker compose "
                                "--env-file FILE); the one it replaces is kept as FILE.previous")
        media.add_argument("--compose-file", type=Path, help="with --compose-env: also recreate the service "
                           "(docker compose up -d) and prove it, switching the file back if it fails")
        media.add_argument("--env-file", dest="env_files", type=Path, action="append", default=[],
                           help="the deployment's own env file(s), read before --compose-env (repeatable)")
        media.add_argument("--exporter", help="the serve's (head's) exporter, for U5 and the proof (default "
                           "http://127.0.0.1:<health port>)")
        media.add_argument("--k8s-out", type=Path, metavar="DIR", help="re-render the Kubernetes manifests into "
                           "DIR/PROFILE.yaml (the previous kept as DIR/PROFILE.previous.yaml)")
        media.add_argument("--image", help="the candidate's image (default the channel's tag, as the image build "
                           "names it)")
        add_k8s_options(media, "k8s-")
    s = sub.add_parser("status", help="the active channel, the rollback target and the history")
    s.add_argument("profile", nargs="?", help="a profile (default: every profile with a history)")
    s.add_argument("--json", action="store_true", help="machine-readable")


def _request(args: argparse.Namespace) -> Any:
    from appliance.bounds import check_text
    from appliance.errors import ApplianceError
    from appliance.settings import load_settings
    from appliance.upgrade.candidate import Request

    settings = load_settings()
    name = profile_name_from_args(args, settings,
                                  fix="name the serve's profile (as `appliance run` got it) or set APPLIANCE_PROFILE")
    for item in getattr(args, "sets", []):
        check_text("--with", item)
        if "=" not in item:
            raise ApplianceError(f"--with {item!r} is not of the form a.b=value", field="--with", value=item,
                                 fix="write --with section.key=value")
    return Request(name, tuple(settings.overrides()), tuple(args.overrides), getattr(args, "to", None),
                   tuple(getattr(args, "sets", [])))


def _run_dir(args: argparse.Namespace, req: Any) -> Path:
    from appliance.paths import appliance_home
    from appliance.profile.loader import load_profile
    from appliance.settings import load_settings

    if args.run_dir:
        return Path(args.run_dir)
    settings = load_settings()
    name = load_profile(req.profile, active=False).profile.name
    return settings.log_dir or appliance_home() / "run" / name


def _plan(args: argparse.Namespace) -> int:
    from appliance.settings import load_settings
    from appliance.upgrade.candidate import pair_for
    from appliance.upgrade.history import new_record, utc_now, write_record
    from appliance.upgrade.plan import make_plan, render_plan

    req = _request(args)
    pair = pair_for(req)
    plan = make_plan(pair, procfs=load_settings().procfs, mode=args.mode)
    # A plan is a question: it leaves a record only when asked to (--save), so it can be run from anywhere
    # without growing the history that status, qualify and rollback read.
    folder = None
    if args.save:
        folder = new_record(pair.name, "plan", pair.to_channel.name)
        write_record(folder, {"kind": "plan", "profile": pair.name, "at": utc_now(), "plan": plan})
    recorded = {"record": str(folder) if folder else None}
    print(json.dumps(plan | recorded, indent=2) if args.json else render_plan(plan)
          + (f"\nrecord: {folder}" if folder else "\nrecord: none (--save keeps the plan in the history)"))
    return 0 if plan["renderable"] else 2


def _qualify(args: argparse.Namespace) -> int:
    from appliance.bounds import check_http_url
    from appliance.settings import load_settings
    from appliance.upgrade.qualify import QualifyOptions, qualify, render_result
    from appliance.upgrade.verdict import EXIT

    if args.gate_url:
        check_http_url("--gate-url", args.gate_url)
    req = _request(args)
    settings = load_settings()
    opts = QualifyOptions(run_dir=_run_dir(args, req), procfs=settings.procfs, mode=args.mode,
                          incumbent_receipt=args.incumbent_receipt, checks=args.checks, budget_s=args.budget_s,
                          candidate_port=args.candidate_port, candidate_health_port=args.candidate_health_port,
                          gate_url=args.gate_url, model_dir=settings.model_dir)
    record = qualify(req, opts, _say)
    print(json.dumps(record, indent=2, default=str) if args.json else render_result(record))
    window = record.get("window")
    if window and not window["restored"]:
        _say(f"appliance upgrade: ERROR the incumbent did not come back after the window: {window['why']}")
        return 1
    return EXIT[record["verdict"]]


def _say(line: str) -> None:
    import sys

    print(f"appliance upgrade: {line}", file=sys.stderr, flush=True)


def _promote(args: argparse.Namespace, action: str) -> int:
    from appliance.settings import load_settings
    from appliance.upgrade.promote import PromoteOptions, promote, rollback

    req = _request(args)
    settings = load_settings()
    if args.exporter:
        from appliance.bounds import check_http_url

        check_http_url("--exporter", args.exporter)
    if getattr(args, "beside", False) and (args.compose_env or args.k8s_out):
        from appliance.errors import ApplianceError

        raise ApplianceError("--beside with --compose-env or --k8s-out", field="--beside",
                             fix="drop --beside: Kubernetes moves the traffic itself (--k8s-rollout surge); compose "
                                 "has no front", reason="--beside routes through a native serve's front (server.front)")
    if args.drain_s is not None and (args.compose_env or args.k8s_out):
        from appliance.errors import ApplianceError

        raise ApplianceError("--drain-s with --compose-env or --k8s-out", field="--drain-s", value=args.drain_s,
                             fix="drop --drain-s; for Kubernetes, --k8s-drain-s sets the old pod's drain",
                             reason="--drain-s waits before a native serve's engine stop; compose and Kubernetes stop "
                                    "the container themselves")
    from appliance.profile import load_profile
    from appliance.upgrade.exclusive import one_switch

    with one_switch(load_profile(req.profile, active=False).profile.name, action):
        if args.compose_env or args.k8s_out:
            record = _media(args, req, action)
        else:
            opts = PromoteOptions(run_dir=_run_dir(args, req), budget_s=args.budget_s,
                                  canary_rounds=getattr(args, "canary_rounds", 0),
                                  force=getattr(args, "force", False), procfs=settings.procfs,
                                  beside=getattr(args, "beside", False),
                                  drain_s=PROMOTE_DRAIN_S if args.drain_s is None else args.drain_s)
            record = (promote if action == "promote" else rollback)(req, opts, _say)
    if args.json:
        print(json.dumps(record, indent=2, default=str))
    else:
        proof = record.get("proof")
        print(f"{record['outcome'].upper()}: {record['profile']} {record['from']['channel']} -> "
              f"{record['to']['channel']} ({record['record']})")
        if proof:
            print(f"  {proof.get('why')}; {record.get('seconds')} s")
        if record.get("rollback"):
            print(f"  rollback: {record['rollback']['why']}")
        if record.get("apply"):
            print(f"  apply: {record['apply']}")
    good = ("promoted", "switched") if action == "promote" else ("rolled back",)
    return 0 if record["outcome"] in good else 1


def _media(args: argparse.Namespace, req: Any, action: str) -> RecordJson:
    from appliance.cliargs import k8s_options
    from appliance.errors import ApplianceError
    from appliance.upgrade import promote_media as pm

    if args.compose_env and args.k8s_out:
        raise ApplianceError("both --compose-env and --k8s-out given", field="--k8s-out",
                             fix="switch one deployment at a time")
    if args.compose_file and not args.compose_env:
        raise ApplianceError("--compose-file without --compose-env", field="--compose-file",
                             fix="name the env file the compose project reads the active channel from")
    opts = pm.MediaOptions(compose_env=args.compose_env, compose_file=args.compose_file, env_files=args.env_files,
                           k8s_out=args.k8s_out, k8s=k8s_options(args, "k8s-"),
                           no_rdma=bool(getattr(args, "k8s_no_rdma", False)), image=args.image,
                           exporter=args.exporter,
                           budget_s=args.budget_s, canary_rounds=getattr(args, "canary_rounds", 0),
                           force=getattr(args, "force", False))
    if args.compose_env:
        return (pm.promote_compose if action == "promote" else pm.rollback_compose)(req, opts, _say)
    return (pm.promote_k8s if action == "promote" else pm.rollback_k8s)(req, opts, _say)


def _status(args: argparse.Namespace) -> int:
    from appliance.upgrade.status import render_status, status

    result = status(args.profile)
    print(json.dumps(result, indent=2) if args.json else render_status(result))
    return 0


def run(args: argparse.Namespace) -> int:
    action = args.upgrade_action
    if action == "plan":
        return _plan(args)
    if action == "qualify":
        return _qualify(args)
    if action in ("promote", "rollback"):
        return _promote(args, action)
    return _status(args)
