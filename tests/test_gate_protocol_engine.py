"""`appliance gate --bench-protocol lil|nepenth|seed` against a real `appliance run cpu-smoke` (vLLM CPU build, real
llama-benchy): each protocol's shapes, scaled for the CPU serve and said so in the receipt, run end to end; then
`appliance gate report` draws the receipts' rows beside the anchors' published figures (text, JSON, HTML)."""

from __future__ import annotations

import json
import subprocess
from html import unescape
from pathlib import Path

import httpx
import pytest

from appliance.gate.anchors import load_anchors
from appliance.gate.receipt import load as load_typed
from tests.conftest import BIN, Serve, wait_for

PROTOCOLS = ("lil", "nepenth", "seed")


@pytest.fixture(scope="module")
def receipts(smoke_serve: Serve, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One gate per protocol on the module's serve (the three together take a few minutes on 2 cores)."""
    assert wait_for(lambda: httpx.get(f"{smoke_serve.exporter}/status", timeout=10).json()["state"] == "ready",
                    timeout=180, interval=2), smoke_serve.output.read_text()[-3000:]
    root = tmp_path_factory.mktemp("protocols")
    out = {}
    for name in PROTOCOLS:
        folder = root / f"cpu-smoke-{name}"
        done = subprocess.run([str(BIN / "appliance"), "gate", "--url", smoke_serve.url, "--exporter",
                               smoke_serve.exporter, "--out", str(folder), "--bench-protocol", name],
                              env=smoke_serve.env, capture_output=True, text=True, timeout=1800, check=False)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr[-3000:]}"
        out[name] = folder / "receipt.json"
    return out


@pytest.mark.parametrize("name", PROTOCOLS)
def test_each_protocol_runs_its_scaled_shapes_and_the_receipt_says_how_they_were_scaled(receipts: dict[str, Path],
                                                                                       name: str) -> None:
    typed = load_typed(receipts[name])
    section = typed.bench_protocol
    assert section is not None and section.name == name and section.size == "smoke"
    assert section.scaled and "scaled for the CPU serve (cpu-smoke, max_model_len 2,048)" in (section.rule or "")
    assert typed.selected == ["bench"] and typed.verdict == "pass"
    assert any(f"bench protocol {name}: scaled for the CPU serve" in w for w in typed.warnings)
    bench = typed.bench()
    assert bench is not None and bench.status == "pass", bench
    measured = bench.metrics.measured() if bench.metrics else {}
    figured = [r for r in section.rows if r.figures]
    protocol = load_anchors().protocols[name]
    # every anchor figure stands beside exactly one row, and every such row was measured on the real serve
    assert sorted(f for r in figured for f in r.figures) == sorted(f.id for f in protocol.figures)
    assert all(measured[r.test].t_s > 0 for r in figured)
    assert all(r.scaling for r in figured)  # each differs from the anchor's shape, and says how
    steps = json.loads(receipts[name].read_text())["checks"][0]["params"]["steps"]
    assert [s["id"] for s in steps] == [s.id for s in protocol.steps]
    assert all(s["runs"] == protocol.smoke.runs for s in steps)
    summary = (receipts[name].parent / "summary.md").read_text()
    assert f"## Bench protocol {name}:" in summary and "scaled for the CPU serve" in summary
    for step in protocol.steps:  # llama-benchy's own output of each step is kept beside the receipt
        assert (receipts[name].parent / f"llama-benchy-{step.id}.json").is_file()


def test_the_scaling_follows_each_protocols_rule_on_the_real_runs(receipts: dict[str, Path]) -> None:
    nepenth = load_typed(receipts["nepenth"]).bench_protocol
    seed = load_typed(receipts["seed"]).bench_protocol
    lil = load_typed(receipts["lil"]).bench_protocol
    assert nepenth and seed and lil
    rows = {r.anchor: r for r in nepenth.rows}
    assert rows["tg256 (pp131072)"].test == "tg16 (pp1024)"
    assert rows["tg256 (pp131072)"].scaling == ["prompt 131072 → 1024 (÷128)", "output 256 → 16 (÷16)"]
    assert rows["tg256 (pp256)"].figures == ["nepenth-e14-c1-256", "nepenth-p3-c1-256"]
    assert {r.anchor: r.test for r in seed.rows if r.kind == "pp"} == {
        "pp2048 @ d8192": "pp32 @ d128", "pp2048 @ d16384": "pp32 @ d256", "pp2048 @ d32768": "pp32 @ d512"}
    assert {r.anchor: r.test for r in lil.rows if r.figures} == {
        "tg1024 (c1)": "tg16 (c1)", "tg1024 (c8)": "tg16 (c8)", "pp32768": "pp512"}

def test_gate_report_draws_the_rows_beside_the_anchor_figures_with_source_and_date(receipts: dict[str, Path],
                                                                                   tmp_path: Path) -> None:
    paths = [str(receipts[n]) for n in PROTOCOLS]
    run = [str(BIN / "appliance"), "gate", "report", *paths]
    done = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout)["protocols"]
    assert [p["protocol"] for p in drawn] == list(PROTOCOLS)
    anchors = load_anchors()
    for p in drawn:
        assert p["scaled"] and "not that the shapes match" in p["caveat"] and not p["data_changed"]
        bench_rows = {r["test"]: r["t_s"] for r in json.loads(receipts[p["protocol"]].read_text())["checks"][0][
            "metrics"]["rows"]}
        for row in p["rows"]:
            _, _, figure = anchors.figure(row["figure"])
            assert row["value"] == figure.value and row["measured"] == bench_rows[row["test"]] > 0
            assert row["ratio"] == pytest.approx(row["measured"] / figure.value)
            assert row["date"] == figure.date and figure.source.commit[:12] in row["source"]
            assert row["url"] == figure.source.url and row["scaling"]
    c1 = next(r for p in drawn for r in p["rows"] if r["figure"] == "lil-kk-ds4-c1")
    assert (c1["test"], c1["anchor_row"], c1["value"]) == ("tg16 (c1)", "tg1024 (c1)", 205.54)

    text = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 0, text.stderr
    assert "vs tg1024 (c1) 205.54 t/s" in text.stdout and "local-inference-lab/rtx6kpro" in text.stdout
    assert "2026-08-14; source nepenth/deepseek-v4-flash-gb10" in text.stdout
    print(text.stdout)  # the anchor rows of a real CPU run (pytest -s), as the report prints them

    page = tmp_path / "report.html"
    html = subprocess.run([*run, "--html", str(page)], capture_output=True, text=True, timeout=120, check=False)
    assert html.returncode == 0 and "19 anchor row(s)" in html.stdout, html.stdout + html.stderr
    body = unescape(page.read_text())
    assert "Bench protocols beside the anchors' published figures" in body
    for figure in ("205.54 t/s", "109.77 t/s", "1,432.23 t/s", "jasl/vllm-ds4-sm120-harness"):
        assert figure in body, figure
