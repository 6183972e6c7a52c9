"""The bench check under `gate --bench-protocol NAME`: one llama-benchy run per step of the planned protocol
(gate/protocol.py), their rows in one check, each row tagged with its step. What the anchor's shape was and how
this run's differs lives in the receipt's `bench_protocol` section; the rows here are what was measured."""

from __future__ import annotations

import time
from typing import Any

from appliance.gate import bench, engine_steps
from appliance.gate.context import GateContext
from appliance.gate.protocol import ProtocolRun
from appliance.gate.result import CheckInterrupted, CheckResult, GateStatus, utc_now
from appliance.gate.tools import install_hint
from appliance.jsonstrict import JsonObject
from appliance.paths import venv_executable


def _params(run: ProtocolRun, corpus: JsonObject) -> JsonObject:
    return {"protocol": run.name, "scaled": run.scaled,
            "steps": [{"id": s.id, "pp": list(s.params.pp), "tg": list(s.params.tg), "depth": list(s.params.depth),
                       "concurrency": list(s.params.concurrency), "runs": s.params.runs,
                       "prefix_caching": s.params.prefix_caching, "no_cache": s.params.no_cache,
                       "exact_tg": s.params.exact_tg, "extra_body": list(s.params.extra_body)} for s in run.steps],
            **corpus}


def _summary(run: ProtocolRun, rows: list[JsonObject]) -> str:
    figured = {r.test for r in run.rows if r.figures}
    shown = [f"{r['test']} {r['t_s']:.1f} t/s" for r in rows if r["test"] in figured and r.get("t_s") is not None]
    scaled = " (scaled for the CPU serve)" if run.scaled else ""
    return f"protocol {run.name}{scaled}: {', '.join(shown) or 'no anchor row measured'} ({len(rows)} rows)"


def run(ctx: GateContext) -> CheckResult:
    planned = ctx.bench_protocol
    assert planned is not None  # runner.run_check routes here only for --bench-protocol
    started, began = utc_now(), time.monotonic()
    corpus: JsonObject = {}

    def result(status: GateStatus, summary: str, rows: list[JsonObject], spec: Any,
               steps: list[JsonObject]) -> CheckResult:
        return CheckResult("bench", status, summary, started_at=started, seconds=time.monotonic() - began,
                           params=_params(planned, corpus), metrics={"rows": rows, "spec_decode": spec},
                           details={"steps": steps})

    exe = venv_executable("llama-benchy")
    if exe is None:
        return result("unavailable", f"llama-benchy is not installed here ({install_hint('llama-benchy')})", [], None,
                      [])
    before = engine_steps.scrape(ctx.url)
    rows: list[JsonObject] = []
    steps: list[JsonObject] = []
    problem: tuple[GateStatus, str] | None = None
    for step in planned.steps:
        ctx.progress.step(f"protocol {planned.name}: step {step.id}")
        done = bench.invoke(ctx, step.params, exe, stem=f"llama-benchy-{step.id}")
        corpus = done.about
        rows += [{**r, "step": step.id} for r in done.rows]
        raw = done.raw or {}
        steps.append({"id": step.id, "argv": done.cmd, "llama_benchy_version": raw.get("version"),
                      "latency_mode": raw.get("latency_mode"), "latency_ms": raw.get("latency_ms")})
        if done.interrupted:
            spec = engine_steps.acceptance(before, engine_steps.scrape(ctx.url))
            raise CheckInterrupted(result("interrupted", f"interrupted in step {step.id}; {len(rows)} row(s) "
                                                         "measured before Ctrl-C", rows, spec, steps))
        failed = bench.failure(done)
        if failed:
            problem = (failed[0], f"step {step.id}: {failed[1]}")
            break
    spec = engine_steps.acceptance(before, engine_steps.scrape(ctx.url))
    rows = engine_steps.with_verify_steps(rows, spec["mean_acceptance_length"] if spec else None)
    if problem:
        return result(problem[0], problem[1], rows, spec, steps)
    missing = sorted({r.test for r in planned.rows if r.figures} - {r["test"] for r in rows if r.get("t_s")})
    if missing:
        return result("error", f"llama-benchy measured no {', '.join(missing)}: the protocol's rows beside an anchor "
                               "figure", rows, spec, steps)
    return result("pass", _summary(planned, rows), rows, spec, steps)
