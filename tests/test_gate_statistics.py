"""Statistics as the seed designed them (issue 21 item 3): two arms of serves by an exact Mann-Whitney U, the
paired test's Holm family = the prefill cells, GSM8K judged by its single-run spread with unknown stderr left
unknown, and one serve's recall never a pass where the race can happen."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.gate.compare import GSM8K_SPREAD
from appliance.gate.compare import gsm8k_finding as typed_gsm8k_finding
from appliance.gate.mannwhitney import mann_whitney, midranks
from appliance.gate.recall_bands import PASS_LINE, V1_UNGUARDED_MEAN, Bands
from appliance.gate.receipt_model import Gsm8kMetrics
from tests.test_gate_seed_bands import _receipt

# The seed, runner arbitration on the fixed tree: "V1 serve means 22.3 / 21.7 / 21.7 / 21.0 ... V2 serve means
# 22.0 / 20.7 / 22.7 / 22.7 ... Mann-Whitney p = 0.697".
V1 = [22.3, 21.7, 21.7, 21.0]
V2 = [22.0, 20.7, 22.7, 22.7]


def test_midranks_share_tied_ranks():
    assert midranks([22.3, 21.7, 21.7, 21.0]) == [4.0, 2.5, 2.5, 1.0]


def test_the_seeds_runner_arms_show_no_difference_by_the_exact_test_on_their_serve_means():
    # Ties are counted exactly (midranks over every split): p = 28/70, the same as scipy's exact permutation test
    # of the U statistic on these values. The seed reports 0.697 (from values it does not print); the conclusion
    # is the same: no measurable difference.
    r = mann_whitney(V1, V2)
    assert (r.u, r.n1, r.n2) == (5.0, 4, 4)
    assert math.isclose(r.p, 28 / 70) and r.p > 0.05


def test_four_serves_per_arm_can_reach_no_p_below_two_in_seventy():
    separated = mann_whitney([22.0, 21.7, 23.0, 22.3], [11.5, 3.0, 10.5, 13.0])
    assert math.isclose(separated.p, 2 / 70) and math.isclose(separated.min_p, 2 / 70)
    # So the seed's p = 0.0043 cannot come from 4 vs 4 serve means: it was computed over more values.
    assert separated.min_p > 0.0043


@pytest.mark.parametrize(("a", "b", "p"), [
    ([1, 2, 3], [4, 5, 6], 2 / 20),            # complete separation, 3 vs 3
    ([1, 2, 3, 4], [5, 6, 7, 8, 9], 2 / 126),  # 4 vs 5
    ([1, 3, 5], [2, 4, 6], 14 / 20),            # interleaved: U = 3, P(U <= 3) = 7/20, doubled
])
def test_exact_p_values_that_can_be_counted_by_hand(a, b, p):
    assert math.isclose(mann_whitney(a, b).p, p)


def _arm(tmp_path: Path, name: str, means: list[float]) -> list[str]:
    """One receipt per serve whose 3 runs average to `mean` needles of 24."""
    out = []
    for i, mean in enumerate(means):
        total = round(mean * 3)
        runs = [total // 3 + (1 if k < total % 3 else 0) for k in range(3)]
        out.append(_receipt(tmp_path, f"{name}{i}", runs))
    return out


def test_gate_serves_against_a_reference_arm_says_no_difference_for_the_seeds_runner_arms(tmp_path, capsys):
    v1, v2 = _arm(tmp_path, "v1-", V1), _arm(tmp_path, "v2-", V2)
    assert main(["gate", "serves", *v2, "--against", *v1, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "no measurable difference" and math.isclose(result["p"], 0.4, abs_tol=1e-4)
    assert result["a"]["verdict"] == result["b"]["verdict"] == "pass"  # both arms healthy, 4 serves each


def test_a_poisoned_arm_against_a_guarded_one_is_a_regression_exit_1(tmp_path, capsys):
    guarded = _arm(tmp_path, "on-", [22.0, 21.7, 23.0, 22.3])
    unguarded = _arm(tmp_path, "off-", [11.5, 3.0, 10.5, 13.0])
    assert main(["gate", "serves", *unguarded, "--against", *guarded]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "0.0286" in out
    assert main(["gate", "serves", *guarded, "--against", *unguarded]) == 0  # the improvement direction


def test_two_serves_per_arm_cannot_resolve_anything_and_says_so(tmp_path, capsys):
    a, b = _arm(tmp_path, "a-", [22.0, 21.0]), _arm(tmp_path, "b-", [12.0, 11.0])
    assert main(["gate", "serves", *b, "--against", *a, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "unresolved" and "never below 0.05" in result["reason"]


# --- the paired test's Holm family --------------------------------------------------------------------------

def test_decode_cells_neither_get_a_verdict_nor_widen_the_prefill_correction(tmp_path, capsys):
    from tests.test_gate_compare import receipt

    pairs = []
    for i in range(10):  # B 1 % slower on prefill AND 20 % slower on decode, both consistently
        drift = 1 + 0.03 * (-1) ** i * (i % 3)
        a = receipt(pp=2000.0 * drift, ctx_pp=2100.0 * drift, tg=40.0 * drift)
        b = receipt(pp=1980.0 * drift, ctx_pp=2079.0 * drift, tg=32.0 * drift)
        pa, pb = tmp_path / f"a{i}.json", tmp_path / f"b{i}.json"
        pa.write_text(json.dumps(a))
        pb.write_text(json.dumps(b))
        pairs.append(f"{pa}:{pb}")
    assert main(["gate", "paired", *pairs, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    cells = {c["cell"]: c for c in result["cells"]}
    assert result["holm_family"] == ["ctx_pp @ d8192", "pp2048"]
    # Two cells in the family, both at the smallest p (2/1024): Holm doubles it, not quadruples it.
    for cell in ("pp2048", "ctx_pp @ d8192"):
        assert cells[cell]["p"] == pytest.approx(2 / 1024, abs=1e-5)
        assert cells[cell]["p_holm"] == pytest.approx(2 * 2 / 1024, abs=1e-5)
    assert {cells[c]["verdict"] for c in ("pp2048", "ctx_pp @ d8192")} == {"regression"}
    for tg in ("tg128", "tg128 @ d8192"):
        assert cells[tg]["verdict"].startswith("for the record") and cells[tg]["p_holm"] is None
        assert cells[tg]["p"] < 0.01 and cells[tg]["mean_change"] < -0.15  # measured, shown, not judged


def gsm8k_finding(a: dict, b: dict):
    return typed_gsm8k_finding(Gsm8kMetrics.model_validate(a), Gsm8kMetrics.model_validate(b))


# --- GSM8K --------------------------------------------------------------------------------------------------

def test_a_gsm8k_difference_within_the_seeds_single_run_spread_is_noise():
    # The seed: "The GSM8K difference (1.06 pp flexible / ...) is within this gate's measured single-run spread".
    assert pytest.approx(0.011) == GSM8K_SPREAD
    assert gsm8k_finding({"strict_match": 0.960}, {"strict_match": 0.950}).verdict == "noise"


def test_a_missing_gsm8k_stderr_is_unknown_not_zero():
    # Before: a missing stderr counted as 0, so any difference beyond nothing was a "regression".
    f = gsm8k_finding({"strict_match": 0.96}, {"strict_match": 0.94})
    assert f.verdict == "unresolved" and "no stderr" in f.note and "--gsm8k-runs 3" in f.note
    known = gsm8k_finding({"strict_match": 0.96, "strict_match_stderr": 0.005},
                          {"strict_match": 0.94, "strict_match_stderr": 0.005})
    assert known.verdict == "regression"


def test_three_runs_per_cell_that_interleave_are_noise_and_separated_ones_a_difference():
    # The seed: "three runs per cell were collected and the arms interleave, so it was noise".
    a = {"strict_match": 0.958, "strict_match_runs": [0.951, 0.960, 0.963]}
    b = {"strict_match": 0.946, "strict_match_runs": [0.940, 0.943, 0.955]}
    assert gsm8k_finding(a, b).verdict == "noise" and "interleave" in gsm8k_finding(a, b).note
    worse = {"strict_match": 0.930, "strict_match_runs": [0.925, 0.930, 0.935]}
    assert gsm8k_finding(a, worse).verdict == "regression"


def test_gsm8k_runs_combine_into_a_mean_keeping_each_run_and_an_unknown_stderr_unknown():
    from appliance.gate.gsm8k import combine_runs

    runs = [{"strict_match": 0.95, "strict_match_stderr": 0.006, "flexible_extract": 0.96,
             "flexible_extract_stderr": None},
            {"strict_match": 0.97, "strict_match_stderr": 0.006, "flexible_extract": 0.96,
             "flexible_extract_stderr": None}]
    out = combine_runs(runs)
    assert out["strict_match"] == 0.96 and out["strict_match_runs"] == [0.95, 0.97]
    assert out["strict_match_stderr"] == pytest.approx(math.sqrt(2 * 0.006**2) / 2, abs=1e-4)
    assert out["flexible_extract_stderr"] is None


# --- recall -------------------------------------------------------------------------------------------------

def test_v1_unguarded_is_in_the_healthy_band_which_is_why_the_guard_is_read_back_too():
    # The seed: "the guard lifts V1 from 20.7 to 23.0" -- the same defect, above the pass line.
    assert Bands().judge(V1_UNGUARDED_MEAN) == "pass" and V1_UNGUARDED_MEAN >= PASS_LINE


def test_arms_past_the_exact_test_s_bound_are_refused_with_exit_2_not_a_traceback(tmp_path, capsys):
    a, b = _arm(tmp_path, "a-", [22.0] * 12), _arm(tmp_path, "b-", [12.0] * 12)  # C(24, 12) = 2,704,156 splits
    assert main(["gate", "serves", *b, "--against", *a]) == 2
    err = capsys.readouterr().err
    assert "--against" in err and "12 vs 12 serves" in err and "at most 11 serves per arm" in err
