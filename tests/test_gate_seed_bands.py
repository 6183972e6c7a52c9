"""The gate's recall bands and compare's noise rules, held to the seed's figures (issue 15 items 3, 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.gate.compare import bench_finding
from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING, Bands, judge_serves
from appliance.gate.receipt import SCHEMA, verdict
from appliance.gate.receipt_model import Check
from appliance.gate.sizing import params_for
from appliance.profile import load_profile

SEED = Bands()


def test_standard_recall_pass_line_is_18_of_24_with_a_poisoned_ceiling_of_13():
    # Seed: healthy "gate mean 21.67 min 19" / "gate mean 22.00 min 20"; poisoned "mean 11.5 ... floor 3/24",
    # V2 unguarded "mean 10.50 [6,13]".
    r = params_for(load_profile("gb10-tp2").profile).recall
    assert r.min_found * 24 == pytest.approx(18) and r.poisoned_max * 24 == pytest.approx(13)
    assert (PASS_LINE, POISONED_CEILING) == (18 / 24, 13 / 24)


@pytest.mark.parametrize(("found", "band"), [(24, "pass"), (19, "pass"), (18, "pass"), (17, "inconclusive"),
                                             (14, "inconclusive"), (13, "fail"), (11.5, "fail"), (3, "fail")])
def test_a_single_score_falls_into_the_seeds_bands(found: float, band: str):
    assert SEED.judge(found / 24) == band


def test_serves_design_every_healthy_serve_passes_one_poisoned_serve_fails_between_is_inconclusive():
    healthy = [22.3 / 24, 21.7 / 24, 21.7 / 24, 21.0 / 24]  # the seed's V1 serve means
    assert judge_serves(healthy, SEED)[0] == "pass"
    assert judge_serves([*healthy[:3], 11.5 / 24], SEED)[0] == "fail"
    assert judge_serves([*healthy[:3], 16 / 24], SEED)[0] == "inconclusive"
    # "a single clean serve proves nothing at ~50% incidence"
    assert judge_serves(healthy[:1], SEED)[0] == "inconclusive"


def test_receipt_verdict_is_inconclusive_when_recall_sits_between_the_bands():
    checks = [Check(name="bench", status="pass", summary=""), Check(name="recall", status="inconclusive", summary="")]
    assert verdict(checks, complete=True) == "inconclusive"
    assert verdict([*checks, Check(name="structured", status="fail", summary="")], complete=True) == "fail"


def _receipt(tmp_path: Path, name: str, runs_found: list[int]) -> str:
    found = sum(runs_found)
    data = {"schema": SCHEMA, "complete": True, "verdict": "pass", "started_at": "x", "provenance": {},
            "engagement": {}, "checks": [{"name": "recall", "status": "pass", "summary": "",
                                          "params": {"min_found": 18 / 24, "poisoned_max": 13 / 24, "runs": 3},
                                          "metrics": {"found": found, "total": 24 * len(runs_found),
                                                      "runs_found": runs_found, "needles_per_run": 24}}]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_gate_serves_exit_codes_pass_fail_inconclusive(tmp_path: Path, capsys):
    good = [_receipt(tmp_path, f"s{i}", [22, 21, 23]) for i in range(4)]
    assert main(["gate", "serves", *good]) == 0
    poisoned = _receipt(tmp_path, "bad", [12, 11, 3])
    assert main(["gate", "serves", *good[:3], poisoned]) == 1
    middle = _receipt(tmp_path, "mid", [16, 15, 17])
    assert main(["gate", "serves", *good[:3], middle]) == 3
    assert "run more serves" in capsys.readouterr().out


def test_same_build_gated_twice_on_a_noisy_machine_is_unresolved_not_a_regression():
    # Issue 15 item 11: `pp64 60.59 -> 56.38 (-6.9 %)` was called a REGRESSION on the CPU serve; that machine's
    # own run-to-run spread (here 3 % inside each receipt) explains it: 5 x 3 % > 6.9 %.
    noisy_a, noisy_b = [59.7, 60.59, 61.5], [55.5, 56.38, 57.2]
    f = bench_finding("pp64", "pp", 60.59, 56.38, noisy_a, noisy_b)
    assert f.verdict == "unresolved" and "blocked, paired runs" in f.note


def test_a_receipt_without_repeated_runs_cannot_call_a_regression():
    assert bench_finding("pp64", "pp", 60.59, 50.0).verdict == "unresolved"


def test_a_drop_beyond_both_the_band_and_the_spread_is_a_regression():
    assert bench_finding("pp64", "pp", 60.59, 50.0, [60.4, 60.59, 60.8], [49.9, 50.0, 50.1]).verdict == "regression"


def test_cpu_smoke_bench_repeats_its_runs_so_receipts_carry_a_spread():
    assert params_for(load_profile("cpu-smoke").profile).bench.runs >= 3


def test_recall_on_a_fake_serve_18_of_24_is_in_the_healthy_band_16_is_between(tmp_path: Path):
    from appliance.gate import recall
    from tests.test_gate_checks import ctx_for, recaller

    healthy = recall.run(ctx_for("gb10-tp2", recaller({0, 1, 2}), tmp_path))  # 18/24
    assert healthy.metrics["band"] == "pass" and healthy.status == "inconclusive"  # one serve never passes recall
    assert recall.run(ctx_for("gb10-tp2-nospec", recaller({0, 1, 2}), tmp_path)).status == "pass"
    middle = recall.run(ctx_for("gb10-tp2", recaller({0, 1, 2, 3}), tmp_path))  # 16/24
    assert middle.status == "inconclusive" and "run more serves" in middle.summary


# --- K19 (issue 15 item 4) -------------------------------------------------------------------------------------
# Seed: "whenever a request omitted `reasoning`, which is exactly what a stock OpenAI SDK sends";
# "both endpoints accept the same seven spellings"; "`effort: none` disables thinking"; "`high` reasons deeper
# than `low`".

def _reasoning(tmp_path: Path, **broken: bool):
    from appliance.gate import reasoning
    from tests.test_gate_checks import ctx_for, deepseek

    return reasoning.run(ctx_for("gb10-tp2", deepseek(**broken), tmp_path))


def test_k19_probes_a_request_that_omits_the_reasoning_field_on_both_endpoints(tmp_path: Path):
    result = _reasoning(tmp_path, omitted_leaks=True)
    assert result.status == "fail"
    assert "think markup in chat:omitted, responses:omitted" in result.summary
    sent = {r["effort"] for r in result.details["probes"]}
    assert "omitted" in sent


def test_k19_sends_all_seven_effort_spellings_on_both_endpoints():
    from appliance.gate.sizing import ReasoningParams

    assert ReasoningParams().efforts == ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def test_k19_effort_none_that_still_thinks_fails(tmp_path: Path):
    result = _reasoning(tmp_path, none_thinks=True)
    assert result.status == "fail" and "effort none still reasoned" in result.summary


def test_k19_high_that_reasons_no_more_than_low_fails(tmp_path: Path):
    result = _reasoning(tmp_path, flat_effort=True)
    assert result.status == "fail" and "high reasoned no more than low" in result.summary


def test_cpu_smoke_recall_has_a_pass_line_a_poisoned_serve_cannot_meet(tmp_path: Path):
    # Issue 15 item 11: the cpu-smoke pass line was 0 needles, so that check could not fail.
    from appliance.gate import recall
    from tests.test_gate_checks import ctx_for, recaller

    r = params_for(load_profile("cpu-smoke").profile).recall
    assert r.min_found == 6 / 8 and r.poisoned_max == 3 / 8 and r.runs == 3
    healthy = recall.run(ctx_for("cpu-smoke", recaller(set()), tmp_path))
    assert healthy.status == "pass" and healthy.metrics["runs_found"] == [8, 8, 8]
    poisoned = recall.run(ctx_for("cpu-smoke", recaller(set(range(24))), tmp_path))
    assert poisoned.status == "fail" and "poisoned band" in poisoned.summary


# --- item 10: compare engines on what the engine does ----------------------------------------------------------

METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1000.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 5000.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1710.0
"""


def test_bench_reads_mean_acceptance_length_and_verify_steps_from_the_engines_counters():
    from appliance.gate.engine_steps import acceptance, spec_counters, with_verify_steps

    spec = acceptance({}, spec_counters(METRICS))
    assert spec == {"drafts": 1000, "accepted_tokens": 1710, "mean_acceptance_length": 2.71}  # the seed's V2 figure
    rows = with_verify_steps([{"test": "tg128", "kind": "tg", "t_s": 40.65}, {"test": "pp2048", "kind": "pp",
                                                                            "t_s": 2077.0}], 2.71)
    assert rows[0]["verify_steps_s"] == 15.0 and "verify_steps_s" not in rows[1]
    assert acceptance(spec_counters(""), spec_counters("")) is None  # no speculative decoding


def test_compare_says_a_decode_difference_comes_from_acceptance_not_the_engine():
    from tests.test_gate_compare import compare, receipt

    a, b = receipt(tg=40.65), receipt(tg=30.0)
    a["checks"][0]["metrics"]["spec_decode"] = {"mean_acceptance_length": 2.71}
    b["checks"][0]["metrics"]["spec_decode"] = {"mean_acceptance_length": 2.0}
    tg = next(f for f in compare(a, b).findings if f.metric == "tg128")
    assert "verify steps/s 15.0 -> 15.0" in tg.note and "comes from acceptance" in tg.note
    b["checks"][0]["metrics"]["spec_decode"] = {"mean_acceptance_length": 2.71}
    tg = next(f for f in compare(a, b).findings if f.metric == "tg128")
    assert "comes from the engine" in tg.note


# --- the seed's blocked design, runnable: `gate paired` ------------------------------------------------------
# Seed: "10 blocks, both arms inside each node pair, exact sign-flip permutation test, Holm-corrected across the
# six prefill cells".

def test_exact_sign_flip_p_and_holm_match_hand_computed_values():
    from appliance.gate.paired import holm, sign_flip_p

    assert sign_flip_p([0.01] * 10) == 2 / 1024          # only all-plus and all-minus are as extreme
    assert sign_flip_p([0.01, -0.01]) == 1.0
    assert holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]


def test_gate_paired_finds_a_small_consistent_slowdown_a_range_screen_would_miss(tmp_path: Path, capsys):
    from tests.test_gate_compare import receipt

    pairs = []
    for i in range(10):  # block-to-block drift of +-3 %, B always 1 % slower than A inside its block
        drift = 1 + 0.03 * (-1) ** i * (i % 3)
        a, b = receipt(pp=2000.0 * drift), receipt(pp=1980.0 * drift)
        pa, pb = tmp_path / f"a{i}.json", tmp_path / f"b{i}.json"
        pa.write_text(json.dumps(a))
        pb.write_text(json.dumps(b))
        pairs.append(f"{pa}:{pb}")
    assert main(["gate", "paired", *pairs, "--json"]) == 1
    cells = {c["cell"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    assert cells["pp2048"]["verdict"] == "regression" and cells["pp2048"]["p_holm"] < 0.05
    # Decode is reported for the record, never judged (the seed pre-registered tg128 as unresolvable).
    assert cells["tg128"]["verdict"].startswith("for the record") and cells["tg128"]["p_holm"] is None
    assert main(["gate", "paired", "only-one.json"]) == 2


def test_gate_serves_reads_receipts_written_before_the_bands_existed(tmp_path: Path, capsys):
    old = json.loads(Path(_receipt(tmp_path, "old", [3])).read_text())
    old["checks"][0]["params"] = {"min_found": 0.0}  # the cpu-smoke receipts of before: no poisoned_max, no runs
    del old["checks"][0]["metrics"]["runs_found"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert main(["gate", "serves", str(path)]) == 3  # one serve proves nothing; and no traceback
