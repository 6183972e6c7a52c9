"""`appliance doctor [PROFILE]`: preflight; exit 1 when any check fails."""

from __future__ import annotations

import argparse
import json

from appliance.commands.common import add_profile_args, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def print_checks(checks: list, as_json: bool, profile: str) -> None:
    if as_json:
        print(json.dumps({"profile": profile, "ok": not any(c.status == "fail" for c in checks),
                          "checks": [c.as_dict() for c in checks]}, indent=2))
        return
    for c in checks:
        print(f"{c.status.upper():<5} {c.name:<11} {c.detail}")
        if c.fix and c.status == "fail":
            print(f"{'':<17} fix: {c.fix}")


def run(args: argparse.Namespace) -> int:
    from appliance.doctor import run_doctor
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    checks = run_doctor(loaded.profile, procfs=settings.procfs, kmsg=settings.kmsg)
    print_checks(checks, args.json, loaded.profile.name)
    return 1 if any(c.status == "fail" for c in checks) else 0
