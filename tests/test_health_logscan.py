"""`appliance logscan` on the REAL CPU smoke-serve logs and on the DeepSeek excerpts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.in_process import CliRun, run_main

LOGS = Path(__file__).parent / "fixtures" / "logs"
DS = LOGS / "deepseek"


def logscan(*args: str | Path) -> CliRun:
    """`appliance logscan ARGS` in-process (tests/in_process.py)."""
    return run_main(["logscan", *map(str, args)], limit_s=60)


def scan_json(*args: str | Path) -> tuple[int, dict]:
    proc = logscan(*args, "--json")
    return proc.returncode, json.loads(proc.stdout)


def test_the_real_cpu_smoke_serve_log_passes_for_the_cpu_smoke_profile():
    rc, out = scan_json(LOGS / "cpu-smoke-serve.log", "--profile", "cpu-smoke")
    assert (rc, out["verdict"]) == (0, "pass"), out["findings"]
    log = out["logs"][0]
    assert log["role"] == "single" and log["log_ready"]
    facts = log["facts"]
    assert facts["kv_device"] == "CPU" and facts["kv_tokens"] >= 2048
    assert facts["runner_fallback_reason"] == "Triton"  # the CPU build's `Model Runner V2 requires Triton`
    assert facts["vllm_version"].startswith("0.")
    assert all("rule" in f for f in out["findings"])


def test_the_clean_stop_of_the_real_cpu_serve_prints_engine_dead_but_is_not_a_failure():
    _, out = scan_json(LOGS / "cpu-smoke-serve.log", "--profile", "cpu-smoke")
    assert [h["id"] for h in out["logs"][0]["fatal_during_shutdown"]] == ["engine-dead"]
    assert not [f for f in out["findings"] if f["name"].startswith("fatal:")]


def test_the_real_cpu_log_of_a_killed_engine_core_fails_k17():
    rc, out = scan_json(LOGS / "cpu-smoke-engine-killed.log", "--profile", "cpu-smoke")
    assert (rc, out["verdict"]) == (1, "fail")
    fatal = {f["name"]: f for f in out["findings"] if f["name"].startswith("fatal:")}
    assert {"fatal:engine-core-exited", "fatal:engine-dead"} <= set(fatal)
    assert {f["rule"] for f in fatal.values()} == {"K17"}


def test_the_real_cpu_log_fails_k5_for_a_profile_that_asked_for_the_v2_runner():
    rc, out = scan_json(LOGS / "cpu-smoke-serve.log", "--profile", "cpu-smoke", "--set", "engine.runner=v2")
    runner = next(f for f in out["findings"] if f["name"] == "runner-v2")
    assert rc == 1 and runner["rule"] == "K5" and runner["status"] == "fail"
    assert "Triton" in runner["detail"]


def test_text_output_names_each_expectation_with_its_k_id_and_the_verdict():
    proc = logscan(DS / "guard-2-of-5.log", "--profile", "gb10-tp2")
    assert proc.returncode == 1
    assert "FAIL    K4   guard-every-manager" in proc.stdout
    assert "fix: " in proc.stdout
    assert proc.stdout.rstrip().endswith("verdict: fail")


def test_guard_zero_with_the_guard_explicitly_zero_passes_and_says_the_warning():
    proc = logscan(DS / "guard-0-of-5.log", "--profile", "gb10-tp2", "--set", "cache.guard=0")
    assert proc.returncode == 0
    assert "warning: the guard is off" in proc.stdout


def test_two_ranks_with_different_nccl_fail_k15_across_ranks():
    rc, out = scan_json(DS / "nccl-mismatch-head.log", DS / "nccl-mismatch-worker.log", "--profile", "gb10-tp2")
    assert (rc, out["verdict"]) == (1, "fail")
    assert [log["role"] for log in out["logs"]] == ["head", "worker"]
    cross = [f for f in out["findings"] if f["name"].startswith("same-on-every-rank:")]
    # NCCL's own banner is compared (every rank prints it); vLLM's `nccl==` line is rank 0's alone: nothing to compare
    assert "same-on-every-rank:nccl_lib_version" in {f["name"] for f in cross}
    assert "same-on-every-rank:nccl_version" not in {f["name"] for f in cross}
    assert all(f["rule"] == "K15" for f in cross)
    assert any("2.27.3" in f["detail"] and "2.30.7" in f["detail"] for f in cross)


def test_a_healthy_head_and_worker_pass_together():
    rc, out = scan_json(DS / "gb10-tp2-dspark-head.log", DS / "gb10-tp2-dspark-worker.log", "--profile", "gb10-tp2")
    assert (rc, out["verdict"]) == (0, "pass"), [f for f in out["findings"] if f["status"] != "pass"]


def test_a_log_that_never_got_ready_fails_with_the_missing_evidence_named():
    rc, out = scan_json(DS / "nccl-mismatch-head.log", "--profile", "gb10-tp2")
    ready = next(f for f in out["findings"] if f["name"] == "log-ready")
    assert rc == 1 and "startup_complete" in ready["detail"]


def test_a_missing_log_or_profile_is_a_usage_error():
    assert logscan(LOGS / "nope.log", "--profile", "cpu-smoke").returncode == 2
    assert logscan(LOGS / "cpu-smoke-serve.log", "--profile", "no-such-profile").returncode == 2


def test_the_first_logs_rank_is_placed_as_every_node_rank_is_flag_over_environment_within_bounds(monkeypatch):
    """--node-rank over APPLIANCE_NODE_RANK (cliargs.placement_from_args), with the flag's own bounds."""
    monkeypatch.setenv("APPLIANCE_NODE_RANK", "1")
    _, out = scan_json(DS / "gb10-tp2-dspark-worker.log", "--profile", "gb10-tp2")
    assert [log["role"] for log in out["logs"]] == ["worker"]
    _, out = scan_json(DS / "gb10-tp2-dspark-head.log", "--profile", "gb10-tp2", "--node-rank", "0")
    assert [log["role"] for log in out["logs"]] == ["head"]
    bad = logscan(DS / "gb10-tp2-dspark-head.log", "--profile", "gb10-tp2", "--node-rank", "99")
    assert bad.returncode == 2 and "--node-rank=99: outside 0-15" in bad.stderr and "Traceback" not in bad.stderr
