"""`appliance doctor [PROFILE]`: preflight; exit 1 when any check fails. `doctor --suggest`: the preflight of the
profile this host should run (the one `appliance profiles --host` recommends), so "what do I run here, and is this host
ready for it" is one command; the list of every profile's verdict stays `profiles --host`'s."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from appliance.cliargs import add_profile_args, load_from_args

if TYPE_CHECKING:
    from appliance.doctor import Check
    from appliance.profile.model import Profile
    from appliance.settings import ApplianceSettings


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument("--suggest", action="store_true", help="no profile needed: the preflight of the profile this "
                        "host should run (the one `appliance profiles --host` recommends; that lists every verdict)")


def _checks(profile: Profile, settings: ApplianceSettings) -> list[Check]:
    from appliance.doctor import run_doctor
    from appliance.doctor.report import check_provable
    from appliance.health.provable import profile_unprovable
    from appliance.health.table import load_table

    checks = run_doctor(profile, procfs=settings.procfs, kmsg=settings.kmsg)
    return checks + check_provable(profile_unprovable(load_table(), profile))


def run(args: argparse.Namespace) -> int:
    from appliance.doctor import checks_text
    from appliance.settings import load_settings

    settings = load_settings()
    if args.suggest:
        return _suggest(args, settings)
    loaded = load_from_args(args, settings)
    checks = _checks(loaded.profile, settings)
    text = checks_text(checks, args.json, loaded.profile.name)
    if text:
        print(text)
    return 1 if any(c.status == "fail" for c in checks) else 0


def _suggest(args: argparse.Namespace, settings: ApplianceSettings) -> int:
    """The recommended profile, why, and its preflight (exit 1 when none fits or a check fails)."""
    from appliance.doctor import checks_text
    from appliance.doctor.fit import judge_host, read_host
    from appliance.errors import ApplianceError
    from appliance.profile import load_profile
    from appliance.table import line

    if args.profile or args.profile_option or args.overrides:
        raise ApplianceError("doctor --suggest picks the profile itself", field="--suggest",
                             fix="leave out the profile and --set, or drop --suggest to check the profile named",
                             reason="--suggest checks the profile this host should run")
    judged = judge_host(read_host(settings.procfs))
    best = judged.best
    checks = [] if best is None else _checks(load_profile(best.profile, env_overrides=settings.overrides()).profile,
                                             settings)
    failed = best is None or any(c.status == "fail" for c in checks)
    if args.json:
        print(json.dumps({"recommended": best.profile if best else None, "ok": not failed,
                          "checks": [c.as_dict() for c in checks]}, indent=2))
        return 1 if failed else 0
    if best is None:
        print(line(f"{judged.said()}: `appliance profiles --host` says why each is refused"))
        return 1
    print(line(f"{judged.said()}; its preflight (every profile's verdict: appliance profiles --host):"))
    print(checks_text(checks, False, best.profile))
    return 1 if failed else 0
