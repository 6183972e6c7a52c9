"""`gate compare` on receipts built to differ by noise and by real shifts (the seed's noise rules)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from appliance.cli import main
from appliance.gate.compare import PAIRED, ReceiptComparison, bench_finding, recall_finding
from appliance.gate.compare import compare as compare_receipts
from appliance.gate.receipt import SCHEMA
from appliance.gate.receipt_model import validate_receipt


def compare(a: dict[str, Any], b: dict[str, Any]) -> ReceiptComparison:
    """The receipts as `gate compare` reads them (typed by the schema), compared."""
    return compare_receipts(validate_receipt(a, "A"), validate_receipt(b, "B"))


def runs(mean: float, spread: float = 0.002) -> list[float]:
    """Three llama-benchy runs around `mean`, (max - min) / mean = `spread` (GB10-like: tight)."""
    return [mean * (1 - spread / 2), mean, mean * (1 + spread / 2)]


def receipt(tg: float = 40.0, pp: float = 2077.0, ctx_pp: float = 2100.0, found: int = 23, guard: str = "5/5",
            profile: str = "gb10-tp2", digest: str = "p" * 64, lock: str = "l" * 64) -> dict[str, Any]:
    rows = [
        {"test": "pp2048", "kind": "pp", "t_s": pp, "t_s_std": 3.0, "values": runs(pp)},
        {"test": "tg128", "kind": "tg", "t_s": tg, "t_s_std": 0.2, "values": runs(tg)},
        {"test": "ctx_pp @ d8192", "kind": "ctx_pp", "t_s": ctx_pp, "t_s_std": 4.0, "values": runs(ctx_pp)},
        {"test": "tg128 @ d8192", "kind": "tg", "t_s": tg, "t_s_std": 0.3, "values": runs(tg)},
    ]
    return {
        "schema": SCHEMA, "complete": True, "verdict": "pass", "started_at": "2026-08-09T10:00:00Z", "size": "standard",
        "provenance": {"profile": {"name": profile, "digest": digest}, "lock_digest": lock,
                       "engine": {"version": "0.19.1rc1.dev5"}},
        "engagement": {"available": True, "guard": guard, "runner": "v2", "sm120_decode": True, "fatal": [],
                       "expectations": [{"rule": "K4", "name": "guard-every-manager", "status": "pass",
                                         "detail": "5/5"}]},
        "checks": [
            {"name": "bench", "status": "pass", "summary": "", "params": {"corpus": "default"},
             "metrics": {"rows": rows}},
            {"name": "recall", "status": "pass", "summary": "", "params": {"min_found": 22 / 24},
             "metrics": {"found": found, "total": 24}},
            {"name": "structured", "status": "pass", "summary": "", "metrics": {"valid": 8, "total": 8}},
        ],
    }


def verdicts(a: dict, b: dict) -> dict[str, str]:
    return {f"{f.area} {f.metric}": f.verdict for f in compare(a, b).findings}


def test_identical_receipts_have_no_regression():
    result = compare(receipt(), receipt())
    assert not result.regressions and not result.warnings


def test_tg_ten_percent_slower_is_unresolved_with_the_seeds_blocked_run_advice():
    result = compare(receipt(tg=40.0), receipt(tg=36.0))
    assert not result.regressions
    tg = next(f for f in result.findings if f.metric == "tg128")
    assert tg.verdict == "unresolved" and tg.note.endswith(PAIRED) and tg.change == "-10.0 %"
    # Seed: "10 blocks, both arms inside each node pair, exact sign-flip permutation test, Holm-corrected".
    assert "blocked, paired runs" in PAIRED and "10 blocks" in PAIRED
    assert "exact sign-flip permutation test" in PAIRED and "Holm" in PAIRED


def test_tg_thirty_percent_slower_is_a_regression():
    v = verdicts(receipt(tg=40.0), receipt(tg=28.0))
    assert v["bench tg128"] == v["bench tg128 @ d8192"] == "regression"


def test_prefill_one_percent_slower_is_unresolved():
    v = verdicts(receipt(pp=2077.0, ctx_pp=2100.0), receipt(pp=2056.2, ctx_pp=2079.0))
    assert v["bench pp2048"] == v["bench ctx_pp @ d8192"] == "unresolved"


def test_prefill_five_percent_slower_is_a_regression():
    v = verdicts(receipt(pp=2077.0, ctx_pp=2100.0), receipt(pp=1973.0, ctx_pp=1995.0))
    assert v["bench pp2048"] == v["bench ctx_pp @ d8192"] == "regression"


def test_large_gains_are_improvements_not_regressions():
    result = compare(receipt(tg=30.0, pp=2000.0), receipt(tg=40.0, pp=2100.0))
    assert not result.regressions
    v = verdicts(receipt(tg=30.0, pp=2000.0), receipt(tg=40.0, pp=2100.0))
    assert v["bench tg128"] == v["bench pp2048"] == "improvement" and v["bench ctx_pp @ d8192"] == "same"


@pytest.mark.parametrize(("kind", "a", "b", "expected"), [
    ("tg", 40.0, 34.1, "unresolved"),   # -14.75 %: under the ~15 % tg band
    ("tg", 40.0, 33.9, "regression"),   # -15.25 %
    ("ctx_tg", 40.0, 35.0, "unresolved"),
    ("pp", 1000.0, 981.0, "unresolved"),  # -1.9 %
    ("ctx_pp", 1000.0, 970.0, "regression"),
])
def test_bench_bands_per_kind(kind: str, a: float, b: float, expected: str):
    assert bench_finding("x", kind, a, b, runs(a), runs(b)).verdict == expected


def test_recall_falling_from_23_to_11_of_24_is_a_regression():
    assert verdicts(receipt(found=23), receipt(found=11))["recall needles found"] == "regression"


def test_recall_moving_inside_the_healthy_band_is_noise():
    assert verdicts(receipt(found=24), receipt(found=22))["recall needles found"] == "noise"
    assert recall_finding(22, 24, 23, 24, 18 / 24).verdict == "noise"


def test_recall_19_of_24_is_healthy_not_a_regression():
    # Seed: healthy guarded serves "gate mean 21.67 min 19" / "gate mean 22.00 min 20".
    assert recall_finding(23, 24, 19, 24, 18 / 24, 13 / 24).verdict == "noise"


def test_recall_between_the_bands_is_inconclusive_never_a_regression():
    f = recall_finding(23, 24, 16, 24, 18 / 24, 13 / 24)
    assert f.verdict == "inconclusive" and "run more serves" in f.note


def test_guard_dropping_from_five_to_two_managers_is_a_regression():
    assert verdicts(receipt(guard="5/5"), receipt(guard="2/5"))["engagement K4 guard managers active"] == "regression"


def test_an_expectation_now_failing_and_a_new_fatal_line_are_regressions():
    b = receipt()
    b["engagement"]["expectations"][0]["status"] = "fail"
    b["engagement"]["fatal"] = [{"id": "illegal-memory-access", "rule": "K17"}]
    v = verdicts(receipt(), b)
    assert v["engagement K4 guard-every-manager"] == "regression"
    assert v["engagement fatal signatures"] == "regression"


def test_one_invalid_structured_reply_is_a_regression():
    b = receipt()
    b["checks"][2].update(status="fail", metrics={"valid": 7, "total": 8})
    v = verdicts(receipt(), b)
    assert v["structured valid replies"] == v["check structured status"] == "regression"


def test_different_profile_or_lock_is_compared_with_a_not_like_for_like_warning():
    result = compare(receipt(), receipt(profile="rtx-pro-6000-tp2", digest="q" * 64, lock="m" * 64))
    assert sum("not like-for-like" in w for w in result.warnings) == 2
    assert not result.regressions


def test_incomplete_receipt_is_flagged_and_missing_checks_are_not_comparable():
    b = receipt()
    b["complete"] = False
    b["checks"] = b["checks"][:1]
    result = compare(receipt(), b)
    assert any("incomplete" in w for w in result.warnings)
    assert {f.verdict for f in result.findings if f.area == "check"} == {"not comparable"}


def _write(tmp_path: Path, name: str, data: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_cli_exit_codes_zero_on_noise_one_on_regression_two_on_bad_input(tmp_path, capsys):
    a = _write(tmp_path, "a.json", receipt())
    noise = _write(tmp_path, "noise.json", receipt(tg=36.0, pp=2060.0))
    shift = _write(tmp_path, "shift.json", receipt(tg=28.0))
    assert main(["gate", "compare", a, noise]) == 0
    out = capsys.readouterr().out
    assert "UNRESOLVED" in out and "blocked, paired runs" in out and "no regression" in out
    assert "REGRESSION" not in out
    assert main(["gate", "compare", a, shift]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["gate", "compare", a, str(tmp_path / "missing.json")]) == 2
    not_receipt = _write(tmp_path, "other.json", {"schema": "something-else"})
    assert main(["gate", "compare", a, not_receipt]) == 2
    assert "not a gate receipt" in capsys.readouterr().err


def test_cli_json_output_lists_findings(tmp_path, capsys):
    a = _write(tmp_path, "a.json", receipt())
    b = _write(tmp_path, "b.json", receipt(guard="2/5"))
    assert main(["gate", "compare", a, b, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["regression"] is True
    assert any(f["metric"] == "K4 guard managers active" for f in data["findings"])


def test_compare_does_not_mutate_its_inputs():
    a, b = receipt(), receipt(tg=20.0)
    before = copy.deepcopy((a, b))
    compare(a, b)
    assert (a, b) == before
    typed = validate_receipt(a, "A")  # a receipt read back is read-only evidence
    with pytest.raises(ValidationError, match="frozen"):
        typed.checks[0].status = "fail"  # type: ignore[misc]
