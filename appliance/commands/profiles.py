"""`appliance profiles`: the table of serve profiles."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.profile.model import Measured


def register(parser: argparse.ArgumentParser) -> None:
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
    from appliance.profile import list_profiles, load_profile

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
    if args.names:
        print("\n".join(list_profiles()))
        return 0
    rows, details = [], []
    invalid: list[dict[str, str]] = []
    for name in list_profiles():
        try:
            p = load_profile(name).profile
        except ApplianceError as exc:  # one broken file must not hide the others: it is listed as invalid
            invalid.append({"name": name, "invalid": str(exc).splitlines()[0][:200]})
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

    headers = list(rows[0]) if rows else []
    if rows:
        print(render(headers, [[r[h] for h in headers] for r in rows]))
    for r in invalid:
        print(f"{r['name']}  INVALID: {r['invalid']}  (appliance validate {r['name']} says more)")
    return 0

