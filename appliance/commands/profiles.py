"""`appliance profiles`: the table of serve profiles."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.doctor.fit import Host
    from appliance.profile.model import Measured


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable list")
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
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    from appliance.errors import ApplianceError
    from appliance.profile import list_profiles, load_profile

    if args.host:
        return host_report(args.json)
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
    headers = list(rows[0]) if rows else []
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in headers}
    print("  ".join(h.upper().ljust(widths[h]) for h in headers))
    for r in rows:
        print("  ".join(str(r[h]).ljust(widths[h]) for h in headers).rstrip())
    for r in invalid:
        print(f"{r['name']}  INVALID: {r['invalid']}  (appliance validate {r['name']} says more)")
    return 0


def host_report(as_json: bool, host: Host | None = None) -> int:
    """`profiles --host`: this host's facts, every shipped profile's verdict here, and one recommended."""
    from appliance.doctor.fit import fit, read_host, recommend
    from appliance.profile import list_profiles, load_profile
    from appliance.settings import load_settings

    if host is None:
        settings = load_settings()
        host = read_host(settings.procfs)
    profiles = {name: load_profile(name).profile for name in list_profiles()}
    fits = [fit(p, host) for p in profiles.values()]
    best = recommend(fits, profiles)
    if as_json:
        print(json.dumps({"host": host.describe(), "profiles": [f.as_dict() for f in fits],
                          "recommended": best.profile if best else None}, indent=2, ensure_ascii=False))
        return 0
    print("\n".join(host.describe()))
    print()
    width = max(len(f.profile) for f in fits)
    for f in fits:
        verdict = f"refused ({f.rule})" if f.verdict == "refused" else f.verdict
        print(f"{f.profile.ljust(width)}  {verdict:<20}  {_short(f.reason)}")
    print()
    if best is None:
        print("recommended: none of the shipped profiles fits this host")
    elif not best.gpu and any(f.gpu for f in fits) and host.gpus.gpus:
        print(f"recommended: {best.profile} (no GPU profile fits these GPUs: the appliance serves DeepSeek-V4 on "
              f"SM12x only; {best.profile} is the CPU demo)")
    else:
        print(f"recommended: {best.profile} ({best.verdict}; provenance {best.status})")
    return 0


def _short(text: str, width: int = 110) -> str:
    import shutil
    import textwrap

    cols = max(60, shutil.get_terminal_size((160, 24)).columns - 45)
    return textwrap.shorten(text, width=min(width, cols) if cols else width, placeholder=" …")
