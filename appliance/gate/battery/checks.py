"""The seed battery's checks against a serve, one function per check id, each a receipt line with its evidence.

Every check ends PASS, FAIL or TIMEOUT (`pass`, `fail`, `timeout`): a check that could not measure (no exporter,
no lm-eval, no reference figure) is a FAIL that says why, never a skip. Each runs under the battery's time bound,
as the harness bounds its suites ("An unbounded check in a sequential chain does not fail -- it stops everything
after it, which is worse than failing").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from appliance.apikey import api_headers
from appliance.gate import bench, gsm8k
from appliance.gate.battery import coherence, instruction, needles
from appliance.gate.battery.run_context import BatteryRun
from appliance.gate.battery.sizing import CoherenceParams
from appliance.gate.client import ServeError, get_json
from appliance.gate.context import GateContext
from appliance.gate.result import CheckResult, GateStatus, utc_now
from appliance.jsonstrict import JsonObject

if TYPE_CHECKING:
    from appliance.health.monitor import StatusJson


def _run(ctx: GateContext) -> BatteryRun:
    assert ctx.battery is not None, "a battery check runs only under gate --battery"
    return ctx.battery


def _line(ctx: GateContext, check_id: str, status: GateStatus, evidence: str, started: str, began: float,
          **more: Any) -> CheckResult:
    b = _run(ctx)
    spec = b.battery.check(check_id)
    assert spec is not None
    params = {"title": spec.title, "pass_line": spec.pass_line, "arm": spec.arm, "battery": b.battery.name,
              "size": b.params.size, **more.pop("params", {})}
    return CheckResult(check_id, status, evidence, params=params, started_at=started,
                       seconds=time.monotonic() - began, **more)


def _bounded(ctx: GateContext, check_id: str, make: Callable[[], Coroutine[Any, Any, CheckResult]]) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    limit = _run(ctx).params.check_timeout_s
    try:
        return asyncio.run(asyncio.wait_for(make(), limit))
    except TimeoutError:
        return _line(ctx, check_id, "timeout", f"no result within the battery's bound of {limit:.0f} s", started,
                     began)


def _status(ctx: GateContext) -> tuple[StatusJson | None, str]:
    url = _run(ctx).exporter
    if not url:
        return None, "no health exporter to read the serve's log back from"
    try:
        return get_json(f"{url.rstrip('/')}/status", to_serve=False), ""
    except ServeError as exc:
        return None, f"the health exporter did not answer ({exc})"


# --- C1: the serve ------------------------------------------------------------------------------------------

def c1_boots(ctx: GateContext) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    p = ctx.profile
    said = f"profile {p.name}: runner {p.engine.runner}, guard {p.cache.guard}"
    try:
        code = httpx.get(f"{ctx.url}/health", timeout=10, trust_env=False, headers=api_headers()).status_code
    except httpx.HTTPError as exc:
        return _line(ctx, "C1", "fail", f"/health did not answer: {type(exc).__name__}: {exc} ({said})", started,
                     began)
    if code != 200:
        return _line(ctx, "C1", "fail", f"/health answered HTTP {code} ({said})", started, began)
    return _line(ctx, "C1", "pass", f"healthy ({said})", started, began)


# --- C2-C4, D1, D2: read back from the serve's log ----------------------------------------------------------

def _facts_line(ctx: GateContext, check_id: str, judge: Callable[[JsonObject], tuple[bool, str]]) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    status, why = _status(ctx)
    if status is None:
        return _line(ctx, check_id, "fail", f"not read: {why}", started, began)
    facts = status.get("facts") or {}
    ok, evidence = judge(facts)
    return _line(ctx, check_id, "pass" if ok else "fail", evidence, started, began,
                 metrics={k: facts.get(k) for k in ("runner_v2", "runner_fallback_reason", "guard_active",
                                                    "guard_total", "guard_managers", "python_name_errors")})


def _guard(facts: JsonObject) -> str | None:
    active, total = facts.get("guard_active"), facts.get("guard_total")
    if not isinstance(active, int) or not isinstance(total, int):
        return None
    managers = f" ({facts['guard_managers']})" if facts.get("guard_managers") else ""
    return f"Same-step ghost-block guard: {active}/{total} managers active{managers}"


def c2_runner(ctx: GateContext) -> CheckResult:
    def judge(facts: JsonObject) -> tuple[bool, str]:
        if facts.get("runner_v2"):
            return True, "Using V2 Model Runner"
        reason = facts.get("runner_fallback_reason")
        return False, "no V2 banner" + (f" (the log: Model Runner V2 {reason}; using V1)" if reason else "")
    return _facts_line(ctx, "C2", judge)


def c3_guard(ctx: GateContext) -> CheckResult:
    def judge(facts: JsonObject) -> tuple[bool, str]:
        line = _guard(facts)
        if line is None:
            return False, "no guard line at all"
        ok = facts["guard_active"] == facts["guard_total"] >= 2
        return ok, line
    return _facts_line(ctx, "C3", judge)


def c4_name_errors(ctx: GateContext) -> CheckResult:
    def judge(facts: JsonObject) -> tuple[bool, str]:
        n = facts.get("python_name_errors")
        if not isinstance(n, int):
            return False, "not counted: this exporter reports no python_name_errors fact"
        return n == 0, f"{n} occurrences"
    return _facts_line(ctx, "C4", judge)


def d1_v1(ctx: GateContext) -> CheckResult:
    def judge(facts: JsonObject) -> tuple[bool, str]:
        guard = _guard(facts) or "no guard line"
        if facts.get("runner_v2"):
            return False, f"V2 banner present; {guard}"
        return True, f"no V2 banner; {guard}"
    return _facts_line(ctx, "D1", judge)


def d2_noguard(ctx: GateContext) -> CheckResult:
    unguarded = _run(ctx).unguarded_channel

    def judge(facts: JsonObject) -> tuple[bool, str]:
        line = _guard(facts)
        if line is None:
            return False, ("no line" if unguarded is None else
                           f"no line: channel {unguarded} has no same-step ghost-block guard to turn off (K4)")
        return facts["guard_active"] == 0, line
    return _facts_line(ctx, "D2", judge)


# --- C5, C6, D*-c1: the coherence gate ----------------------------------------------------------------------

def _coherence(ctx: GateContext, check_id: str, p: CoherenceParams) -> CheckResult:
    async def make() -> CheckResult:
        started, began = utc_now(), time.monotonic()
        result = await coherence.run(ctx, p)
        shown = " ".join(f"passed={n}/{result['total']}" for n in result["passed"])
        if p.min_passed is None:
            ok = all(n == result["total"] for n in result["passed"])
            evidence = shown
        else:
            worst = min(result["passed"])
            ok = worst >= p.min_passed
            evidence = f"{shown} (min {worst}, band 19-24)" if ok else f"{shown} (min {worst})"
        failures = [row["why"] for rows in result["rows"] for row in rows if not row["passed"]]
        if failures and not ok:
            evidence += f"; first failure: {failures[0][:160]}"
        return _line(ctx, check_id, "pass" if ok else "fail", evidence, started, began,
                     params={"line_count": result["line_count"], "concurrency": p.concurrency, "repeat": p.repeat,
                             "runs": p.runs, "max_tokens": p.max_tokens, "min_passed": p.min_passed,
                             "prompt_tokens": result["prompt_tokens"], "prompt_sha256": result["prompt_sha256"]},
                     metrics={"passed": result["passed"], "total": result["total"]},
                     details={"rows": result["rows"]})
    return _bounded(ctx, check_id, make)


def c5_arthur_c12(ctx: GateContext) -> CheckResult:
    return _coherence(ctx, "C5", _run(ctx).params.arthur_c12)


def c6_arthur_c1(ctx: GateContext) -> CheckResult:
    return _coherence(ctx, "C6", _run(ctx).params.arthur_c1)


def d1_c1(ctx: GateContext) -> CheckResult:
    return _coherence(ctx, "D1-c1", _run(ctx).params.arthur_c1)


def d2_c1(ctx: GateContext) -> CheckResult:
    return _coherence(ctx, "D2-c1", _run(ctx).params.arthur_c1)


# --- C7: instruction following ------------------------------------------------------------------------------

C7_DIFFERENCE = ("sends the appliance's own request in the shape of the harness's issue19 gate, not the reporter's "
                 "request the harness sends (issue19_aqua001_request.json): that is another project's text, which "
                 "the appliance does not ship, and fetching it at gate time at a pinned commit is not built yet")


def c7_instruction(ctx: GateContext) -> CheckResult:
    async def make() -> CheckResult:
        started, began = utc_now(), time.monotonic()
        p = _run(ctx).params.instruction
        result = await instruction.run(ctx, p)
        return _line(ctx, "C7", "pass" if result["passed"] else "fail", result["why"], started, began,
                     params={"max_tokens": p.max_tokens, "differs_from_harness": [C7_DIFFERENCE]}, details=result)
    return _bounded(ctx, "C7", make)


# --- C8: GSM8K through lm-eval ------------------------------------------------------------------------------

def c8_gsm8k(ctx: GateContext) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    p = _run(ctx).params.gsm8k
    r = gsm8k.run(replace(ctx, params=replace(ctx.params, gsm8k=p)))
    strict = r.metrics.get("strict_match")
    if r.details.get("timed_out"):
        status: GateStatus = "timeout"
        evidence = r.summary
    elif r.status in ("pass", "fail"):
        status, evidence = r.status, (f"{strict:.4f}" if isinstance(strict, float) else "none") + f" ({r.summary})"
    else:
        status, evidence = "fail", f"none: not measured ({r.summary})"
    return _line(ctx, "C8", status, evidence, started, began, params=r.params, metrics=r.metrics, details=r.details)


# --- C9: multi-needle ---------------------------------------------------------------------------------------

def c9_multi_needle(ctx: GateContext) -> CheckResult:
    async def make() -> CheckResult:
        started, began = utc_now(), time.monotonic()
        p = _run(ctx).params.needles
        rows = await needles.run(ctx, p)
        full = sum(1 for r in rows if not r.get("error") and r.get("needles_hit") == r.get("needles_total"))
        leaked = sum(1 for r in rows if r.get("leaked"))
        failed = sum(1 for r in rows if r.get("error") or r.get("truncated"))
        ok = bool(rows) and all(needles.row_passes(r) for r in rows)
        hit = sum(r.get("needles_hit", 0) for r in rows)
        total = len(rows) * p.needles
        evidence = (f"{len(rows)} rows all {p.needles}/{p.needles}, leaks 0, 0 failed ({hit}/{total})" if ok else
                    f"{full} rows {p.needles}/{p.needles}, {leaked} leaked, {failed} FAILED ({hit}/{total})")
        window = next((r["error"] for r in rows if r.get("window")), None)
        if window:
            evidence += f"; {window[:160]}"
        return _line(ctx, "C9", "pass" if ok else "fail", evidence, started, began,
                     params={"line_counts": list(p.line_counts), "needles": p.needles, "distractors": p.distractors,
                             "repeats": p.repeats, "seed": p.seed, "max_tokens": p.max_tokens},
                     metrics={"rows": len(rows), "rows_full": full, "leaked_rows": leaked, "failed_rows": failed,
                              "needles_hit": hit, "needles_total": total},
                     details={"rows": rows})
    return _bounded(ctx, "C9", make)


# --- C10: prefill against the reference arm ------------------------------------------------------------------

def judge_reference(value: float | None, reference: float | None, tolerance: float) -> tuple[bool, str]:
    if value is None:
        return False, "no row measured"
    if reference is None:
        return False, f"{value:.1f} t/s measured; no reference figure for this hardware (give --bench-reference)"
    ok = abs(value / reference - 1) <= tolerance
    return ok, f"{value:.1f} ({'' if ok else 'vs '}reference {reference:.1f}, +/-{tolerance * 100:.0f} %)"


def c10_prefill(ctx: GateContext) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    b = _run(ctx)
    p = b.params
    r = bench.run(replace(ctx, params=replace(ctx.params, bench=p.bench)))
    row = next((x for x in r.metrics.get("rows") or [] if x.get("test") == p.bench_row), None)
    value = row.get("t_s") if row else None
    ok, evidence = judge_reference(value, b.reference, p.bench_tolerance)
    status: GateStatus = "pass" if ok else "fail"
    if r.details.get("timed_out"):
        status, evidence = "timeout", r.summary
    elif r.status not in ("pass",) and value is None:
        evidence = f"no {p.bench_row} row parsed from llama-benchy ({r.summary})"
    return _line(ctx, "C10", status, evidence, started, began,
                 params={**r.params, "row": p.bench_row, "reference": b.reference,
                         "reference_source": b.reference_source, "tolerance": p.bench_tolerance,
                         "differs_from_harness": c10_differences(ctx, r.details.get("llama_benchy_version"))},
                 metrics=r.metrics, details=r.details)


HARNESS_BENCH_MAX_MODEL_LEN = 49152
HARNESS_LLAMA_BENCHY = "git b220b7c9cae7af2d6bd9ebf6bfa9ac066cb40780 (eugr/llama-benchy)"
"""The harness's C10 (scripts/run_gb10_llama_benchy_standard.sh): a fresh benchmark-standard serve at mml 49152,
prewarmed, benched by llama-benchy run from that git commit."""


def c10_differences(ctx: GateContext, benchy_version: str | None) -> list[str]:
    """Where this C10 is not the harness's: it benches the battery's serve (the appliance starts no serve), the
    llama-benchy installed from the lock (a git commit cannot be installed from the package index)."""
    out = ["benches the battery's own serve, not a fresh benchmark-standard serve with the harness's prewarm "
           "(the gate starts no serve; start one at the standard and run C10's arm on it to match)"]
    mml = ctx.profile.limits.max_model_len
    if mml != HARNESS_BENCH_MAX_MODEL_LEN:
        out.append(f"serve max_model_len {mml}, the harness's bench standard {HARNESS_BENCH_MAX_MODEL_LEN}")
    out.append(f"llama-benchy {benchy_version or 'of the lock'} from the package index, the harness's "
               f"{HARNESS_LLAMA_BENCHY}")
    return out


RUNNERS: dict[str, Callable[[GateContext], CheckResult]] = {
    "C1": c1_boots, "C2": c2_runner, "C3": c3_guard, "C4": c4_name_errors, "C5": c5_arthur_c12,
    "C6": c6_arthur_c1, "C7": c7_instruction, "C8": c8_gsm8k, "C9": c9_multi_needle, "C10": c10_prefill,
    "D1": d1_v1, "D1-c1": d1_c1, "D2": d2_noguard, "D2-c1": d2_c1,
}
"""Every check of the seed battery the appliance runs, by id (definition.SEED lists them with their arms)."""
