"""`appliance channels [--json]`: every engine channel (a complete lock of one engine line) with its engine, status,
lock digest, key pins and a summary of its engine's facts. `appliance channels diff A B [--json]`: what moving from
channel A to B changes (packages, flags, env vars, backends, log lines, capabilities) and which rules and log
expectations of the shipped profiles change their verdict; `--profile NAME`: only what changes for that profile."""

from __future__ import annotations

import argparse
import json

from appliance.jsonstrict import JsonObject


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable")
    sub = parser.add_subparsers(dest="channels_action", metavar="[diff]")
    d = sub.add_parser("diff", help="what a user moving from channel A to channel B must know")
    d.add_argument("a", help="the channel moved from")
    d.add_argument("b", help="the channel moved to")
    d.add_argument("--profile", metavar="NAME", help="only what changes for that profile: its command (flags, env), "
                                                     "rules and log expectations, not every flag the engine knows")
    d.add_argument("-o", "--output", choices=["wide"], help="wide: every item of every list, whatever the terminal")
    d.add_argument("--json", action="store_true", help="machine-readable")


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


def render_list(rows: list[JsonObject]) -> str:
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


CUT = "…"
"""Where a list was cut on a terminal (`… +12 more`)."""
LIST_LINES = 2
"""On a terminal, a list takes at most this many lines; the rest is counted (`-o wide` or a pipe shows it whole)."""


def _items(head: str, items: list[str], fit: int | None) -> str:
    """`head: a, b, c`; on a terminal `fit` wide, wrapped between words into LIST_LINES lines at most, the items
    that do not fit counted (`… +12 more`); piped, one line."""
    from appliance.table import line

    text = f"{head}: {', '.join(items)}"
    if fit is None:
        return text
    wrapped = line(text, columns=fit)
    for kept in range(len(items) - 1, -1, -1):
        if wrapped.count("\n") < LIST_LINES:
            break
        wrapped = line(f"{head}: {', '.join([*items[:kept], f'{CUT} +{len(items) - kept} more'])}", columns=fit)
    return wrapped


def _delta(label: str, d: dict[str, list[str]], fit: int | None) -> list[str]:
    out = []
    for kind, sign in (("removed", "-"), ("added", "+"), ("changed", "~")):
        if d.get(kind):
            out.append(_items(f"  {sign} {label} {kind} ({len(d[kind])})", d[kind], fit))
    return out


def _capability(c: JsonObject) -> str:
    """A capability's change; a list (backends) as what it gained and lost, not both lists whole."""
    was, now = c["from"], c["to"]
    if isinstance(was, list) and isinstance(now, list):
        gone, new = sorted(set(was) - set(now)), sorted(set(now) - set(was))
        said = "; ".join(x for x in (f"+ {', '.join(new)}" if new else "", f"- {', '.join(gone)}" if gone else "")
                         if x)
    else:
        said = f"{was} -> {now}"
    return f"  ~ {c['name']}: {said} (rule {c['rule']}: {c['what']})"


def _rules(d: JsonObject, one: bool, fit: int | None) -> list[str]:
    """Each verdict that changes, once, with the profiles it changes for (for one profile: the verdicts alone)."""
    b = d["to"]["name"]
    groups: dict[tuple[str, str, str, bool], list[str]] = {}
    for r in d["rules"]:
        groups.setdefault((r["rule"], r["severity"], r["path"], bool(r.get("gone"))), []).append(r["profile"])
    out = []
    for (rule, severity, path, gone), names in groups.items():
        said = f"  {'-' if gone else '+'} {rule} {severity} on {path}{' (gone on ' + b + ')' if gone else ''}"
        out.append(said if one else _items(f"{said}, {len(names)} profile(s)", names, fit))
    return out or ["  (none)"]


def _expectations(d: JsonObject, one: bool, fit: int | None) -> list[str]:
    """Each expectation that changes, once, with the profiles (and their roles) it changes for."""
    groups: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for e in d["expectations"]:
        groups.setdefault((e["expectation"], e["rule"], e["change"]), {}).setdefault(e["profile"], []).append(e["role"])
    out = []
    for (exp, rule, change), where in groups.items():
        roles = ", ".join(sorted({r for rs in where.values() for r in rs}))
        said = f"  {exp} ({rule}) {change}"
        out.append(f"{said} [{roles}]" if one else
                   _items(f"{said}, {len(where)} profile(s)", [f"{n} [{', '.join(rs)}]" for n, rs in where.items()],
                          fit))
    return out or ["  (none)"]


def render_diff(d: JsonObject, fit: int | None = None) -> str:
    """The diff for a person: each list on one line, cut to `fit` columns (a terminal) with a count of the rest, and
    each verdict once with the profiles it changes for; every long line wrapped between words."""
    from appliance.table import line

    a, b = d["from"], d["to"]
    one = "profile" in d
    lines = [f"channels diff {a['name']} -> {b['name']}" + (f", for profile {d['profile']}" if one else ""),
             f"  from: {a['engine']} ({a['status']}, lock {a['lock_digest'][:12]}); facts {a['facts']['engine']}",
             f"  to:   {b['engine']} ({b['status']}, lock {b['lock_digest'][:12]}); facts {b['facts']['engine']}",
             "packages:", *(_delta("pins", d["packages"], fit) or ["  (same pins)"])]
    lines += ["capabilities:"] + ([_capability(c) for c in d["capabilities"]] or ["  (same)"])
    lines += ["flag defaults that change (a serve that does not set them gets the new one"
              + (f"; the flags {d['profile']} leaves unset" if one else "") + "):"]
    lines += [_items(f"  ~ defaults changed ({len(d['defaults'])})", d["defaults"], fit)] if d["defaults"] else [
        "  (same)"]
    if one:
        lines += [f"the command of {d['profile']} (`appliance render {d['profile']}` on each channel):",
                  *(_delta("flags", d["command"]["flags"], fit) + _delta("env", d["command"]["env"], fit)
                    or ["  (the same command)"])]
    else:
        lines += ["env vars:", *(_delta("VLLM_*", d["env"], fit) or ["  (same)"])]
        lines += ["flags:", *(_delta("flags", d["flags"], fit) or ["  (same)"])]
        lines += ["backends and registries:"]
        lines += [x for reg, delta in d["registries"].items() for x in _delta(reg, delta, fit)] or ["  (same)"]
        lines += ["log lines the engine prints (healthchecks/logchecks.yaml patterns):",
                  *(_delta("lines", d["log_lines"], fit) or ["  (same)"])]
    lines += ["rules whose verdict changes" + ("" if one else " (shipped profiles)") + ":", *_rules(d, one, fit)]
    lines += ["log expectations that change" + ("" if one else " (shipped profiles)") + ":",
              *_expectations(d, one, fit)]
    if d.get("note"):
        lines.append(f"note: {d['note']}")
    if any(CUT in x for x in lines):
        lines.append(f"({CUT} +N more: a list cut to fit the terminal; -o wide or a pipe shows each whole)")
    if not one:
        lines.append("(--profile NAME: only what changes for that profile)")
    return "\n".join(x if not fit or "\n" in x else line(x, columns=fit) for x in lines)


def run(args: argparse.Namespace) -> int:
    from appliance.channel_report import diff, summaries

    if args.channels_action == "diff":
        from appliance.table import width

        result = diff(args.a, args.b, args.profile)
        print(json.dumps(result, indent=2) if args.json else
              render_diff(result, None if args.output == "wide" else width()))
        return 0
    rows = summaries()
    print(json.dumps(rows, indent=2) if args.json else render_list(rows))
    return 0
