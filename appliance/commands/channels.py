"""`appliance channels [--json]`: every engine channel (a complete lock of one engine line) with its engine, status,
lock digest, key pins and a summary of its engine's facts. `appliance channels diff A B [--json]`: what moving from
channel A to B changes (packages, flags, env vars, backends, log lines, capabilities) and which rules and log
expectations of the shipped profiles change their verdict."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable")
    sub = parser.add_subparsers(dest="channels_action", metavar="[diff]")
    d = sub.add_parser("diff", help="what a user moving from channel A to channel B must know")
    d.add_argument("a", help="the channel moved from")
    d.add_argument("b", help="the channel moved to")
    d.add_argument("--json", action="store_true", help="machine-readable")


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


def render_list(rows: list[dict[str, Any]]) -> str:
    head = ["NAME", "TARGET", "ENGINE", "STATUS", "LOCK", "PINS", "FLAGS", "ENV", "BACKENDS", "GUARD", "SM120",
            "DSPARK"]
    table = [head]
    for r in rows:
        caps, facts = r["capabilities"], r["facts"]
        table.append([r["name"] + (" *" if r["default"] else ""), r["target"], r["engine"], r["status"],
                      r["lock_digest"][:12], " ".join(f"{k}={v}" for k, v in r["pins"].items()),
                      str(facts["flags"]), str(facts["env"]), str(facts["backends"]), _yes(caps["guard"]),
                      caps["sm120_decode"] or "-", _yes(caps["dspark"])])
    from appliance.table import render

    return "\n".join([render(head, table[1:]), "* the default channel of its target (versions.json default_channel, "
                                              "default_cpu_channel)"])


def _delta(label: str, d: dict[str, list[str]]) -> list[str]:
    out = []
    for kind, sign in (("removed", "-"), ("added", "+"), ("changed", "~")):
        if d.get(kind):
            out.append(f"  {sign} {label} {kind} ({len(d[kind])}): {', '.join(d[kind])}")
    return out


def render_diff(d: dict[str, Any]) -> str:
    a, b = d["from"], d["to"]
    lines = [f"channels diff {a['name']} -> {b['name']}",
             f"  from: {a['engine']} ({a['status']}, lock {a['lock_digest'][:12]}); facts {a['facts']['engine']}",
             f"  to:   {b['engine']} ({b['status']}, lock {b['lock_digest'][:12]}); facts {b['facts']['engine']}",
             "packages:", *(_delta("pins", d["packages"]) or ["  (same pins)"])]
    lines += ["capabilities:"] + ([f"  ~ {c['name']}: {c['from']} -> {c['to']} (rule {c['rule']}: {c['what']})"
                                    for c in d["capabilities"]] or ["  (same)"])
    lines += ["env vars:", *(_delta("VLLM_*", d["env"]) or ["  (same)"])]
    lines += ["flags:", *(_delta("flags", d["flags"]) or ["  (same)"])]
    lines += ["flag defaults that change (a serve that does not set them gets the new one):"]
    lines += [f"  ~ {x}" for x in d["defaults"]] or ["  (same)"]
    lines += ["backends and registries:"]
    lines += [x for reg, delta in d["registries"].items() for x in _delta(reg, delta)] or ["  (same)"]
    lines += ["log lines the engine prints (healthchecks/logchecks.yaml patterns):",
              *(_delta("lines", d["log_lines"]) or ["  (same)"])]
    lines += ["rules whose verdict changes (shipped profiles):"]
    lines += [f"  {'-' if r.get('gone') else '+'} {r['profile']}: {r['rule']} {r['severity']} on {r['path']}"
              f"{' (gone on ' + b['name'] + ')' if r.get('gone') else ''}" for r in d["rules"]] or ["  (none)"]
    lines += ["log expectations that change (shipped profiles):"]
    lines += [f"  {e['profile']} [{e['role']}]: {e['expectation']} ({e['rule']}) {e['change']}"
              for e in d["expectations"]] or ["  (none)"]
    if d.get("note"):
        lines.append(f"note: {d['note']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from appliance.channel_report import diff, summaries

    if args.channels_action == "diff":
        result = diff(args.a, args.b)
        print(json.dumps(result, indent=2) if args.json else render_diff(result))
        return 0
    rows = summaries()
    print(json.dumps(rows, indent=2) if args.json else render_list(rows))
    return 0
