"""`appliance config PROFILE`: the effective config, each value with its origin; secrets redacted."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from appliance.cliargs import add_profile_args, load_from_args
from appliance.jsonstrict import JsonObject
from appliance.redact import SECRET_ENV as SECRETS
from appliance.redact import redact_tree


def _flatten(data: object, prefix: str = "") -> dict[str, object]:
    if isinstance(data, dict) and data:
        out: dict[str, object] = {}
        for key, value in data.items():
            out |= _flatten(value, f"{prefix}{key}.")
        return out
    return {prefix.rstrip("."): data}


def _is_passthrough(path: str) -> bool:
    return path == "engine.extra_args" or path.startswith("engine.extra_env")


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--json", action="store_true", help="as JSON: {path: {value, origin}}")
    parser.add_argument("-o", "--output", choices=["wide"], help="wide: every cell whole, whatever the terminal")
    parser.add_argument("--run-dir", type=Path, help="a serve's run dir: include the step-down rung its canary took "
                        "(canary.json), i.e. the settings the engine runs with now")


def run(args: argparse.Namespace) -> int:
    rung: JsonObject = {}
    if args.run_dir:  # the canary's step-down rung, applied last (appliance/canary/ladder.py)
        from appliance.health.canary_state import STATE_FILE, read_state

        state = read_state(args.run_dir / STATE_FILE)
        rung = state.rung if state else {}
        args.overrides = [*args.overrides, *rung.get("set", [])]
    loaded = load_from_args(args)
    values = _flatten(loaded.profile.model_dump(mode="json"))
    # A value that carries a secret (HF_TOKEN's value pasted into a field) is shown masked, like the secrets.
    rows = {path: {"value": redact_tree(value), "origin": loaded.origin(path)} for path, value in values.items()}
    for item in rung.get("set", []):
        key = str(item).partition("=")[0].strip()
        for path in rows:
            if path == key or path.startswith(f"{key}."):
                rows[path]["origin"] = f"canary:rung {rung['index']} {rung['name']}"
    revision = rows.get("model.revision")
    if revision is not None and revision["value"] is None:  # unset in the profile: the lock's pin (W1, W2)
        from appliance.weights.pins import LOCK_ORIGIN, pinned_revision

        revision.update(value=pinned_revision(loaded.profile.model.checkpoint), origin=LOCK_ORIGIN)
    if "engine.extra_args" in rows:  # a secret after its flag is masked as on any command line
        from appliance.render.passthrough import masked_argv

        rows["engine.extra_args"]["value"] = masked_argv(list(loaded.profile.engine.extra_args))
    passed = [path for path in rows if _is_passthrough(path) and rows[path]["value"] not in ([], {})]
    for path in passed:  # unmodelled: said as such, with the layer it came from
        rows[path]["origin"] = f"passthrough ({rows[path]['origin']})"
    from appliance.rules import context_for, evaluate
    from appliance.rules.caveats import to_show

    # What validate says (X5 on the passthrough among it), on stderr as every command says it; the accepted caveats
    # are rows below. An invalid profile is still shown: config is where one looks to see why.
    for finding in to_show(evaluate(context_for(loaded.profile)), loaded.profile)[0]:
        print(finding.render(), file=sys.stderr)
    secrets = {name: ("set (redacted)" if os.environ.get(name) else "unset") for name in SECRETS}
    from appliance.health.provable import profile_unprovable
    from appliance.health.table import load_table

    # Log expectations this profile's channel cannot prove on a DeepSeek-V4 serve: said here as on /status.
    unprovable = profile_unprovable(load_table(), loaded.profile)
    network = network_rows(loaded)
    if args.json:
        print(json.dumps({"profile": loaded.profile.name, "digest": loaded.digest, "values": rows,
                          "secrets": secrets, "not_provable": [n.to_json() for n in unprovable],
                          **({"network": network} if network else {})}, indent=2))
        return 0
    from appliance.table import line, render

    print(line(f"# {loaded.profile.name} (from {loaded.source}, digest {loaded.digest[:12]})"))
    table = [[path, shown(row["value"]), str(row["origin"])] for path, row in rows.items()]
    table += [[f"env.{name}", state, "env"] for name, state in secrets.items()]
    table += [[f"network.{name}", shown(row["value"]), row["origin"]] for name, row in network.items()]
    print(render(["path", "value", "origin"], table, wide=args.output == "wide"))
    for n in unprovable:
        print(line(f"# {n.rule} {n.expectation}: {n.detail}"))
    return 0


def network_rows(loaded: Any) -> dict[str, JsonObject]:
    """A multi-node GPU rank's network variables as this host resolves them (APPLIANCE_NODE_RANK, _MASTER_ADDR,
    _FABRIC_IFNAME, _HOST_IP read as `appliance run` reads them, through its resolve_place; K39), each with its
    origin; `unresolved` with the refusal where `appliance run` would refuse. Empty for a single node and the CPU
    rehearsal."""
    from appliance.cliargs import placement_from_args
    from appliance.errors import ApplianceError
    from appliance.multinode.netident import Tables
    from appliance.render.plan import fabric_env_origins
    from appliance.run.launch import resolve_place
    from appliance.settings import load_settings

    profile = loaded.profile
    if profile.hardware.nodes < 2 or profile.hardware.target == "cpu":
        return {}
    try:
        settings = load_settings()
        # A view: no name lookup (a master given by host name is resolved by `run`, on the node)
        place = resolve_place(loaded, placement_from_args(argparse.Namespace(), settings), None,
                              tables=Tables(procfs=settings.procfs, sysfs=settings.sysfs, lookup_host=lambda _: []))
    except ApplianceError as exc:
        rows = {"unresolved": {"value": f"{exc.message}; fix: {exc.fix}", "origin": f"refused ({exc.field})"}}
    else:
        rows = {name: {"value": value, "origin": origin}
                for name, (value, origin) in fabric_env_origins(profile, place).items()}
    return redact_tree(rows)  # a value given with a secret pasted in is shown masked, as everywhere in config


def shown(value: object) -> str:
    """A value as a person reads it (YAML's flow style: text bare, no JSON quotes or escapes); --json is exact."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return str(value)
