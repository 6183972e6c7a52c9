"""`appliance profiles`: the table of serve profiles (`show NAME`: one of them; `path [NAME]`: where they live)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.profile.model import Measured


NARROW = ("name", "hardware", "nodes_x_gpus", "quant", "speculative", "channel", "provenance")
"""The columns of the list; `-o wide` adds the checkpoint and what the seed measured (as kubectl's wide does)."""
SHOWN = {"hardware": "gpu", "nodes_x_gpus": "nodes", "speculative": "spec"}
"""Headers shorter than the JSON keys, so the list fits 80 columns with every name whole."""
HEAD_PLACEHOLDER = "head-fabric-address"
"""What `profiles show` puts where a multi-node command needs the head's address (a host name, so it renders)."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", metavar="show|path",
                        help="show NAME: one profile (what it serves, on what, its provenance and caveats, its "
                             "command); path [NAME]: the folder profiles are read from, or NAME's file")
    parser.add_argument("name", nargs="?", help="the profile for show / path")
    parser.add_argument("--all", action="store_true", help="list the test profiles (the CPU ones) too")
    parser.add_argument("-o", "--output", choices=["wide"], help="wide: every cell whole, whatever the terminal")
    parser.add_argument("--json", action="store_true", help="machine-readable list")
    parser.add_argument("--names", action="store_true", help="the names alone, one a line (shell completion asks)")
    parser.add_argument("--host", action="store_true",
                        help="which profile fits this machine: its GPUs (NVML), memory and fabric, each profile "
                             "marked fits / refused (rule, reason) / validated here, one recommended")


def measured_cell(m: Measured | None) -> str:
    """What the seed ran, in one cell: head, runner, guard, checks; `-` where the seed names nothing."""
    if m is None:
        return "-"
    parts = [m.head or "head ?", f"runner {m.runner}" if m.runner else "runner ?"]
    if m.guard == "absent":
        parts.append("no guard")
    if m.max_model_len:
        parts.append(f"mml {m.max_model_len}")
    parts.append(", ".join(m.checks) if m.checks else "checks not listed")
    if m.unverified:
        parts.append("unverified " + ", ".join(u.split(" ")[0] for u in m.unverified))
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    from appliance.errors import ApplianceError
    from appliance.profile.names import list_profiles

    if args.host:
        from appliance.doctor.fit import host_report

        rc = host_report(args.json)
        if not args.json:  # the fabric a multi-node profile would use here, and the .env lines for it (K39)
            from appliance.multinode.netident import Tables, host_lines
            from appliance.settings import load_settings
            from appliance.table import line

            print()
            settings = load_settings()
            print("\n".join(line(text) for text in host_lines(Tables(procfs=settings.procfs, sysfs=settings.sysfs))))
        return rc
    if args.names:  # asked on every TAB: the folder's names alone, no model imported
        print("\n".join(list_profiles()))
        return 0
    from appliance.profile import load_profile

    if args.action == "path":
        return _path(args.name)
    if args.action == "show":
        if not args.name:
            raise ApplianceError("profiles show: which profile?", field="NAME",
                                 fix="name one: appliance profiles show gb10-tp2 (appliance profiles lists them)")
        return _show(args.name)
    if args.action is not None:
        raise ApplianceError(f"profiles: unknown action {args.action!r}", field="ACTION", value=args.action,
                             fix=f"appliance profiles show {args.action} (or: appliance profiles path)",
                             reason="the list takes no name; one profile is shown by `profiles show NAME`")
    rows, details = [], []
    invalid: list[dict[str, str]] = []
    hidden = 0
    for name in list_profiles():
        try:
            p = load_profile(name).profile
        except ApplianceError as exc:  # one broken file must not hide the others: it is listed as invalid
            invalid.append({"name": name, "invalid": str(exc).splitlines()[0][:200]})
            continue
        if p.provenance.status == "test" and not (args.all or args.json):
            hidden += 1  # the CPU profiles exist for the tests and the demo: listed with --all
            continue
        spec = f"{p.speculative.method}:{p.speculative.num_tokens}" if p.speculative else "off"
        rows.append({
            "name": p.name, "hardware": p.hardware.gpu,
            "nodes_x_gpus": f"{p.hardware.nodes}x{p.hardware.gpus_per_node}",
            "checkpoint": p.model.checkpoint, "quant": p.model.quantization, "speculative": spec,
            "channel": p.engine.channel, "provenance": p.provenance.status,
            "measured": measured_cell(p.provenance.measured),
        })
        details.append(p.provenance.model_dump(mode="json"))
    if args.json:
        print(json.dumps([{**r, "provenance": d} for r, d in zip(rows, details, strict=True)] + invalid, indent=2))
        return 0
    from appliance.table import render

    wide = args.output == "wide"
    headers = [h for h in (rows[0] if rows else []) if wide or h in NARROW]
    if rows:
        print(render([SHOWN.get(h, h) for h in headers], [[r[h] for h in headers] for r in rows], wide=wide))
    for r in invalid:
        print(f"{r['name']}  INVALID: {r['invalid']}  (appliance validate {r['name']} says more)")
    if hidden:
        print(f"({hidden} test profiles not shown: --all lists them)")
    return 0


def _path(name: str | None) -> int:
    from appliance.paths import profiles_dir
    from appliance.profile.loader import resolve_path

    print(resolve_path(name) if name else profiles_dir())
    return 0


def _show(name: str) -> int:
    """One profile as a person reads it: what it serves, on what, how far it is proven, its caveats and command."""
    import shlex
    import sys

    from appliance.profile import load_profile
    from appliance.render.plan import build_plan, rank_placements
    from appliance.rules import context_for, evaluate
    from appliance.rules.caveats import accepted

    loaded = load_profile(name)
    p = loaded.profile
    spec = (f"{p.speculative.method}, {p.speculative.num_tokens} draft tokens" if p.speculative else
            "no speculative decoding")
    prov = p.provenance
    print(f"{p.name}: {p.description}" if p.description else p.name)
    print(f"  serves      {p.model.checkpoint} ({p.model.quantization}), {spec}, max_model_len "
          f"{p.limits.max_model_len}")
    print(f"  on          {p.hardware.gpu}: {p.hardware.nodes} node(s) x {p.hardware.gpus_per_node} GPU, TP "
          f"{p.parallel.tensor}, channel {p.engine.channel}")
    proven = "; ".join(x for x in (prov.status, prov.hardware, prov.source, str(prov.date or "")) if x)
    print(f"  provenance  {proven}")
    if prov.measured is not None:
        print(f"  measured    {measured_cell(prov.measured)}")
    findings = evaluate(context_for(p))
    for f in findings:
        why = accepted(f, p)
        print(f"  {'accepted' if why else f.severity:<11} {f.rule} {f.path}: {f.message.split(': ')[0]}")
        if why:
            print(f"  {'':<11} accepted because {why}")
    plan = build_plan(p, rank_placements(p, HEAD_PLACEHOLDER if p.hardware.nodes > 1 else None)[0])
    from appliance.redact import redact
    from appliance.render.passthrough import masked_argv
    from appliance.render.shell_text import command_text

    where = f"the head; {HEAD_PLACEHOLDER} stands for its fabric address" if plan.role != "single" else plan.role
    print(f"  command     ({where}; `appliance render {p.name}` prints it for this node)")
    for key, value in plan.env.items():
        print(f"    export {key}={shlex.quote(redact(value))}")
    print(command_text(masked_argv(plan.argv), one_line=False, indent="    "))
    sys.stdout.flush()
    return 0

