"""`appliance profiles`: the table of serve profiles."""

from __future__ import annotations

import argparse
import json


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable list")


def run(args: argparse.Namespace) -> int:
    from appliance.profile import list_profiles, load_profile

    rows = []
    for name in list_profiles():
        p = load_profile(name).profile
        spec = f"{p.speculative.method}:{p.speculative.num_tokens}" if p.speculative else "off"
        rows.append({
            "name": p.name, "hardware": p.hardware.gpu,
            "nodes_x_gpus": f"{p.hardware.nodes}x{p.hardware.gpus_per_node}",
            "checkpoint": p.model.checkpoint, "quant": p.model.quantization, "speculative": spec,
            "provenance": p.provenance.status,
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    headers = list(rows[0]) if rows else []
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in headers}
    print("  ".join(h.upper().ljust(widths[h]) for h in headers))
    for r in rows:
        print("  ".join(str(r[h]).ljust(widths[h]) for h in headers).rstrip())
    return 0
