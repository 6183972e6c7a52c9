"""W5 and W6 without starting an engine. W6: only a one-rank CPU plan turns V1 multiprocessing off. W5: the CPU
plan turns vLLM's AOT compile off when it compiles, and the log check names a compile cache that failed to load, on
the real logs of two warm starts of the CPU engine (SmolLM2 with torch.compile, the caches of a first start kept): one
under vLLM's default (AOT on: the artefact does not load and the engine compiles again), one under the appliance's
plan (AOT off)."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.channels.capabilities import ENV_AOT_COMPILE, ENV_V1_MULTIPROCESSING
from appliance.profile import load_profile
from appliance.render.plan import build_plan, engine_env, plan_facts
from tests.in_process import run_main

LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_the_cpu_plan_turns_aot_compile_off_only_when_it_compiles() -> None:
    eager = build_plan(load_profile("cpu-smoke").profile)
    compiled = build_plan(load_profile("cpu-smoke", cli_overrides=["engine.enforce_eager=false"]).profile)
    gpu = build_plan(load_profile("rtx-pro-6000-tp2").profile)
    assert ENV_AOT_COMPILE not in eager.env and ENV_AOT_COMPILE not in gpu.env
    assert compiled.env[ENV_AOT_COMPILE] == "0"


def scan(log: str, *sets: str) -> dict:
    args = [a for s in sets for a in ("--set", s)]
    out = run_main(["logscan", str(LOGS / log), "--profile", "cpu-smoke", *args, "--json"], limit_s=60)
    return json.loads(out.stdout)


def w5(result: dict) -> list[dict]:
    return [f for f in result["findings"] if f.get("rule") == "W5"]


def test_a_warm_start_whose_compile_cache_did_not_load_is_named_with_the_engines_reason() -> None:
    result = scan("cpu-smoke-compile-warm-aot-on.log", "engine.enforce_eager=false")
    facts = result["logs"][0]["facts"]
    assert facts["compile_cache_load_failure"] == "'function' object has no attribute 'finalize_loading'"
    assert "compile_cache_saved" in facts  # and it saved a new artefact: it compiled again
    (finding,) = w5(result)
    assert finding["status"] == "fail" and finding["severity"] == "warning"
    assert result["verdict"] == "pass"  # a warning: the serve is healthy, only slow to start


def test_the_appliances_warm_start_loads_its_caches_and_says_nothing() -> None:
    result = scan("cpu-smoke-compile-warm-aot-off.log", "engine.enforce_eager=false")
    facts = result["logs"][0]["facts"]
    assert "compile_cache_load_failure" not in facts and "compile_cache_saved" not in facts
    assert [f["status"] for f in w5(result)] == ["pass"]


def test_only_a_one_rank_cpu_plan_runs_its_worker_inside_the_engine_core() -> None:
    """W6: one rank on the CPU build renders V1 multiprocessing off (its worker then runs in the engine core); every
    plan of several ranks, and every GPU plan, leaves vLLM's process layout alone."""
    def env(name: str, *sets: str) -> dict[str, str]:  # engine_env: what every rank of the plan gets
        profile = load_profile(name, cli_overrides=list(sets)).profile
        return engine_env(profile, plan_facts(profile))

    assert env("cpu-smoke")[ENV_V1_MULTIPROCESSING] == "0"
    assert env("cpu-smoke-canary")[ENV_V1_MULTIPROCESSING] == "0"
    for several in (env("cpu-smoke", "parallel.tensor=2"), env("cpu-smoke", "parallel.pipeline=2"),
                    env("cpu-smoke-2node"), env("cpu-gemma-tp2-2node"), env("rtx-pro-6000-tp2"), env("gb10-tp2")):
        assert ENV_V1_MULTIPROCESSING not in several
