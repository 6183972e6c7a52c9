"""Receipt schema, the parsers of llama-benchy and lm-eval output, sizing per profile, provenance readers."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.errors import ApplianceError
from appliance.gate import bench, gsm8k
from appliance.gate.context import GateContext
from appliance.gate.prepare import select
from appliance.gate.progress import Progress, Quiet
from appliance.gate.provenance import engagement, image_labels
from appliance.gate.receipt import REQUIRED, SCHEMA, build, finalize, load, verdict, with_check, write
from appliance.gate.receipt_model import BenchRow, Check, Engagement, FatalHit, Receipt
from appliance.gate.result import CheckResult
from appliance.gate.sizing import params_for
from appliance.gate.structured import SCHEMA as PERSON
from appliance.gate.structured import judge, schema_errors
from appliance.profile.loader import load_profile

FIXTURES = Path(__file__).parent / "fixtures" / "gate"


def context(profile: str, tmp_path: Path, tokenizer: str | None = "/models/tok") -> GateContext:
    p = load_profile(profile).profile
    return GateContext(url="http://127.0.0.1:8000", model="deepseek-v4-flash", checkpoint=p.model.checkpoint,
                       tokenizer=tokenizer, profile=p, params=params_for(p), out_dir=tmp_path, progress=Quiet())


def test_deepseek_profiles_get_the_seeds_benchmark_standard_and_recall_shape():
    params = params_for(load_profile("gb10-tp2").profile)
    b = params.bench
    assert (b.pp, b.tg, b.depth, b.runs, b.concurrency) == ((2048,), (128,), (0, 8192, 16384, 32768), 3, (1,))
    assert params.recall.concurrency == 12 and params.recall.needles_per_request == 2
    assert params.recall.min_found == pytest.approx(18 / 24)  # the seed's healthy single runs go down to 19/24
    assert params.reasoning.efforts == ("none", "minimal", "low", "medium", "high", "xhigh", "max")
    assert params.structured.temperature > 0


def test_cpu_smoke_gets_tiny_settings_with_repeated_bench_runs():
    params = params_for(load_profile("cpu-smoke").profile)
    assert (params.bench.pp, params.bench.tg, params.bench.depth, params.bench.runs) == ((64,), (16,), (0,), 3)
    assert params.bench.corpus == "builtin"
    assert params.recall.context_tokens < 2048


def test_bench_depths_that_do_not_fit_max_model_len_are_dropped_with_a_note():
    loaded = load_profile("gb10-tp2", cli_overrides=["limits.max_model_len=20000"])
    params = params_for(loaded.profile)
    assert params.bench.depth == (0, 8192, 16384)
    assert any("32768 dropped" in n for n in params.notes)
    tiny = params_for(load_profile("gb10-tp2", cli_overrides=["limits.max_model_len=1024"]).profile)
    assert tiny.bench.depth == (0,)  # nothing fits: depth 0 stays, and both facts are said, with the numbers
    assert any(n.startswith("bench: depth 8192, 16384, 32768 dropped") for n in tiny.notes), tiny.notes
    assert any("even depth 0" in n and "max_model_len 1024" in n for n in tiny.notes), tiny.notes
    assert all("depth  dropped" not in n for n in tiny.notes)


def test_llama_benchy_argv_carries_the_standard_flags(tmp_path):
    ctx = context("gb10-tp2", tmp_path)
    argv = bench.argv("llama-benchy", ctx, ctx.params.bench, tmp_path / "r.json", None)
    text = " ".join(argv)
    assert "--pp 2048 --tg 128 --depth 0 8192 16384 32768 --runs 3 --concurrency 1" in text
    assert "--enable-prefix-caching" in argv and "--book-url" not in argv
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8000/v1"
    assert argv[argv.index("--served-model-name") + 1] == "deepseek-v4-flash"
    assert argv[argv.index("--tokenizer") + 1] == "/models/tok"
    assert argv[-4:] == ["--format", "json", "--save-result", str(tmp_path / "r.json")]


def test_llama_benchy_json_is_parsed_into_rows_named_like_its_table():
    rows = bench.parse_results(json.loads((FIXTURES / "llama-benchy-cpu-smoke.json").read_text()))
    assert [r["test"] for r in rows] == ["pp64", "tg16", "ctx_pp @ d256", "ctx_tg @ d256", "pp64 @ d256",
                                        "tg16 @ d256"]
    assert [r["kind"] for r in rows] == ["pp", "tg", "ctx_pp", "ctx_tg", "pp", "tg"]
    assert all(r["t_s"] > 0 and len(r["values"]) == 2 for r in rows)
    assert rows[0]["ttfr_ms"] > 0 and rows[1]["peak_t_s"] > 0
    assert "| ctx_pp @ d256 |" in bench.table([BenchRow.model_validate(r) for r in rows])


def test_llama_benchy_failures_are_classified():
    assert bench._classify(1, ["Coherence test FAILED: Expected 'Paris'. Got: Lyon"])[0] == "fail"
    status, why = bench._classify(1, ["Error downloading or processing book: ConnectionError"])
    assert status == "unavailable" and "--bench-corpus builtin" in why


def test_lm_eval_results_json_is_parsed():
    metrics = gsm8k.parse_results(json.loads((FIXTURES / "lm-eval-gsm8k-results.json").read_text()))
    assert metrics["strict_match"] == pytest.approx(0.9613, abs=1e-4)
    assert metrics["flexible_extract"] == pytest.approx(0.9629, abs=1e-4)
    assert (metrics["num_fewshot"], metrics["samples"], metrics["lm_eval_version"]) == (8, 1319, "0.4.13")
    params = params_for(load_profile("gb10-tp2").profile).gsm8k
    assert gsm8k.judge(metrics, params)[0] == "pass"
    assert gsm8k.judge({**metrics, "strict_match": 0.80}, params)[0] == "fail"


def test_a_real_lm_eval_results_file_from_the_cpu_serve_is_parsed():
    data = json.loads((FIXTURES / "lm-eval-gsm8k-local-cpu-smoke.json").read_text())
    metrics = gsm8k.parse_results(data, "gsm8k_local")
    assert (metrics["num_fewshot"], metrics["samples"]) == (2, 3)
    assert metrics["strict_match"] == pytest.approx(2 / 3, abs=1e-4)


def test_lm_eval_output_without_the_task_is_an_error():
    with pytest.raises(ValueError, match=r"no results\.gsm8k"):
        gsm8k.parse_results({"results": {"arc_easy": {}}})


def test_lm_eval_argv_uses_local_completions_against_the_serve(tmp_path):
    ctx = context("gb10-tp2", tmp_path)
    argv = gsm8k.argv("lm_eval", ctx, ctx.params.gsm8k, tmp_path / "out")
    assert argv[:4] == ["lm_eval", "run", "--model", "local-completions"]
    args = argv[argv.index("--model_args") + 1]
    assert "base_url=http://127.0.0.1:8000/v1/completions" in args and "model=deepseek-v4-flash" in args
    assert "tokenizer=/models/tok" in args
    assert argv[argv.index("--num_fewshot") + 1] == "8" and "--limit" not in argv


def test_gsm8k_offline_without_the_data_set_is_unavailable_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    result = gsm8k.run(context("cpu-smoke", tmp_path))
    if gsm8k.venv_executable("lm_eval") is None:
        assert result.status == "unavailable" and "not installed" in result.summary
    else:
        assert result.status == "unavailable" and "openai/gsm8k" in result.summary and "hub" in result.summary


@pytest.mark.parametrize(("check", "tool"), [(bench, "llama-benchy"), (gsm8k, "lm-eval")])
def test_a_missing_gate_tool_is_named_with_its_locked_version_and_the_gate_extra(tmp_path, monkeypatch, check, tool):
    from appliance import lockfile
    from appliance.paths import versions_path

    monkeypatch.setattr(check, "venv_executable", lambda name: None)  # the tool is not installed here
    result = check.run(context("cpu-smoke", tmp_path))
    wanted = lockfile.gate_requirement(lockfile.load(versions_path()), tool)
    assert wanted.startswith(tool) and "==" in wanted
    assert result.status == "unavailable"
    assert f"pip install '{wanted}'" in result.summary and "pip install 'appliance[gate]'" in result.summary


def test_structured_schema_validation():
    assert schema_errors({"name": "Ada", "age": 36, "colour": "blue", "tags": ["x"]}, PERSON) == []
    errors = schema_errors({"name": "A" * 30, "age": -1, "colour": "pink", "extra": 1}, PERSON)
    assert len(errors) == 4
    assert schema_errors({"name": "Ada", "age": True, "colour": "red"}, PERSON) == [
        "$.age: expected an integer, got true"]
    assert judge('{"name": "Ada", "age": 3', "length")[0].startswith("not JSON (cut by max_tokens)")


def test_engagement_reads_the_exporters_status():
    status = {"state": "ready", "verdict": "pass", "log_ready": True,
              "profile": {"name": "gb10-tp2", "digest": "d"}, "lock_digest": "l",
              "facts": {"guard_active": 5, "guard_total": 5, "runner_v2": True, "sm120_decode": True,
                        "kv_tokens": 401408, "attention_backend": "FLASHINFER_MLA_SPARSE"},
              "expectations": [{"rule": "K4", "name": "guard-every-manager", "status": "pass", "severity": "error",
                                "detail": "5/5"}], "fatal": []}
    e = engagement(status)
    assert (e["guard"], e["runner"], e["sm120_decode"], e["kv_tokens"]) == ("5/5", "v2", True, 401408)
    assert e["expectations"] == [{"rule": "K4", "name": "guard-every-manager", "status": "pass", "detail": "5/5"}]
    assert e["facts"] == status["facts"]
    v1 = engagement({"log_ready": True, "facts": {}})
    assert v1["runner"] == "v1" and v1["guard"] is None and v1["sm120_decode"] is False
    assert engagement(None, "refused") == {"available": False, "error": "refused"}


def test_image_labels_come_from_the_images_environment():
    assert image_labels({"PATH": "/bin"}) is None
    got = image_labels({"APPLIANCE_IMAGE_REVISION": "abc123", "APPLIANCE_IMAGE_LOCK_DIGEST": "", "PATH": "/bin"})
    assert got == {"revision": "abc123"}


def _receipt() -> Receipt:
    return build({"schema": SCHEMA, "complete": False, "verdict": "incomplete", "started_at": "t", "finished_at": None,
            "size": "smoke", "target": {"url": "u", "model": "m", "checkpoint": "c"},
            "provenance": {"profile": {"name": "cpu-smoke", "digest": "d" * 64}, "lock_digest": "l" * 64,
                           "engine": {"version": "0.32.0"}, "hardware": {}},
            "engagement": {"available": False, "error": "x"}, "checks": [], "warnings": []})


def test_receipt_round_trips_with_its_summary_and_a_verdict(tmp_path):
    r = with_check(with_check(_receipt(), CheckResult("structured", "pass", "4/4")),
                   CheckResult("reasoning", "not_applicable", "no parser"))
    r = finalize(r, complete=True, finished_at="t2", duration_s=1.0)
    assert r.verdict == "pass"
    path = write(r, tmp_path)
    loaded = load(path)  # typed: the readers (compare, serves, paired) read attributes
    assert loaded.verdict == "pass" and loaded.complete and loaded.engagement.available is False
    assert [type(c).__name__ for c in loaded.checks] == ["StructuredCheck", "ReasoningCheck"]
    assert loaded.model_dump(mode="json", by_alias=True, exclude_unset=True) == json.loads(path.read_text())
    assert set(REQUIRED) <= set(loaded.model_dump(by_alias=True))
    assert "# Gate receipt: cpu-smoke — PASS" in (tmp_path / "summary.md").read_text()


def test_failed_checks_or_a_failing_serve_log_fail_the_verdict_and_interruption_makes_it_incomplete():
    ok, bad = Check(name="a", status="pass", summary=""), Check(name="b", status="unavailable", summary="")
    assert verdict([ok, bad], True) == "fail"
    assert verdict([ok], False) == "incomplete"
    assert verdict([ok], True, Engagement(available=True, verdict="pass", fatal=[])) == "pass"
    assert verdict([ok], True, Engagement(available=True, verdict="fail", fatal=[])) == "fail"
    assert verdict([ok], True, Engagement(available=True, verdict="pass", fatal=[FatalHit(id="engine-dead")])) == "fail"


def test_a_gate_whose_checks_all_do_not_apply_measured_nothing_and_is_no_pass(tmp_path):
    na = Check(name="reasoning", status="not_applicable", summary="no parser")
    assert verdict([na], True) == "nothing_measured" and verdict([], True) == "nothing_measured"
    assert verdict([na, Check(name="structured", status="pass", summary="")], True) == "pass"
    assert verdict([na], True, Engagement(available=True, verdict="fail", fatal=[])) == "fail"  # the log still fails
    assert verdict([na], False) == "incomplete"
    r = finalize(with_check(_receipt(), CheckResult("reasoning", "not_applicable", "no parser")), complete=True,
                 finished_at="t2", duration_s=1.0)
    assert load(write(r, tmp_path)).verdict == "nothing_measured"  # the typed reader takes it back
    assert "— NOTHING MEASURED" in (tmp_path / "summary.md").read_text()


def test_loading_something_that_is_not_a_receipt_is_bad_input(tmp_path):
    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(ApplianceError, match="not a gate receipt"):
        load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text(json.dumps({"schema": SCHEMA}))
    with pytest.raises(ApplianceError, match="malformed receipt"):
        load(tmp_path / "y.json")


def test_unknown_check_names_are_refused_with_the_valid_ones():
    assert select(None) == ["bench", "recall", "reasoning", "structured", "canary"]
    assert select("structured,recall,structured") == ["structured", "recall"]
    with pytest.raises(ApplianceError) as err:
        select("bench,speed")
    assert "speed" in str(err.value) and "gsm8k" in str(err.value)


def test_gate_cli_with_no_serve_is_bad_input_with_a_fix(tmp_path, capsys):
    from tests.conftest import free_port

    code = main(["gate", "--profile", "cpu-smoke", "--url", f"http://127.0.0.1:{free_port()}",
                 "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "no serve answers" in err and "Traceback" not in err


def test_gate_cli_without_a_profile_names_the_exporter_it_asked_and_why(tmp_path, capsys, monkeypatch):
    from tests.conftest import free_port

    monkeypatch.delenv("APPLIANCE_PROFILE", raising=False)
    exporter = f"http://127.0.0.1:{free_port()}"
    code = main(["gate", "--url", f"http://127.0.0.1:{free_port()}", "--exporter", exporter, "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"health exporter at {exporter}" in err and "ConnectError" in err and "--profile" in err


def test_progress_prints_one_line_per_event_off_a_terminal():
    import io

    stream = io.StringIO()
    progress = Progress(stream, live=False, clock=iter(range(100)).__next__)
    progress.begin("recall", 2, 4)
    progress.step("1/4 answered")
    progress.end(CheckResult("recall", "pass", "3/8 needles found", seconds=9))
    assert stream.getvalue().splitlines() == ["[gate 2/4] recall ...", "[gate 2/4] recall (1 s) 1/4 answered",
                                              "[gate 2/4] recall: ok in 9 s: 3/8 needles found"]


def test_lm_eval_gets_the_serves_key_and_never_the_users_openai_key():
    from appliance.gate.gsm8k import lm_eval_env

    assert lm_eval_env({"VLLM_API_KEY": "serve", "OPENAI_API_KEY": "user", "A": "1"}) == {
        "VLLM_API_KEY": "serve", "OPENAI_API_KEY": "serve", "A": "1"}
    assert lm_eval_env({"OPENAI_API_KEY": "user", "A": "1"}) == {"A": "1"}


def test_what_a_check_attaches_reaches_the_receipts_top_level(tmp_path: Path, monkeypatch) -> None:
    """The canary's calibration reaches the receipt's top level this way (appliance/gate/canary.py)."""
    from appliance.gate import runner
    from appliance.gate.result import CheckResult

    def calibrated(ctx) -> CheckResult:
        result = CheckResult("canary", "pass", "healthy")
        result.attach["canary_calibration"] = {"model": "smollm2"}
        return result

    monkeypatch.setitem(runner.CHECK_RUNNERS, "canary", calibrated)
    ctx = types.SimpleNamespace(out_dir=tmp_path, progress=Quiet(), battery=None)  # run_gate reads only these
    receipt = runner.run_gate(ctx, ["canary"], _receipt())
    assert receipt.model_extra == {"canary_calibration": {"model": "smollm2"}}
    assert "attach" not in receipt.checks[0].model_dump()
    assert json.loads((tmp_path / "receipt.json").read_text())["canary_calibration"] == {"model": "smollm2"}


def test_a_check_result_the_receipt_cannot_hold_is_written_as_an_error_and_the_receipt_still_reads_back(tmp_path):
    """The gate writes receipts its readers take: a count above its total (no measurement) becomes an error line."""
    impossible = CheckResult("recall", "pass", "9 of 8 found", metrics={"found": 9, "total": 8})
    r = finalize(with_check(_receipt(), impossible), complete=True, finished_at="t2", duration_s=1.0)
    line = r.checks[0]
    assert (line.name, line.status, line.metrics) == ("recall", "error", None)
    assert "does not fit the receipt" in line.summary and "exceeds total" in line.summary
    assert line.summary.endswith("9 of 8 found") and r.verdict == "fail"
    assert load(write(r, tmp_path)).checks[0].status == "error"


def test_a_battery_receipt_is_judged_by_finalize_and_summarised_with_its_pending_and_not_run_lines(tmp_path):
    from dataclasses import asdict

    from appliance.gate.battery.definition import SEED

    data = _receipt().model_dump(mode="json", by_alias=True, exclude_unset=True)
    data["battery"] = {"name": SEED.name, "source": SEED.source, "expect": SEED.expect, "arm": "default",
                       "serve": "the profile as it ships", "definition": [asdict(c) for c in SEED.checks],
                       "not_run": [{**asdict(o), "evidence": None} for o in SEED.outside]}
    r = with_check(build(data), CheckResult("C1", "pass", "ready in 3 s", params={"title": "boots"}))
    r = finalize(r, complete=True, finished_at="t2", duration_s=1.0)
    assert r.battery is not None and r.battery.result is not None
    assert (r.battery.result.passed, r.battery.result.recorded, r.battery.result.accepted) == (1, 1, False)
    assert r.verdict == "inconclusive"  # what ran passed; the other checks are missing
    write(r, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "CHECK C1 boots" in summary and ":: PENDING" in summary and ":: NOT RUN" in summary
    assert "1/1 PASS; not accepted" in summary
    assert json.loads((tmp_path / "receipt.json").read_text())["battery"]["result"]["passed"] == 1
