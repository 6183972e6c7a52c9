"""`appliance canary --url URL [--model NAME] [--json]`: one round of golden checks against any
OpenAI-compatible serve. Exit 0 healthy, 1 corruption (each finding names its signature and the
evidence), 2 bad input or a serve that does not answer."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from appliance.cliargs import seconds_up_to

MAX_TIMEOUT_S = 3600.0
"""An hour for one request: the longest decode a round asks for takes seconds on a healthy serve."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the serve's base URL, e.g. http://127.0.0.1:8000 (an OpenAI "
                        "base URL ending in /v1 is taken too)")
    parser.add_argument("--model", help="served model name (default: the one the serve lists)")
    parser.add_argument("--json", action="store_true", help="print the round as JSON")
    parser.add_argument("--calibration", type=Path, metavar="FILE",
                        help="this model's calibration (a file from --record-calibration, or a gate receipt "
                             "carrying one); without it the calibrated checks are skipped and named")
    parser.add_argument("--record-calibration", type=Path, metavar="FILE",
                        help="on a known-good serve: run the round and, if it is healthy, record the calibration "
                             "(into FILE; a gate receipt.json of that serve gets it under canary_calibration)")
    parser.add_argument("--long-decode-tokens", type=int,
                        help="length of the long greedy decode (default: a profile's canary.long_decode_tokens)")
    parser.add_argument("--concurrency", type=int,
                        help="requests sharing one cached prefix at once (default: a profile's canary.concurrency)")
    parser.add_argument("--timeout", type=seconds_up_to(MAX_TIMEOUT_S), default=120.0,
                        help=f"seconds a request may take in all, its whole reply read (default 120, at most "
                             f"{MAX_TIMEOUT_S:g})")
    parser.add_argument("--reasoning-effort", metavar="EFFORT",
                        help="sent with every chat request; `none` for a reasoning model (DeepSeek-V4), so a reply "
                             "answers instead of thinking (`appliance run` and the gate set it from the profile)")


def _in_section_bounds(args: argparse.Namespace, key: str, why: str) -> None:
    """A size flag takes the profile section's default and limits (appliance/profile/canary.py), not copies."""
    from appliance.errors import ApplianceError
    from appliance.profile.canary import Canary

    field = Canary.model_fields[key]
    low = next(m.ge for m in field.metadata if hasattr(m, "ge"))
    high = next(m.le for m in field.metadata if hasattr(m, "le"))
    value = getattr(args, key)
    if value is None:
        setattr(args, key, field.default)
    elif not low <= value <= high:
        flag = "--" + key.replace("_", "-")
        raise ApplianceError(f"{flag} {value} is outside {low}..{high}", field=flag, value=value,
                             fix=f"use e.g. {field.default}", reason=why)


def _validate(args: argparse.Namespace) -> None:
    from appliance.bounds import api_base_url, check_http_url
    from appliance.errors import ApplianceError

    check_http_url("--url", args.url)
    args.url = api_base_url(args.url)
    for key, why in (("long_decode_tokens", "too short shows no loop; too long costs the serve"),
                     ("concurrency", "cached blocks are shared by >= 2")):
        _in_section_bounds(args, key, why)
    if args.reasoning_effort is not None and not re.fullmatch(r"[a-z]{1,16}", args.reasoning_effort):
        raise ApplianceError(f"--reasoning-effort {args.reasoning_effort!r} is not an effort name",
                             field="--reasoning-effort", value=args.reasoning_effort,
                             fix="pass e.g. none (answer without thinking), low or high",
                             reason="it is sent to the serve as the OpenAI `reasoning_effort` field")
    if args.calibration and args.record_calibration:
        raise ApplianceError("--calibration and --record-calibration together", field="--record-calibration",
                             fix="record on a known-good serve first, then check with --calibration")
    if args.record_calibration:  # before the round: a target that cannot be written must not cost the serve a round
        from appliance.bounds import check_text
        from appliance.safe_write import check_target

        check_text("--record-calibration", str(args.record_calibration), max_bytes=4096)
        check_target(args.record_calibration, "--record-calibration")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from appliance.canary.calibration import new_calibration
    from appliance.canary.checks import RoundPlan
    from appliance.canary.session import one_round
    from appliance.gate.canary import record_calibration
    from appliance.redact import clip, redact_tree

    _validate(args)
    plan = RoundPlan(long_decode_tokens=args.long_decode_tokens, concurrency=args.concurrency,
                     reasoning_effort=args.reasoning_effort)
    result = asyncio.run(one_round(args.url, model=args.model, plan=plan, calibration_path=args.calibration,
                                   record=bool(args.record_calibration), timeout=args.timeout))
    out = result.to_json()
    if args.record_calibration and result.healthy:
        what = record_calibration(new_calibration(result.model, args.url, result.known_right, result.greedy),
                                args.record_calibration)
        out["calibration_recorded"] = f"{args.record_calibration} ({what})"
    if args.json:
        print(json.dumps(redact_tree(out), indent=1))  # the model id and the evidence are the serve's text
    else:
        verdict = "healthy" if result.healthy else f"CORRUPTION ({', '.join(result.signatures)})"
        print(f"canary {args.url} model {clip(result.model, 200)}: {verdict} — {len(result.checks)} checks, "
              f"{result.requests} requests, {result.completion_tokens} tokens, {result.seconds:.1f} s")
        for f in result.findings:
            print(f"  {f.render()}")
        for name, why in result.skipped.items():
            print(f"  skipped {name}: {why}")
        if "calibration_recorded" in out:
            print(f"  calibration recorded: {out['calibration_recorded']} "
                  f"({len(result.known_right)} known answers right)")
        elif args.record_calibration:
            print("  calibration NOT recorded: the round found corruption")
    return 0 if result.healthy else 1
