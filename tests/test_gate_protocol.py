"""Anchor-comparable benchmarks (`gate --bench-protocol`): the anchors' data (appliance/gate/anchors.yaml), the
planning and its explicit scaling for the CPU serve, the receipt's typed `bench_protocol` section, and `gate report`'s
rows beside the anchors' figures. The protocols running on the real CPU serve: tests/test_gate_protocol_engine.py."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from appliance.errors import ApplianceError
from appliance.gate import bench
from appliance.gate.anchors import ANCHORS_FILE, Anchors, anchor_rows, anchors_digest, load_anchors
from appliance.gate.benchy_rows import row_name
from appliance.gate.context import GateContext
from appliance.gate.progress import Quiet
from appliance.gate.protocol import ProtocolRun, for_request, plan, warnings
from appliance.gate.receipt import build, load, write
from appliance.gate.sizing import BenchParams, params_for
from appliance.profile.loader import load_profile
from appliance.report import anchor_rows as report_rows

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "receipts" / "cpu-smoke-run1" / "receipt.json"


def raw_anchors() -> dict[str, Any]:
    return yaml.safe_load(ANCHORS_FILE.read_text())


def planned(name: str, profile: str = "cpu-smoke", *sets: str) -> ProtocolRun:
    p = load_profile(profile, cli_overrides=list(sets)).profile
    return plan(name, p, params_for(p).bench)


# --- the data ---------------------------------------------------------------------------------------------------


def test_the_data_holds_the_three_anchors_each_figure_with_source_date_and_one_row():
    anchors = load_anchors()
    assert sorted(anchors.protocols) == ["lil", "nepenth", "seed"]
    figures = {f.id: f for p in anchors.protocols.values() for f in p.figures}
    assert figures["lil-kk-ds4-c1"].value == 205.54 and figures["lil-kk-ds4-c8"].value == 667.18
    assert figures["lil-kk-ds4-prefill-32k"].value == 13957.0
    assert figures["nepenth-e14-c1-256"].value == 109.77 and figures["nepenth-e12-c1-128k"].value == 99.91
    assert figures["seed-pp2048-d8192"].value == 1432.23 and figures["seed-ctx-tg-d32768"].value == 40.70
    for f in figures.values():
        assert f.source.url.endswith(f"/blob/{f.source.commit}/{f.source.path}") and f.date.startswith("2026-")
        assert f.hardware and f.engine and f.model and f.metric
    assert figures["lil-kk-ds4-c1"].date_note  # a month, not a day: said why
    for name, p in anchors.protocols.items():
        rows = anchor_rows(p)
        assert all(sum(r.matches(f) for r in rows) == 1 for f in p.figures), name


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["protocols"]["seed"]["figures"][0].update(depth=4096), "names 0 rows"),
    (lambda d: d["protocols"]["lil"]["figures"][0].pop("concurrency"), "names 2 rows"),
    (lambda d: d["protocols"]["lil"]["figure_defaults"].pop("date_note"), "date 2026-09 names no day"),
    (lambda d: d["protocols"]["seed"]["figure_defaults"]["source"].update(commit="0" * 40), "is not"),
    (lambda d: d["protocols"]["nepenth"]["figures"][1].update(id="nepenth-e14-c1-256"), "appear twice"),
    (lambda d: d["protocols"]["lil"]["steps"][0].update(extra_body={"x": {"a": 1, "b": 2}}), "holds a comma"),
    (lambda d: d["protocols"]["lil"].update(colour="red"), "Extra inputs are not permitted"),
])
def test_a_wrong_entry_in_the_data_is_refused(mutate: Any, message: str) -> None:
    data = copy.deepcopy(raw_anchors())
    mutate(data)
    with pytest.raises(ValidationError, match=message):
        Anchors.model_validate(data)


def test_a_broken_data_file_is_exit_2_naming_the_entry(tmp_path: Path) -> None:
    data = raw_anchors()
    data["protocols"]["seed"]["figures"][0]["value"] = -1
    bad = tmp_path / "anchors.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ApplianceError, match=r"protocols\.seed\.figures\.0\.value"):
        load_anchors.__wrapped__(bad)


# --- planning and scaling ---------------------------------------------------------------------------------------


def test_on_a_gpu_profile_each_protocol_runs_the_anchors_own_shapes():
    seed = planned("seed", "gb10-tp2")
    assert not seed.scaled and seed.rule is None and seed.size == "standard"
    (step,) = seed.steps
    b = step.params
    assert (b.pp, b.tg, b.depth, b.concurrency, b.runs, b.prefix_caching) == (
        (2048,), (128,), (8192, 16384, 32768), (1,), 3, True)
    assert all(r.test == r.anchor and not r.scaling for r in seed.rows)
    lil = planned("lil", "rtx-pro-6000-tp2")
    decode, prefill = lil.steps
    assert decode.params.concurrency == (1, 8) and decode.params.exact_tg
    assert decode.params.extra_body == ("temperature=1.0", "top_p=0.95")
    assert (prefill.params.pp, prefill.params.no_cache) == ((32768,), True)
    assert {r.test: r.figures for r in lil.rows if r.figures} == {
        "tg1024 (c1)": ("lil-kk-ds4-c1",), "tg1024 (c8)": ("lil-kk-ds4-c8",), "pp32768": ("lil-kk-ds4-prefill-32k",)}
    assert any("128-token prompt" in c for c in lil.choices)


def test_a_protocol_over_the_gpu_profiles_max_model_len_is_bad_input_naming_the_fix():
    with pytest.raises(ApplianceError) as raised:
        planned("nepenth", "gb10-tp2")
    e = raised.value
    assert e.field == "--bench-protocol" and e.value == "nepenth"
    assert "pp131072, tg256 (pp131072) need 131,392 tokens" in e.message and "max_model_len 49,152" in e.message
    assert e.fix and "--set limits.max_model_len=131392" in e.fix and e.reason and "refuse" in e.reason
    fits = planned("nepenth", "gb10-tp2", "limits.max_model_len=131392")
    assert [r.test for r in fits.rows if r.figures] == ["tg256 (pp256)", "tg256 (pp32768)", "tg256 (pp131072)"]


def test_on_the_cpu_serve_every_shape_is_scaled_by_the_protocols_rule_and_said_so():
    run = planned("seed")
    assert run.scaled and run.size == "smoke" and run.max_model_len == 2048
    assert run.rule and "prompts and depths ÷64, outputs ÷8, none below 16 tokens, 1 run(s)" in run.rule
    rows = {r.anchor: r for r in run.rows}
    assert rows["tg128 @ d32768"].test == "tg16 @ d512"
    assert rows["tg128 @ d32768"].scaling == ("prompt 2048 → 32 (÷64)", "output 128 → 16 (÷8)",
                                              "depth 32768 → 512 (÷64)")
    assert rows["ctx_pp @ d8192"].scaling == ("depth 8192 → 128 (÷64)",)  # a prompt or output change does not apply
    nepenth = {r.anchor: r for r in planned("nepenth").rows}
    assert nepenth["tg256 (pp256)"].scaling == ("prompt 256 → 16 (÷128, floor 16)", "output 256 → 16 (÷16)")


def test_a_scaled_row_still_over_max_model_len_is_capped_and_the_cap_is_said():
    run = planned("nepenth", "cpu-smoke", "limits.max_model_len=1024")
    row = next(r for r in run.rows if r.anchor == "tg256 (pp131072)")
    assert row.test == "tg16 (pp944)"  # 1024 - 16 output - 64
    assert row.scaling[-1] == "prompt 1024 → 944: capped by this profile's max_model_len 1024"
    seed = {r.anchor: r for r in planned("seed", "cpu-smoke", "limits.max_model_len=512").rows}
    assert seed["pp2048 @ d32768"].test == "pp32 @ d400"  # 512 - 16 - 64 - 32
    assert "depth 512 → 400: capped by this profile's max_model_len 512" in seed["pp2048 @ d32768"].scaling
    with pytest.raises(ApplianceError, match="over profile cpu-smoke's max_model_len 96"):  # nothing left to cap to
        planned("seed", "cpu-smoke", "limits.max_model_len=96")


@pytest.mark.parametrize("name", ["lil", "nepenth", "seed"])
def test_every_planned_row_is_a_row_llama_benchy_prints_for_the_steps_params(name: str) -> None:
    """The plan's row names are what bench.parse_results will call llama-benchy's rows (one naming function)."""
    run = planned(name)
    assert run.steps
    for step in run.steps:
        b = step.params
        benchmarks = []
        for depth in b.depth:
            for pp in b.pp:
                for tg in b.tg:
                    for c in b.concurrency:
                        metric = {"mean": 10.0, "std": 0.0, "values": [10.0]}
                        phases = [True, False] if b.prefix_caching and depth else [False]
                        benchmarks += [{"concurrency": c, "context_size": depth, "prompt_size": pp, "response_size": tg,
                                        "is_context_prefill_phase": ctx, "pp_throughput": metric,
                                        "tg_throughput": metric} for ctx in phases]
        parsed = bench.parse_results({"max_concurrency": max(b.concurrency), "benchmarks": benchmarks})
        assert sorted(r["test"] for r in parsed) == sorted(r.test for r in run.rows if r.step == step.id)


def test_an_unknown_protocol_and_a_bench_chosen_twice_are_bad_input():
    p = load_profile("cpu-smoke").profile
    base = params_for(p).bench
    with pytest.raises(ApplianceError) as raised:
        for_request("mlperf", None, None, ["bench"], p, base, None)
    assert raised.value.field == "--bench-protocol" and "lil, nepenth, seed" in (raised.value.fix or "")
    with pytest.raises(ApplianceError, match="--battery seed both given"):
        for_request("lil", "seed", None, ["bench"], p, base, None)
    with pytest.raises(ApplianceError, match="the protocol runs in the bench check") as raised:
        for_request("lil", None, "recall", ["recall"], p, base, None)
    assert raised.value.field == "--checks"
    assert for_request("lil", None, None, ["bench", "recall"], p, base, 4)[0] == ["bench"]
    chosen, run = for_request("lil", None, "bench,recall", ["bench", "recall"], p, base, 4)
    assert chosen == ["bench", "recall"] and {s.params.runs for s in run.steps} == {4}  # --bench-runs wins


def test_gate_refuses_bad_protocol_input_with_exit_2_before_asking_the_serve(tmp_path: Path) -> None:
    env_home = tmp_path / "home"
    for args, said in ((["--profile", "cpu-smoke", "--bench-protocol", "mlperf"], "no such protocol"),
                       (["--profile", "gb10-tp2", "--bench-protocol", "nepenth"], "over profile gb10-tp2's"),
                       (["--profile", "cpu-smoke", "--bench-protocol", "lil", "--checks", "recall"], "bench check")):
        out = tmp_path / "receipt"
        done = subprocess.run([sys.executable, "-m", "appliance", "gate", "--url", "http://127.0.0.1:9", "--out",
                               str(out), *args], capture_output=True, text=True, timeout=120, check=False,
                              env={"APPLIANCE_HOME": str(env_home), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "fix:" in done.stderr and "why:" in done.stderr and "Traceback" not in done.stderr
        assert not out.exists()  # nothing half-written


def test_the_prefix_cache_the_anchor_used_is_said_when_the_profile_serves_without_it():
    p = load_profile("gb10-tp2-upstream").profile
    assert not p.cache.prefix_caching
    said = warnings(plan("seed", p, params_for(p).bench), p)
    assert said == ["bench protocol seed: the anchor measured standard with prefix caching on; profile "
                    "gb10-tp2-upstream serves with it off, so the rows after the context load re-read it"]
    smoke = load_profile("cpu-smoke").profile
    assert warnings(planned("lil"), smoke)[0].startswith("bench protocol lil: scaled for the CPU serve")


def test_llama_benchy_gets_the_protocols_flags(tmp_path: Path) -> None:
    p = load_profile("cpu-smoke").profile
    ctx = GateContext(url="http://127.0.0.1:8000", model="smollm2", checkpoint=p.model.checkpoint, tokenizer=None,
                      profile=p, params=params_for(p), out_dir=tmp_path, progress=Quiet())
    decode = planned("nepenth").steps[0].params
    argv = bench.argv("llama-benchy", ctx, decode, tmp_path / "r.json", None)
    assert argv[argv.index("--pp") + 1:argv.index("--tg")] == ["16", "256", "1024"]
    assert "--no-cache" in argv and "--exact-tg" in argv and "--enable-prefix-caching" not in argv
    entries = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra-body"]
    assert entries == ["temperature=0", 'chat_template_kwargs={"thinking":false}']
    plain = bench.argv("llama-benchy", ctx, BenchParams(pp=(64,), tg=(16,), depth=(0,), runs=1), tmp_path / "r", None)
    assert not {"--no-cache", "--exact-tg", "--extra-body"} & set(plain)


def test_row_names_disambiguate_tg_rows_only_where_a_run_has_several_prompts():
    assert row_name("tg", 128, 8192, 1, False) == "tg128 @ d8192"
    assert row_name("tg", 256, 0, 1, False, 32768) == "tg256 (pp32768)"
    assert row_name("pp", 256, 0, 8, True, 256) == "pp256 (c8)"
    assert row_name("ctx_tg", 128, 8192, 1, False, 2048) == "ctx_tg @ d8192"
    one = {"max_concurrency": 1, "benchmarks": [{"context_size": 0, "prompt_size": 64, "response_size": 16,
                                                 "tg_throughput": {"mean": 5.0, "std": 0, "values": [5.0]}}]}
    assert [r["test"] for r in bench.parse_results(one)] == ["tg16"]  # the standard bench's names are unchanged


# --- the receipt and the report ---------------------------------------------------------------------------------


def protocol_receipt(tmp_path: Path, name: str, t_s: dict[str, float], *, digest: str | None = None) -> Path:
    """A real CPU receipt (tests/fixtures) given a protocol section and bench rows at the planned names: the
    report's arithmetic is checked on known numbers (the real runs: tests/test_gate_protocol_engine.py)."""
    data = json.loads(FIXTURE.read_text())
    run = planned(name)
    section = run.section()
    if digest:
        section["data_sha256"] = digest
    data["bench_protocol"] = section
    data["selected"] = ["bench"]
    data["checks"] = [{"name": "bench", "status": "pass", "summary": "protocol", "params": {"protocol": name},
                       "metrics": {"rows": [{"test": k, "kind": re.match(r"ctx_pp|ctx_tg|pp|tg", k).group(0),  # type: ignore[union-attr]
                                             "t_s": v, "values": [v]} for k, v in t_s.items()]}}]
    folder = tmp_path / f"cpu-smoke-{name}"
    write(build(data), folder)
    return folder / "receipt.json"


def test_the_receipt_records_the_protocol_typed_and_its_summary_says_the_scaling(tmp_path: Path) -> None:
    path = protocol_receipt(tmp_path, "lil", {"tg16 (c1)": 17.5})
    r = load(path)
    assert r.bench_protocol is not None and r.bench_protocol.name == "lil" and r.bench_protocol.scaled
    assert r.bench_protocol.data_sha256 == anchors_digest()
    row = next(x for x in r.bench_protocol.rows if x.test == "tg16 (c1)")
    assert row.anchor == "tg1024 (c1)" and row.figures == ["lil-kk-ds4-c1"]
    summary = (path.parent / "summary.md").read_text()
    assert "## Bench protocol lil:" in summary and "- `tg16 (c1)` ← anchor `tg1024 (c1)` (prompt 128 → 16" in summary


def test_a_protocol_section_that_hides_its_scaling_is_no_receipt(tmp_path: Path) -> None:
    path = protocol_receipt(tmp_path, "seed", {})
    data = json.loads(path.read_text())
    data["bench_protocol"]["rule"] = None  # scaled, and not saying how
    path.write_text(json.dumps(data))
    with pytest.raises(ApplianceError, match="bench_protocol: a scaled protocol says its rule"):
        load(path)


def test_the_report_draws_each_row_beside_its_anchor_figures_as_a_ratio(tmp_path: Path) -> None:
    nepenth = protocol_receipt(tmp_path, "nepenth", {"tg16 (pp16)": 21.954, "tg16 (pp256)": 10.345})
    seed = protocol_receipt(tmp_path, "seed", {"pp32 @ d128": 143.223}, digest="0" * 64)
    plain = FIXTURE
    views = report_rows.compare([(p.parent.name, load(p)) for p in (nepenth, seed, plain)])
    assert [v.protocol for v in views] == ["nepenth", "seed"]  # a receipt without a protocol draws no rows
    rows = {r.figure: r for r in views[0].rows}
    assert rows["nepenth-e14-c1-256"].ratio == pytest.approx(21.954 / 109.77)
    assert rows["nepenth-p3-c1-256"].ratio == pytest.approx(21.954 / 77.4)  # two figures on one row: both drawn
    assert rows["nepenth-e13-c1-32k"].ratio == pytest.approx(10.345 / 103.45)
    assert rows["nepenth-e12-c1-128k"].measured is None and rows["nepenth-e12-c1-128k"].ratio is None
    assert rows["nepenth-e14-c1-256"].date == "2026-08-14"
    assert rows["nepenth-e14-c1-256"].source == (
        "nepenth/deepseek-v4-flash-gb10 experiments/2026-08-14-e14-256-c1.txt@448ea1b5baee")
    assert not views[0].data_changed and views[1].data_changed
    assert next(r for r in views[1].rows if r.figure == "seed-pp2048-d8192").ratio == pytest.approx(0.1)

    as_json = report_rows.to_json(views)
    assert as_json["protocols"][0]["rows"][0]["scaling"] and "not that the shapes match" in as_json["protocols"][0][
        "caveat"]
    text = report_rows.text(views)
    assert "tg16 (pp16)" in text and "vs tg256 (pp256) 109.77 t/s = 0.2×" in text
    assert "anchors.yaml changed since this receipt was written" in text
    html = report_rows.html(views) or ""
    assert "<b>0.2×</b>" in html and "2026-08-02" in html and "href" not in html
    assert report_rows.text([]).startswith("no receipt ran a bench protocol")
    assert report_rows.html([]) is None


def test_gate_report_prints_the_anchor_rows_as_text_json_and_html(tmp_path: Path) -> None:
    path = protocol_receipt(tmp_path, "lil", {"tg16 (c1)": 20.554, "tg16 (c8)": 66.718, "pp512": 1395.7})

    def report(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "appliance", "gate", "report", str(path), str(FIXTURE), *args],
                              capture_output=True, text=True, timeout=120, check=False)

    text = report()
    assert text.returncode == 0 and "cpu-smoke-lil: protocol lil" in text.stdout, text.stderr
    assert "vs tg1024 (c1) 205.54 t/s = 0.1×" in text.stdout and "local-inference-lab/rtx6kpro" in text.stdout
    as_json = json.loads(report("--json").stdout)
    assert [r["ratio"] for r in as_json["protocols"][0]["rows"]] == pytest.approx([0.1, 0.1, 0.1])
    page = tmp_path / "page.html"
    done = report("--html", str(page))
    assert done.returncode == 0 and "3 anchor row(s)" in done.stdout
    body = page.read_text()
    assert "Bench protocols beside the anchors&#x27; published figures" in body and "13,957.00 t/s" in body
