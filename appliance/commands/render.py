"""`appliance render PROFILE`: the serve command from the ServePlan, as shell or JSON. Shell on a terminal: the
command one flag a line; piped: one line (render/shell_text.py)."""

from __future__ import annotations

import argparse
import json
import shlex

from appliance.cliargs import (
    add_placement_args,
    add_profile_args,
    load_from_args,
    placement_from_args,
)


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    add_placement_args(parser)
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="the plan as JSON (the spelling every command takes)")
    parser.add_argument("--format", choices=["shell", "json"],
                        help="shell (default: on a terminal the command one flag a line, piped one line) or "
                             "json; `--format json` is the old spelling of --json, kept for a release")
    parser.set_defaults(format="shell")  # two actions share the dest: argparse would keep --json's None
    parser.add_argument("--force", action="store_true", help="render even when the profile has rule errors")


def run(args: argparse.Namespace) -> int:
    import sys

    from appliance.render import ServePlan
    from appliance.rules import context_for, evaluate, has_errors
    from appliance.rules.caveats import to_show
    from appliance.serve.resolve import resolve

    loaded = load_from_args(args)
    findings = evaluate(context_for(loaded.profile))
    shown, caveats = to_show(findings, loaded.profile)
    for f in shown:
        print(f.render(), file=sys.stderr)
    if caveats:
        print(caveats, file=sys.stderr)
    if has_errors(findings) and not args.force:
        print(f"appliance render: {loaded.profile.name} is invalid; nothing rendered", file=sys.stderr)
        return 2
    from appliance.multinode.netident import check_rendered

    given = placement_from_args(args)
    plan = resolve(loaded, given).plan
    warning = check_rendered(loaded.profile, given, plan.role)  # K39: never a rank whose Gloo would bind loopback
    if warning:
        print(warning, file=sys.stderr)
    from appliance.redact import redact
    from appliance.render.passthrough import masked_argv

    # A secret never reaches rendered output, not even one passed through with --force (X2 refuses it otherwise).
    plan = ServePlan(masked_argv(plan.argv), {k: redact(v) for k, v in plan.env.items()}, plan.role,
                     [masked_argv(step) for step in plan.setup])
    if args.format == "json":
        print(json.dumps(plan.to_json(), indent=2))
        return 0
    from appliance.render.shell_text import command_text
    from appliance.table import width

    one_line = width() is None  # piped: one line a command, as scripts and `eval` read it
    print(f"# {loaded.profile.name}: role {plan.role}, profile digest {loaded.digest[:12]}")
    for key, value in plan.env.items():
        print(f"export {key}={shlex.quote(value)}")
    for step in plan.setup:
        print(command_text(step, one_line=one_line))
    print(command_text(plan.argv, one_line=one_line))
    return 0
