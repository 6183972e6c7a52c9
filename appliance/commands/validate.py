"""`appliance validate PROFILE`: every finding with its rule id; exit 2 on any error."""

from __future__ import annotations

import argparse
import json
import sys

from appliance.cliargs import add_profile_args, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--json", action="store_true", help="findings as JSON")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from appliance.redact import redact_tree
    from appliance.rules import context_for, evaluate, has_errors
    from appliance.rules.caveats import accepted, to_show

    loaded = load_from_args(args)
    findings = evaluate(context_for(loaded.profile))
    if args.json:
        print(json.dumps({"profile": loaded.profile.name, "valid": not has_errors(findings),
                          "findings": [redact_tree({**asdict(f), "accepted": accepted(f, loaded.profile)})
                                       for f in findings]}, indent=2, default=str))
    else:
        shown, caveats = to_show(findings, loaded.profile)
        for f in shown:  # findings to stderr, as every command says them; the verdict on stdout
            print(f.render(), file=sys.stderr)
        errors = sum(f.severity == "error" for f in findings)
        verdict = "INVALID" if errors else "ok"
        print(f"{loaded.profile.name}: {verdict} ({errors} error(s), {len(shown) - errors} warning(s))")
        if caveats:
            print(caveats)
    return 2 if has_errors(findings) else 0
