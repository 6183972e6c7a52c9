"""`gate compare A B`: what changed between two receipts, judged by the seed's noise rules.

Seed: "the ± in a benchy row is the spread within one invocation; it runs 5–30× smaller than the
build-to-build spread", and "anything under ~15% on tg or ~2% on ctx_pp is not resolvable this way".
Those bands were measured on GB10; a receipt also carries its own repeated-run spread (llama-benchy's
per-run values), and a bench difference is called a regression only beyond BOTH the seed's band and
SPREAD_FACTOR x that spread. Anything less is "unresolved" with the seed's way to resolve it: blocked,
paired runs with an exact sign-flip permutation test, Holm-corrected. Recall is judged by its bands
(recall_bands): a score between the healthy and the poisoned band is inconclusive, never a regression.
Structured output and think leaks allow no failure at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from appliance.errors import ApplianceError
from appliance.gate.engine_steps import attribution
from appliance.gate.recall_bands import MORE_SERVES, PASS_LINE, POISONED_CEILING, Bands
from appliance.gate.receipt_model import (
    BenchCheck,
    BenchMetrics,
    Check,
    Engagement,
    Gsm8kCheck,
    Gsm8kMetrics,
    ReasoningCheck,
    RecallCheck,
    Receipt,
    StructuredCheck,
)
from appliance.jsonstrict import JsonObject
from appliance.redact import clip

TG_NOISE = 0.15
PP_NOISE = 0.02
GSM8K_SPREAD = 0.011
"""The seed's GSM8K gate: "within this gate's measured single-run spread (~1.1 pp)"."""
GSM8K_RUNS = 3
"""The seed resolved a GSM8K difference with "three runs per cell ... and the arms interleave"."""
SPREAD_FACTOR = 5.0
"""The seed's lower bound: build-to-build spread is 5-30x the spread inside one invocation."""
BLOCKS = 10
PAIRED = (f"unresolved: run blocked, paired runs — {BLOCKS} blocks, both builds inside each block on the same "
          f"machines, order alternated — then an exact sign-flip permutation test on the per-block differences, "
          f"Holm-corrected across the cells compared (the seed's design, the order alternated here: appliance gate "
          "paired A1:B1 A2:B2 ...)")

Verdict = Literal["regression", "improvement", "noise", "unresolved", "inconclusive", "same", "changed",
                  "not comparable"]


@dataclass(frozen=True)
class ReceiptDelta:
    area: str
    metric: str
    a: Any
    b: Any
    verdict: Verdict
    note: str = ""
    change: str = ""


@dataclass
class ReceiptComparison:
    warnings: list[str] = field(default_factory=list)
    findings: list[ReceiptDelta] = field(default_factory=list)

    @property
    def regressions(self) -> list[ReceiptDelta]:
        return [f for f in self.findings if f.verdict == "regression"]

    def to_json(self) -> JsonObject:
        return {"regression": bool(self.regressions), "warnings": self.warnings,
                "findings": [asdict(f) for f in self.findings]}


def _pct(a: float, b: float) -> str:
    return f"{(b - a) / a * 100:+.1f} %" if a else ""


def run_spread(values: Sequence[float]) -> float | None:
    """(max - min) / mean of one row's repeated runs; None without at least two runs."""
    if len(values) < 2 or not sum(values):
        return None
    return (max(values) - min(values)) / (sum(values) / len(values))


def bench_finding(test: str, kind: str, a: float, b: float, values_a: Sequence[float] = (),
                  values_b: Sequence[float] = ()) -> ReceiptDelta:
    """One llama-benchy row: a regression (or improvement) only beyond the seed's single-run band AND
    SPREAD_FACTOR x the larger repeated-run spread of the two receipts; else unresolved."""
    band = TG_NOISE if kind in ("tg", "ctx_tg") else PP_NOISE
    rel = (b - a) / a if a else 0.0
    if a == b:
        return ReceiptDelta("bench", test, a, b, "same")
    spreads = [x for x in (run_spread(values_a), run_spread(values_b)) if x is not None]
    if len(spreads) < 2:
        return ReceiptDelta("bench", test, a, b, "unresolved",
                       f"a receipt carries no repeated-run spread for this row (runs < 2); {PAIRED}", _pct(a, b))
    tol = max(band, SPREAD_FACTOR * max(spreads))
    on = "tg" if band == TG_NOISE else "ctx_pp" if kind == "ctx_pp" else "ctx_pp, applied here to pp"
    why = (f"the ~{band * 100:.0f} % seed band on {on}" if tol == band
           else f"{SPREAD_FACTOR:.0f} x this machine's run spread ({max(spreads) * 100:.1f} %)")
    if abs(rel) < tol:
        return ReceiptDelta("bench", test, a, b, "unresolved", f"within ±{tol * 100:.1f} % ({why}); {PAIRED}",
                            _pct(a, b))
    if rel < 0:
        return ReceiptDelta("bench", test, a, b, "regression", f"slower beyond ±{tol * 100:.1f} % ({why})", _pct(a, b))
    return ReceiptDelta("bench", test, a, b, "improvement", f"faster beyond ±{tol * 100:.1f} % ({why})", _pct(a, b))


def recall_finding(fa: int, na: int, fb: int, nb: int, min_b: float | None = None,
                   poisoned_b: float | None = None) -> ReceiptDelta:
    """Judged by B's bands: B in the poisoned band while A was not = regression; B between the bands =
    inconclusive (run more serves); B at or above its pass line = no regression."""
    bands = Bands(PASS_LINE if min_b is None else min_b,
                  min(POISONED_CEILING if poisoned_b is None else poisoned_b, PASS_LINE if min_b is None else min_b))
    pa, pb = fa / na, fb / nb
    ja, jb = bands.judge(pa), bands.judge(pb)
    a, b = f"{fa}/{na}", f"{fb}/{nb}"
    line = f"pass line {bands.pass_line * nb:.1f}/{nb}, poisoned band <= {bands.poisoned_ceiling * nb:.1f}/{nb}"
    if jb == "fail" and ja != "fail":
        return ReceiptDelta("recall", "needles found", a, b, "regression", f"fell into the poisoned band ({line})")
    if jb == "inconclusive":
        return ReceiptDelta("recall", "needles found", a, b, "inconclusive", f"{line}; {MORE_SERVES}")
    if jb == "pass" and ja != "pass":
        return ReceiptDelta("recall", "needles found", a, b, "improvement", f"back at or above the pass line ({line})")
    if pa == pb:
        return ReceiptDelta("recall", "needles found", a, b, "same")
    return ReceiptDelta("recall", "needles found", a, b, "noise", f"both in the same band ({line})")


def _guard(value: str | None) -> tuple[int, int] | None:
    try:
        active, total = str(value).split("/")
        return int(active), int(total)
    except ValueError:
        return None


def engagement_findings(a: Engagement, b: Engagement) -> list[ReceiptDelta]:
    out: list[ReceiptDelta] = []
    if not (a.available and b.available):
        return out
    ga, gb = _guard(a.guard), _guard(b.guard)
    if a.guard != b.guard:
        worse = ga is not None and (gb is None or gb[0] < ga[0])
        out.append(ReceiptDelta("engagement", "K4 guard managers active", a.guard, b.guard,
                                "regression" if worse else "changed",
                                "fewer KV managers guarded: the recall-poisoning race is open again" if worse else ""))
    if a.runner != b.runner:
        out.append(ReceiptDelta("engagement", "K5 model runner", a.runner, b.runner,
                                "regression" if a.runner == "v2" else "changed"))
    if a.sm120_decode and not b.sm120_decode:
        out.append(ReceiptDelta("engagement", "K7 SM120 decode", True, False, "regression",
                                "the FlashInfer SM120 decode kernel is no longer engaged (silent fallback)"))
    before = {(e.rule, e.name): e.status for e in a.expectations}
    for e in b.expectations:
        was = before.get((e.rule, e.name))
        if was == "pass" and e.status == "fail":
            out.append(ReceiptDelta("engagement", f"{e.rule} {e.name}", was, e.status, "regression",
                                    str(e.detail or "")))
        elif was == "fail" and e.status == "pass":
            out.append(ReceiptDelta("engagement", f"{e.rule} {e.name}", was, e.status, "improvement"))
    if len(b.fatal) > len(a.fatal):
        ids = ", ".join(str(h.id) for h in b.fatal)
        out.append(ReceiptDelta("engagement", "fatal signatures", len(a.fatal), len(b.fatal), "regression", ids))
    return out


def _acceptance_length(metrics: BenchMetrics) -> float | None:
    spec = metrics.spec_decode
    return spec.mean_acceptance_length if spec else None


def _status_finding(ca: Check, cb: Check) -> list[ReceiptDelta]:
    if ca.status == cb.status:
        return []
    ok = ("pass", "not_applicable")
    verdict: Verdict = ("regression" if ca.status in ok and cb.status in ("fail", "error")
                        else "improvement" if cb.status in ok and ca.status in ("fail", "error")
                        else "changed")
    return [ReceiptDelta("check", f"{ca.name} status", ca.status, cb.status, verdict, cb.summary[:160])]


def _bench_findings(ca: BenchCheck, cb: BenchCheck) -> list[ReceiptDelta]:
    ma, mb = ca.metrics or BenchMetrics(), cb.metrics or BenchMetrics()
    rows_a, rows_b = ma.measured(), mb.measured()
    len_a, len_b = _acceptance_length(ma), _acceptance_length(mb)
    out = []
    for test, ra in rows_a.items():
        rb = rows_b.get(test)
        if rb is None:
            out.append(ReceiptDelta("bench", test, ra.t_s, None, "not comparable", "row missing in B"))
            continue
        assert ra.t_s and rb.t_s  # measured() keeps rows with a rate
        f = bench_finding(test, ra.kind, ra.t_s, rb.t_s, ra.values or (), rb.values or ())
        if ra.kind in ("tg", "ctx_tg") and len_a and len_b and f.verdict != "same":
            why = attribution(ra.t_s, rb.t_s, len_a, len_b)
            f = replace(f, note=f"{f.note}; {why}" if f.note else why)
        out.append(f)
    return out


def _metric_findings(ca: Check, cb: Check) -> list[ReceiptDelta]:
    """What the two runs of one typed check measured; nothing for a check the comparison does not interpret."""
    if isinstance(ca, BenchCheck) and isinstance(cb, BenchCheck):
        return _bench_findings(ca, cb)
    if isinstance(ca, RecallCheck) and isinstance(cb, RecallCheck) and ca.metrics and cb.metrics:
        ma, mb = ca.metrics, cb.metrics
        if ma.found is None or mb.found is None or not ma.total or not mb.total:
            return []
        pb = cb.params
        return [recall_finding(ma.found, ma.total, mb.found, mb.total, pb.min_found if pb else None,
                               pb.poisoned_max if pb else None)]
    if isinstance(ca, StructuredCheck) and isinstance(cb, StructuredCheck) and ca.metrics and cb.metrics:
        sa, sb = ca.metrics, cb.metrics
        if sa.valid is None or sb.valid is None or not sa.total or not sb.total:
            return []
        bad_a, bad_b = sa.total - sa.valid, sb.total - sb.valid
        v: Verdict = "regression" if bad_b and not bad_a else "improvement" if bad_a and not bad_b else "same"
        return [ReceiptDelta("structured", "valid replies", f"{sa.valid}/{sa.total}", f"{sb.valid}/{sb.total}", v,
                             "any invalid reply is the sampler bug class")]
    if isinstance(ca, ReasoningCheck) and isinstance(cb, ReasoningCheck) and ca.metrics and cb.metrics:
        ra, rb = ca.metrics, cb.metrics
        out = []
        for label_, was, now, worse in (("efforts accepted", ra.accepted, rb.accepted, rb.accepted < ra.accepted),
                                        ("answers with </think>", ra.think_leaks, rb.think_leaks,
                                         rb.think_leaks > ra.think_leaks),
                                        ("effort not honoured", ra.effort_problems, rb.effort_problems,
                                         rb.effort_problems > ra.effort_problems)):
            if was != now:
                out.append(ReceiptDelta("reasoning", label_, was, now, "regression" if worse else "changed"))
        if ra.tool_call_parsed and not rb.tool_call_parsed:
            out.append(ReceiptDelta("reasoning", "tool call parsed", True, False, "regression"))
        return out
    if isinstance(ca, Gsm8kCheck) and isinstance(cb, Gsm8kCheck) and ca.metrics and cb.metrics:
        ga, gb = ca.metrics, cb.metrics
        if ga.strict_match is None or gb.strict_match is None:
            return []
        return [gsm8k_finding(ga, gb)]
    return []


def gsm8k_finding(ma: Gsm8kMetrics, mb: Gsm8kMetrics) -> ReceiptDelta:
    """Strict-match accuracy judged first as the seed judged it: a difference within the ~1.1 pp single-run spread
    is noise; with three runs per receipt, runs that interleave are noise and only separated runs are a difference.
    This project's own rule after that: with single runs beyond the spread, two standard errors decide where both
    receipts carry one, and a missing stderr is unknown (never 0), so the difference is unresolved until three runs
    per cell are taken."""
    a, b = ma.strict_match, mb.strict_match
    assert a is not None and b is not None  # the caller compares only two measured accuracies
    runs_a = [v for v in ma.strict_match_runs or [a] if v is not None]
    runs_b = [v for v in mb.strict_match_runs or [b] if v is not None]
    spread = f"the seed's single-run spread ~{GSM8K_SPREAD * 100:.1f} pp"
    if len(runs_a) >= GSM8K_RUNS and len(runs_b) >= GSM8K_RUNS:
        apart = max(runs_b) < min(runs_a) or min(runs_b) > max(runs_a)
        if not apart or abs(b - a) <= GSM8K_SPREAD:
            why = "the runs interleave" if not apart else f"separated, but within {spread}"
            return ReceiptDelta("gsm8k", "strict-match accuracy", a, b, "noise",
                                f"{len(runs_a)} vs {len(runs_b)} runs: {why}")
        v: Verdict = "regression" if b < a else "improvement"
        return ReceiptDelta("gsm8k", "strict-match accuracy", a, b, v,
                            f"every run of B {'below' if b < a else 'above'} every run of A, beyond {spread}")
    if abs(b - a) <= GSM8K_SPREAD:
        return ReceiptDelta("gsm8k", "strict-match accuracy", a, b, "noise", f"within {spread}")
    sa, sb = ma.strict_match_stderr, mb.strict_match_stderr
    if sa is None or sb is None:
        return ReceiptDelta("gsm8k", "strict-match accuracy", a, b, "unresolved",
                            f"beyond {spread} but a receipt carries no stderr (unknown, not 0): take "
                            f"{GSM8K_RUNS} runs per cell (appliance gate --checks gsm8k --gsm8k-runs {GSM8K_RUNS})")
    se = math.sqrt(sa**2 + sb**2)
    v = "regression" if a - b > 2 * se else "improvement" if b - a > 2 * se else "unresolved"
    note = f"two standard errors = {2 * se:.3f}" + (
        "" if v != "unresolved" else f"; take {GSM8K_RUNS} runs per cell (--gsm8k-runs {GSM8K_RUNS})")
    return ReceiptDelta("gsm8k", "strict-match accuracy", a, b, v, note)


def _like_for_like(a: Receipt, b: Receipt) -> list[str]:
    out = []
    na, nb = a.profile, b.profile
    if na.name != nb.name or na.digest != nb.digest:
        out.append(f"not like-for-like: profile {na.name} ({str(na.digest)[:12]}) vs {nb.name} ({str(nb.digest)[:12]})")
    la, lb = a.provenance.lock_digest, b.provenance.lock_digest
    if la != lb:
        out.append(f"not like-for-like: lock {str(la)[:12]} vs {str(lb)[:12]} (different stacks)")
    if a.size != b.size:
        out.append(f"not like-for-like: gate size {a.size} vs {b.size}")
    for label_, r in (("A", a), ("B", b)):
        if not r.complete:
            out.append(f"receipt {label_} is incomplete (interrupted): only its finished checks are compared")
    ba, bb = a.bench(), b.bench()
    if ba and bb and (ba.params.corpus if ba.params else None) != (bb.params.corpus if bb.params else None):
        out.append("bench corpora differ: speculative-decoding acceptance (and so tg) depends on the text")
    return out


def receipt_channel(r: Receipt) -> str | None:
    """The engine channel a receipt's serve ran (receipts before channels existed name none)."""
    return r.provenance.channel


def compare(a: Receipt, b: Receipt, *, across_channels: bool = False) -> ReceiptComparison:
    """Raises ApplianceError (exit 2) for receipts of two channels unless `across_channels`: a regression between
    engine lines is a different question from a regression of one stack, and is asked for by name."""
    chan_a, chan_b = receipt_channel(a), receipt_channel(b)
    if chan_a != chan_b and not across_channels:
        raise ApplianceError(
            f"receipt A is of channel {chan_a or 'unknown (no channel recorded)'}, receipt B of channel "
            f"{chan_b or 'unknown (no channel recorded)'}", field="gate compare", value=f"{chan_a} vs {chan_b}",
            fix="compare receipts of one channel, or pass --across-channels to compare two engine lines knowingly",
            reason="across channels the engine, its kernels and its defaults all differ: a delta is not the change "
                   "under test")
    result = ReceiptComparison(warnings=_like_for_like(a, b))
    if chan_a != chan_b:
        result.warnings.insert(0, f"across channels (--across-channels): {chan_a} vs {chan_b}: engine, kernels and "
                                  f"defaults differ, not only the change under test")
    if a.engine_version != b.engine_version:
        result.findings.append(ReceiptDelta("provenance", "engine version", a.engine_version, b.engine_version,
                                            "changed"))
    result.findings += engagement_findings(a.engagement, b.engagement)
    for ca in a.checks:
        cb = b.check(ca.name)
        if cb is None:
            result.findings.append(ReceiptDelta("check", ca.name, ca.status, None, "not comparable", "not run in B"))
            continue
        result.findings += _status_finding(ca, cb) + _metric_findings(ca, cb)
    if a.verdict == "pass" and b.verdict == "fail":
        result.findings.append(ReceiptDelta("receipt", "verdict", "pass", "fail", "regression"))
    return result


def render(result: ReceiptComparison, a_label: str, b_label: str) -> str:
    """Every name and value from a receipt through clip(): a receipt from elsewhere cannot put a terminal sequence
    (or a secret) on the screen."""
    lines = [f"A: {clip(a_label, 300)}", f"B: {clip(b_label, 300)}", ""]
    lines += [f"warning: {clip(w, 500)}" for w in result.warnings]
    if result.warnings:
        lines.append("")
    names = [clip(f"{f.area} {f.metric}", 120) for f in result.findings]
    width = max((len(n) for n in names), default=10)
    for f, name in zip(result.findings, names, strict=True):
        change = f" ({f.change})" if f.change else ""
        lines.append(f"{f.verdict.upper():<14} {name:<{width}}  {clip(str(f.a), 120)} -> {clip(str(f.b), 120)}{change}"
                     + (f"  {clip(f.note, 500)}" if f.note else ""))
    n = len(result.regressions)
    lines += ["", f"{n} regression(s)" if n else "no regression"]
    return "\n".join(lines)


def label(r: Receipt) -> str:
    return (f"{r.profile.name} vLLM {r.engine_version} lock {str(r.provenance.lock_digest)[:12]} at {r.started_at} "
            f"({r.verdict})")
