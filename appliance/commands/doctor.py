"""`appliance doctor [PROFILE]`: preflight; exit 1 when any check fails."""

from __future__ import annotations

import argparse

from appliance.cliargs import add_profile_args, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument("--suggest", action="store_true", help="no profile needed: which shipped profile fits this "
                        "host (the same report as `appliance profiles --host`)")


def run(args: argparse.Namespace) -> int:
    from appliance.doctor import checks_text, run_doctor
    from appliance.settings import load_settings

    if args.suggest:
        from appliance.doctor.fit import host_report

        return host_report(args.json)
    settings = load_settings()
    loaded = load_from_args(args, settings)
    from appliance.doctor.report import check_provable
    from appliance.health.provable import profile_unprovable
    from appliance.health.table import load_table

    checks = run_doctor(loaded.profile, procfs=settings.procfs, kmsg=settings.kmsg)
    checks += check_provable(profile_unprovable(load_table(), loaded.profile))
    text = checks_text(checks, args.json, loaded.profile.name)
    if text:
        print(text)
    return 1 if any(c.status == "fail" for c in checks) else 0
