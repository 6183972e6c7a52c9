"""The receipt report's drawing: well-formed SVG, marks where the numbers put them (the seed's noise band around the
reference build, recall's pass line and poisoned band, GSM8K's interval), escaped text, and a page that fetches
nothing. The receipts → evidence step and the headless-Chromium screenshot are in tests/test_gate_report.py."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import unescape
from itertools import pairwise

import pytest

from appliance.gate.compare import PP_NOISE, TG_NOISE
from appliance.report import charts
from appliance.report.evidence import AcceptancePoint, BenchPoint, CheckRow, Gsm8kPoint, RecallPoint, ReceiptView
from appliance.report.page import render
from appliance.report.svg import nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


def view(label: str, **kw: object) -> ReceiptView:
    base: dict = {"label": label, "source": f"{label}/receipt.json", "verdict": "pass", "complete": True,
                  "profile": "gb10-tp2", "engine": "vLLM 0.32.0", "lock": "5f6a41486058", "stack": "s",
                  "started_at": "2026-12-01T10:00:00Z", "host": "h", "engagement": "guard 5/5"}
    return ReceiptView(**{**base, **kw})


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


@pytest.mark.parametrize(("lo", "hi"), [(0, 1), (0, 24), (1980.5, 2120.2), (0.9, 0.97), (5, 5), (-3, 7)])
def test_ticks_are_round_and_cover_the_range(lo: float, hi: float) -> None:
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi and 2 <= len(ticks) <= 12
    steps = {round(b - a, 9) for a, b in pairwise(ticks)}
    assert len(steps) == 1
    mantissa = float(f"{steps.pop():e}".split("e")[0])
    assert mantissa in (1.0, 2.0, 2.5, 5.0)


def band_rect(svg: str) -> tuple[float, float]:
    rect = next(r for r in parse(svg).iter(f"{SVG}rect") if r.get("fill-opacity"))
    return float(rect.get("y")), float(rect.get("y")) + float(rect.get("height"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("test", "kind", "band", "whose"), [
    ("tg128", "tg", TG_NOISE, "the seed's noise band for tg"),
    ("pp2048", "pp", PP_NOISE, "the seed's ctx_pp band, applied here to pp")])  # the seed names no pp band
def test_the_noise_band_is_the_seeds_around_the_reference_build(test: str, kind: str, band: float, whose: str) -> None:
    views = [view("a", bench={test: BenchPoint(kind, 40.0, (39.0, 41.0))}),
             view("b", bench={test: BenchPoint(kind, 35.0, (34.5, 35.5))})]
    svg = charts.bench_chart(test, views)
    top, bottom = band_rect(svg)
    labels = {t.text for t in parse(svg).iter(f"{SVG}text")}
    assert f"±{band:.0%} around a: {whose}" in labels
    assert {"40.0", "35.0"} <= labels
    # The band's edges sit at 40 × (1 ± band) on the chart's own axis.
    ticks = [(float(t.get("y")) - 4, float(t.text.replace(",", ""))) for t in parse(svg).iter(f"{SVG}text")  # type: ignore[arg-type, union-attr]
             if t.get("class") == "tick" and re.fullmatch(r"[0-9.,]+", t.text or "")]
    (y0, v0), (y1, v1) = ticks[0], ticks[-1]
    at = lambda value: y0 + (value - v0) * (y1 - y0) / (v1 - v0)  # noqa: E731
    assert top == pytest.approx(at(40 * (1 + band)), abs=0.2) and bottom == pytest.approx(at(40 * (1 - band)), abs=0.2)


def test_recall_draws_the_pass_line_and_the_poisoned_band_from_the_receipts_own_params() -> None:
    r = RecallPoint(found=63, total=72, needles_per_run=24, runs_found=(22, 21, 20), pass_line=0.75,
                    poisoned_max=13 / 24, status="pass")
    svg = charts.recall_chart([view("serve 1", recall=r)])
    assert svg is not None
    texts = {t.text for t in parse(svg).iter(f"{SVG}text")}
    assert "pass line 18/24" in texts and "poisoned band (≤ 13/24)" in texts and "21.0" in texts
    assert len([c for c in parse(svg).iter(f"{SVG}circle")]) == 3  # one ring per run


def test_gsm8k_shows_the_95_percent_interval_and_acceptance_one_bar_per_position_and_receipt() -> None:
    views = [view("a", gsm8k=Gsm8kPoint(0.96, 0.005, 0.93, "pass"),
                  acceptance=AcceptancePoint((0.757, 0.622, 0.432, 0.324, 0.189), 2.71)),
             view("b", gsm8k=Gsm8kPoint(0.95, None, 0.93, "pass"))]
    g = charts.gsm8k_chart(views)
    assert g is not None and "0.960 ± 0.010" in g and "pass line 93%" in g
    a = charts.acceptance_chart(views)
    assert a is not None
    bars = [r for r in parse(a).iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == 5 and "a (mean length 2.71)" in a


def test_gsm8k_of_one_receipt_without_a_pass_line_draws_no_pass_line() -> None:
    # One score and no minimum: the axis comes from the interval alone (min() of one value was a TypeError).
    g = charts.gsm8k_chart([view("a", gsm8k=Gsm8kPoint(0.5, 0.02, 0.0, "pass"))])
    assert g is not None and "0.500 ± 0.039" in g and "pass line" not in g


def test_text_is_escaped_and_the_page_fetches_nothing() -> None:
    nasty = view("<script>alert(1)</script>", checks=(CheckRow("bench", "pass", 'a "quoted" <b>'),),
                 bench={"tg128": BenchPoint("tg", 10.0)})
    page = render([nasty], title="t")
    assert "<script>" not in page and "&lt;script&gt;" in page
    for fetch in (r"<script", r"<link", r"<img", r"<iframe", r"<object", r"<embed", r"\bsrc=", r"\bhref=",
                  r"url\(", r"@import", r"srcset"):
        assert not re.search(fetch, page, re.I), fetch
    for svg in re.findall(r"<svg.*?</svg>", page, re.S):
        parse(svg)


def test_a_section_without_evidence_says_so() -> None:
    page = unescape(render([view("only a verdict", checks=(CheckRow("structured", "pass", "4/4"),))]))
    assert "no receipt carries bench rows" in page and "no receipt carries a recall or a GSM8K check" in page
    assert "no receipt's serve drafted" in page


def _axis(svg: str) -> list[ET.Element]:
    """The category names under the x axis: the tick texts that carry their full name as a tooltip."""
    return [t for t in parse(svg).iter(f"{SVG}text") if t.get("class") == "tick" and t.find(f"{SVG}title") is not None]


def _shown(t: ET.Element) -> list[str]:
    spans = t.findall(f"{SVG}tspan")
    return [s.text or "" for s in spans] if spans else [t.text or ""]


def test_category_names_wrap_at_their_separators_inside_their_slot_and_keep_the_full_name_as_a_tooltip() -> None:
    from appliance.report.metrics import text_width
    from appliance.report.svg import FONT_PX, Chart

    names = ["cpu-smoke-run1", "cpu-smoke-run2", "cpu-smoke-run3", "gb10-tp2-dspark-fixture"]
    chart = Chart("bench tg16", names, 0, 30, width=420)
    ticks = _axis(chart.render())
    assert [t.find(f"{SVG}title").text for t in ticks] == names  # type: ignore[union-attr]
    lines = [_shown(t) for t in ticks]
    assert ["".join(x) for x in lines] == names  # every character kept, none cut with an ellipsis
    assert lines[0] == ["cpu-smoke-", "run1"] and len(lines[3]) >= 2
    assert all(text_width(x, FONT_PX) <= chart.slot() for line in lines for x in line)
    wide = Chart("bench tg16", names, 0, 30, width=1400)
    assert [_shown(t) for t in _axis(wide.render())] == [[n] for n in names]


def test_names_that_cannot_fit_even_wrapped_become_letters_that_the_legend_explains() -> None:
    from appliance.report.svg import Chart, keys

    names = [f"cpu-smoke-2026-12-01T14:13:12Z-candidate-build-{i}" for i in range(8)]
    svg = Chart("bench tg16", names, 0, 30, width=440).render()
    assert [_shown(t) for t in _axis(svg)] == [[k] for k in "ABCDEFGH"]
    legend = ["".join(_shown(t)) for t in parse(svg).iter(f"{SVG}text") if t.get("class") == "legend"]
    assert legend == [f"{k} = {n}" for k, n in zip("ABCDEFGH", names, strict=True)]
    assert keys(28)[-3:] == ["Z", "AA", "AB"]


def test_a_long_title_and_a_long_legend_entry_wrap_inside_the_chart_and_it_grows_to_hold_them() -> None:
    from appliance.report.metrics import text_width
    from appliance.report.svg import FONT_PX, Chart

    chart = Chart("a title far longer than the chart is wide, so that it has to wrap onto a second line", ["a"], 0,
                  1, width=300, height=200)
    top = chart.top
    chart.band(0, 1, "#000000", "a legend entry that names a receipt-with-a-very-long-folder-name-indeed and says more")
    root = parse(chart.render())
    title = next(t for t in root.iter(f"{SVG}text") if t.get("class") == "title")
    spans = title.findall(f"{SVG}tspan")
    assert len(spans) >= 2 and top == 48 + 16 * (len(spans) - 1)  # the plot moved down for each line more
    legend = next(t for t in root.iter(f"{SVG}text") if t.get("class") == "legend")
    entry = [s.text or "" for s in legend.findall(f"{SVG}tspan")]
    assert len(entry) >= 2 and all(18 + text_width(s, FONT_PX) <= 300 - 64 - 16 for s in entry)
    assert int(root.get("height") or 0) >= 200
