"""Run the selected checks in order, rewriting the receipt after each; Ctrl-C (or SIGTERM) ends the gate
with a receipt marked `complete: false` that holds every check finished so far."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from appliance.gate import bench, canary, gsm8k, protocol_bench, reasoning, recall, structured
from appliance.gate.battery import checks as battery_checks
from appliance.gate.context import GateContext
from appliance.gate.receipt import finalize, with_check, write
from appliance.gate.receipt_model import Receipt
from appliance.gate.result import CheckInterrupted, CheckResult, utc_now
from appliance.interrupts import sigterm_as_interrupt

CHECK_RUNNERS: dict[str, Callable[[GateContext], CheckResult]] = {
    "bench": bench.run,
    "recall": recall.run,
    "reasoning": reasoning.run,
    "structured": structured.run,
    "gsm8k": gsm8k.run,
    "canary": canary.run,
}
"""Every check the gate can run, by the name --checks uses (sizing.CHECKS lists them in order)."""
CHECK_RULES: dict[str, tuple[str, ...]] = {"recall": recall.RULES, "reasoning": reasoning.RULES,
                                           "canary": canary.RULES}
"""The rule ids each check is evidence for (`appliance rules`); a check not named here cites none."""


def run_check(name: str, ctx: GateContext) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    runner = battery_checks.RUNNERS[name] if ctx.battery is not None else CHECK_RUNNERS[name]
    if name == "bench" and ctx.bench_protocol is not None:
        runner = protocol_bench.run
    try:
        return runner(ctx)
    except CheckInterrupted:
        raise
    except KeyboardInterrupt:
        raise CheckInterrupted(CheckResult(name, "interrupted", "interrupted by Ctrl-C before it finished",
                                           started_at=started, seconds=time.monotonic() - began)) from None
    except Exception as exc:  # one check's crash is that check's error; the gate goes on to the next
        return CheckResult(name, "error", f"{type(exc).__name__}: {exc}", started_at=started,
                           seconds=time.monotonic() - began)


def run_gate(ctx: GateContext, selected: list[str], receipt: Receipt) -> Receipt:
    began = time.monotonic()
    receipt = receipt.model_copy(update={"checks": []})
    write(receipt, ctx.out_dir)
    complete = False
    try:
        with sigterm_as_interrupt():
            for index, name in enumerate(selected, 1):
                ctx.progress.begin(name, index, len(selected))
                try:
                    result = run_check(name, ctx)
                except CheckInterrupted as stop:
                    receipt = with_check(receipt, stop.partial)
                    ctx.progress.end(stop.partial)
                    raise
                receipt = with_check(receipt, result)
                ctx.progress.end(result)
                write(receipt, ctx.out_dir)
            complete = True
    except KeyboardInterrupt:
        ctx.progress.note("interrupted: writing a partial receipt (complete: false)")
    finally:
        # A second Ctrl-C must not cut the last write in half.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            receipt = finalize(receipt, complete=complete, finished_at=utc_now(), duration_s=time.monotonic() - began)
            write(receipt, ctx.out_dir)
        finally:
            signal.signal(signal.SIGINT, previous)
    return receipt
