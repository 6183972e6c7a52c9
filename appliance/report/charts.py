"""The report's plots, each from typed evidence (evidence.py): bench rows across builds with the seed's noise band,
recall per serve against its bands, GSM8K with its spread, DSpark acceptance per draft position."""

from __future__ import annotations

from collections.abc import Sequence

from appliance.gate.compare import PP_NOISE, TG_NOISE
from appliance.report.evidence import ReceiptView
from appliance.report.svg import FAIL, NEUTRAL, PALETTE, PASS, WARN, Chart, fmt_percent

STATUS_COLOR = {"pass": PASS, "fail": FAIL, "inconclusive": WARN}


def noise_band(kind: str) -> float:
    """The single-run band for a llama-benchy column, as gate/compare.py judges: the seed's ~15 % on tg and ~2 % on
    ctx_pp, the ctx_pp one applied by this project to pp too."""
    return TG_NOISE if kind in ("tg", "ctx_tg") else PP_NOISE


def band_source(kind: str) -> str:
    """Whose band a column's is: the seed names tg's and ctx_pp's; pp borrows ctx_pp's here."""
    return "the seed's ctx_pp band, applied here to pp" if kind == "pp" else f"the seed's noise band for {kind}"


def bench_cells(views: Sequence[ReceiptView]) -> list[str]:
    """Every bench row any receipt measured, in the first receipt's order, then the others'."""
    cells: list[str] = []
    for v in views:
        cells += [t for t in v.bench if t not in cells]
    return cells


def bench_chart(test: str, views: Sequence[ReceiptView]) -> str:
    """One row (e.g. `pp2048 @ d8192`) across the receipts: t/s with each run's value and the run range; the band
    the seed calls unresolvable from single runs (on pp: its ctx_pp one) shaded around the first receipt that has the
    row."""
    points = [(i, v.bench[test]) for i, v in enumerate(views) if test in v.bench]
    values = [x for _, p in points for x in (p.t_s, *p.values)]
    ref = points[0][1]
    band = noise_band(ref.kind)
    lo, hi = min(*values, ref.t_s * (1 - band)), max(*values, ref.t_s * (1 + band))
    pad = (hi - lo) * 0.15 or ref.t_s * 0.05 or 1.0
    chart = Chart(f"bench {test}", [v.label for v in views], max(0.0, lo - pad), hi + pad, "tokens / s",
                  width=440, height=250)
    chart.band(ref.t_s * (1 - band), ref.t_s * (1 + band), NEUTRAL,
               f"±{band:.0%} around {views[points[0][0]].label}: {band_source(ref.kind)}")
    for i, p in points:
        color = PALETTE[i % len(PALETTE)]
        spread = (min(p.values), max(p.values)) if len(p.values) >= 2 else (None, None)
        chart.point(i, p.t_s, color, *spread, label=f"{views[i].label}: {p.t_s:.1f} t/s")
        for run in p.values:
            chart.dot(i, run, color)
        chart.value_label(i, max((p.t_s, *p.values)), f"{p.t_s:.1f}")  # above the whisker and every run's ring
    return chart.render()


def recall_chart(views: Sequence[ReceiptView]) -> str | None:
    """Needles found per serve (the mean of its runs, each run a ring) against the pass line and the poisoned band."""
    points = [(i, v.recall) for i, v in enumerate(views) if v.recall]
    if not points:
        return None
    first = points[0][1]
    assert first is not None
    per_run = {r.needles_per_run for _, r in points if r}
    needles = per_run.pop() if len(per_run) == 1 else 0
    scale = needles or 1  # one needle count: the axis says needles; several: a fraction

    def frac_label(f: float) -> str:
        return f"{f * needles:.0f}/{needles}" if needles else f"{f:.0%}"

    chart = Chart("recall per serve (needles found per run)", [v.label for v in views], 0, scale,
                  f"needles of {needles}" if needles else "fraction found", width=680, height=280)
    chart.band(0, first.poisoned_max * scale, FAIL, f"poisoned band (≤ {frac_label(first.poisoned_max)})", 0.10)
    chart.band(first.poisoned_max * scale, first.pass_line * scale, WARN,
               "inconclusive: run more serves", 0.12)
    chart.line(first.pass_line * scale, PASS, f"pass line {frac_label(first.pass_line)}")
    for i, r in points:
        assert r is not None
        runs = r.runs_found or (r.found,)
        mean = (sum(runs) / len(runs)) / (r.needles_per_run or 1)
        color = STATUS_COLOR.get(r.status, NEUTRAL)
        chart.bar(i, mean * scale, color, 0.45, f"{views[i].label}: {r.found}/{r.total} ({r.status})")
        fractions = [run / (r.needles_per_run or 1) for run in runs]
        for f in fractions:  # each run's ring on its bar
            chart.dot(i, f * scale, "#ffffff" if f < mean else "#1a202c", dx=0)
        # Above the bar and every ring: a ring at the top of the axis would print over the value ("7o7").
        chart.value_label(i, max(mean, *fractions) * scale, f"{mean * scale:.1f}" if needles else f"{mean:.0%}")
    return chart.render()


def gsm8k_chart(views: Sequence[ReceiptView]) -> str | None:
    """Strict-match accuracy with its 95 % interval (± 1.96 standard errors), against the receipt's pass line."""
    points = [(i, v.gsm8k) for i, v in enumerate(views) if v.gsm8k]
    if not points:
        return None
    lows = [g.score - 1.96 * (g.stderr or 0) for _, g in points if g]
    # A minimum of 0 is no pass line (a receipt that sets none): drawing "pass line 0%" would claim one.
    lines = [g.min_accuracy for _, g in points if g and g.min_accuracy]
    lo = max(0.0, min([*lows, *lines]) - 0.05)
    hi = min(1.0, max(g.score + 1.96 * (g.stderr or 0) for _, g in points if g) + 0.05)
    chart = Chart("GSM8K strict match (95 % interval)", [v.label for v in views], lo, hi, "accuracy",
                  width=440, height=250, y_format=fmt_percent)
    for line in sorted(set(lines)):
        chart.line(line, FAIL, f"pass line {line:.0%}")
    for i, g in points:
        assert g is not None
        err = 1.96 * g.stderr if g.stderr is not None else None
        color = STATUS_COLOR.get(g.status, NEUTRAL)
        chart.point(i, g.score, color, g.score - err if err else None, g.score + err if err else None,
                    label=f"{views[i].label}: {g.score:.3f}" + (f" ± {err:.3f}" if err else ""))
        chart.value_label(i, g.score + (err or 0), f"{g.score:.1%}")
    return chart.render()


def acceptance_chart(views: Sequence[ReceiptView]) -> str | None:
    """DSpark / MTP draft acceptance per position, one bar per receipt in each position."""
    drafted = [(i, v) for i, v in enumerate(views)
               if v.acceptance and any(p is not None for p in v.acceptance.positions)]
    if not drafted:
        return None
    depth = max(len(v.acceptance.positions) for _, v in drafted if v.acceptance)
    chart = Chart("draft acceptance per position", [f"position {k + 1}" for k in range(depth)], 0, 1,
                  "acceptance rate", width=680, height=280, y_format=fmt_percent)
    share = 0.8 / len(drafted)
    for n, (i, v) in enumerate(drafted):
        assert v.acceptance is not None
        color = PALETTE[i % len(PALETTE)]
        mean = v.acceptance.mean_length
        chart.legend(color, f"{v.label}" + (f" (mean length {mean:.2f})" if mean else ""))
        offset = (n - (len(drafted) - 1) / 2) * share
        for k, rate in enumerate(v.acceptance.positions):
            if rate is not None:
                chart.bar(k, rate, color, share * 0.9, f"{v.label} position {k + 1}: {rate:.3f}", offset)
    return chart.render()
