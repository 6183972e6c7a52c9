"""`appliance rules`: every rule id with its title, reason, fix and where it is enforced."""

from __future__ import annotations

import argparse
import json


def register(parser: argparse.ArgumentParser) -> None:
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable list")
    out.add_argument("--markdown", action="store_true", help="docs/rules.md as the repository ships it")
    parser.add_argument("rule", nargs="?", help="one id (K15), case-insensitive")


def run(args: argparse.Namespace) -> int:
    from appliance.errors import ApplianceError
    from appliance.rulebook import build, render_markdown, render_text, to_json

    entries = build()
    if args.rule:
        entries = [e for e in entries if e.id == args.rule.upper()]
        if not entries:
            raise ApplianceError(f"no rule {args.rule!r}", field="rule", value=args.rule,
                                 fix="run `appliance rules` for the list")
    if args.json:
        print(json.dumps(to_json(entries), indent=2))
    elif args.markdown:
        print(render_markdown(entries), end="")
    else:
        print(render_text(entries))
    return 0
