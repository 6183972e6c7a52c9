"""`appliance engine install CHANNEL`: a channel's engine into the engine store ($APPLIANCE_ENGINES), the step that
`appliance upgrade qualify` takes before it serves a candidate, as a verb of its own (a CPU channel is installed; a
GPU channel comes as its image). `appliance engine list [--json]`: where each channel's engine is on this host."""

from __future__ import annotations

import argparse
import json
import sys


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="engine_action", metavar="install|list", required=True)
    i = sub.add_parser("install", help="install a CPU channel's engine into the engine store (a GPU channel: its "
                                       "image); a second run finds it and installs nothing")
    i.add_argument("channel", metavar="CHANNEL", help="the channel (appliance channels lists them)")
    ls = sub.add_parser("list", help="every channel and where its engine is on this host")
    ls.add_argument("--json", action="store_true", help="machine-readable")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # progress is no result: stdout stays the one line a script reads


def run(args: argparse.Namespace) -> int:
    from appliance.channels.engines import engines_root, find_engine, obtain_engine
    from appliance.lock import load_lock

    lock = load_lock()
    if args.engine_action == "list":
        rows = []
        for name, ch in sorted(lock.channels.items()):
            found = find_engine(ch)
            rows.append({"channel": name, "target": ch.target, "engine": ch.engine.label,
                         "where": found.where if found else None})
        if args.json:
            print(json.dumps({"store": str(engines_root()), "channels": rows}, indent=2))
            return 0
        from appliance.table import render

        print(render(["channel", "target", "where"],
                     [[r["channel"], r["target"], r["where"] or ("missing: appliance engine install " + r["channel"]
                                                                if r["target"] == "cpu" else "missing: its image")]
                      for r in rows]))
        return 0
    ch = lock.channel(args.channel)
    install, took = obtain_engine(ch, report=_progress)
    print(f"{ch.name}: {install.where}" + (f" (installed in {took:.0f} s)" if took else " (already here)"))
    return 0
