"""The gate's `canary` check: one correctness-canary round (appliance/canary/checks.py) against the serve.

A healthy round also records this model's calibration (its known answers and greedy replies) into the
receipt under `canary_calibration`: the receipt of a known-good serve is that model's calibration, for
`appliance canary --calibration receipt.json` and a profile's `canary.calibration`. A round that finds
corruption fails the check and records nothing.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from appliance.canary.calibration import RECEIPT_KEY, Calibration, new_calibration, save_calibration
from appliance.canary.session import one_round, plan_for_profile
from appliance.gate.context import GateContext
from appliance.gate.receipt import SCHEMA
from appliance.gate.result import CheckResult, utc_now
from appliance.safe_write import write_json

RULES = ("K2", "K4", "K6")
"""Garbled text from a too-small speculative block (K2), a poisoned prefix cache (K4), the eager scratch pool (K6):
what the round reads in the replies."""
TIMEOUT_S = 600.0
FIELD = "--record-calibration"


def run(ctx: GateContext) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    plan = plan_for_profile(ctx.profile)
    ctx.progress.step(f"one round: {plan.concurrency} requests on a shared prefix, a {plan.long_decode_tokens}-token "
                      "greedy decode, needles on both endpoints, streamed and not")
    result = asyncio.run(one_round(ctx.url, model=ctx.model, plan=plan, calibration_path=None, record=True,
                                   timeout=TIMEOUT_S))
    params = {"long_decode_tokens": plan.long_decode_tokens, "concurrency": plan.concurrency,
              "reasoning_effort": plan.reasoning_effort}
    metrics = {"checks": len(result.checks), "findings": len(result.findings), "requests": result.requests,
               "completion_tokens": result.completion_tokens}
    summary = (f"healthy: {len(result.checks)} checks, {result.requests} requests; calibration recorded "
               f"({len(result.known_right)} known answers right)" if result.healthy else
               f"CORRUPTION ({', '.join(result.signatures)}): {result.findings[0].render()[:200]}")
    check = CheckResult("canary", "pass" if result.healthy else "fail", summary, started_at=started,
                        seconds=time.monotonic() - began, params=params, metrics=metrics,
                        details={"round": result.to_json()})
    if result.healthy:
        check.attach[RECEIPT_KEY] = new_calibration(result.model, ctx.url, result.known_right, result.greedy).to_json()
    return check


def record_calibration(calibration: Calibration, path: Path) -> str:
    """Into PATH: when it is a gate receipt, under `canary_calibration` (the receipt of the same known-good serve
    carries it); else as a calibration file. What was written."""
    from appliance.gate.receipt import MAX_RECEIPT_BYTES
    from appliance.jsonstrict import JsonError, loads
    from appliance.paths import read_capped
    from appliance.redact import redact_tree
    from appliance.safe_write import check_target

    existing: Any = None
    if check_target(path, FIELD) is not None:  # a folder, FIFO, device or link: refused before it is read
        try:
            existing = loads(read_capped(path, FIELD, MAX_RECEIPT_BYTES, "calibration target"), str(path))
        except JsonError:
            existing = None  # not JSON: replaced by the calibration file
    if not (isinstance(existing, dict) and existing.get("schema") == SCHEMA):
        return save_calibration(calibration, path)
    write_json(path, {**existing, RECEIPT_KEY: redact_tree(calibration.to_json())}, field=FIELD, indent=2)
    return "gate receipt (canary_calibration)"
