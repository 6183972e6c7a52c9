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
from appliance.gate.receipt import check

TG_NOISE = 0.15
PP_NOISE = 0.02
SPREAD_FACTOR = 5.0
"""The seed's lower bound: build-to-build spread is 5-30x the spread inside one invocation."""
BLOCKS = 10
PAIRED = (f"unresolved: run blocked, paired runs — {BLOCKS} blocks, both builds inside each block on the same "
          f"machines, order alternated — then an exact sign-flip permutation test on the per-block differences, "
          f"Holm-corrected across the cells compared (the seed's design: appliance gate paired A1:B1 A2:B2 ...)")

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

    def to_json(self) -> dict[str, Any]:
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
    why = (f"the ~{band * 100:.0f} % seed band on {'tg' if band == TG_NOISE else 'prefill'}"
           if tol == band else f"{SPREAD_FACTOR:.0f} x this machine's run spread ({max(spreads) * 100:.1f} %)")
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


def _guard(value: Any) -> tuple[int, int] | None:
    try:
        active, total = str(value).split("/")
        return int(active), int(total)
    except ValueError:
        return None


def engagement_findings(a: dict[str, Any], b: dict[str, Any]) -> list[ReceiptDelta]:
    out: list[ReceiptDelta] = []
    if not (a.get("available") and b.get("available")):
        return out
    ga, gb = _guard(a.get("guard")), _guard(b.get("guard"))
    if a.get("guard") != b.get("guard"):
        worse = ga is not None and (gb is None or gb[0] < ga[0])
        out.append(ReceiptDelta("engagement", "K4 guard managers active", a.get("guard"), b.get("guard"),
                           "regression" if worse else "changed",
                           "fewer KV managers guarded: the recall-poisoning race is open again" if worse else ""))
    if a.get("runner") != b.get("runner"):
        worse = a.get("runner") == "v2"
        out.append(ReceiptDelta("engagement", "K5 model runner", a.get("runner"), b.get("runner"),
                           "regression" if worse else "changed"))
    if a.get("sm120_decode") and not b.get("sm120_decode"):
        out.append(ReceiptDelta("engagement", "K7 SM120 decode", True, False, "regression",
                           "the FlashInfer SM120 decode kernel is no longer engaged (silent fallback)"))
    before = {(e["rule"], e["name"]): e["status"] for e in a.get("expectations") or []}
    for e in b.get("expectations") or []:
        was = before.get((e["rule"], e["name"]))
        if was == "pass" and e["status"] == "fail":
            out.append(ReceiptDelta("engagement", f"{e['rule']} {e['name']}", was, e["status"], "regression",
                               str(e.get("detail") or "")))
        elif was == "fail" and e["status"] == "pass":
            out.append(ReceiptDelta("engagement", f"{e['rule']} {e['name']}", was, e["status"], "improvement"))
    fa, fb = len(a.get("fatal") or []), len(b.get("fatal") or [])
    if fb > fa:
        ids = ", ".join(str(h.get("id")) for h in b.get("fatal") or [])
        out.append(ReceiptDelta("engagement", "fatal signatures", fa, fb, "regression", ids))
    return out


def _acceptance_length(metrics: dict[str, Any]) -> float | None:
    spec = metrics.get("spec_decode") or {}
    value = spec.get("mean_acceptance_length")
    return float(value) if isinstance(value, int | float) and value >= 1 else None


def _check_findings(ca: dict[str, Any], cb: dict[str, Any]) -> list[ReceiptDelta]:
    name, out = ca["name"], []
    ok = ("pass", "not_applicable")
    if ca["status"] != cb["status"]:
        verdict: Verdict = ("regression" if ca["status"] in ok and cb["status"] in ("fail", "error")
                            else "improvement" if cb["status"] in ok and ca["status"] in ("fail", "error")
                            else "changed")
        out.append(ReceiptDelta("check", f"{name} status", ca["status"], cb["status"], verdict, cb["summary"][:160]))
    ma, mb = ca.get("metrics") or {}, cb.get("metrics") or {}
    if name == "bench":
        rows_a = {r["test"]: r for r in ma.get("rows") or [] if r.get("t_s")}
        rows_b = {r["test"]: r for r in mb.get("rows") or [] if r.get("t_s")}
        len_a, len_b = _acceptance_length(ma), _acceptance_length(mb)
        for test, ra in rows_a.items():
            if test in rows_b:
                f = bench_finding(test, ra["kind"], ra["t_s"], rows_b[test]["t_s"], ra.get("values") or (),
                                  rows_b[test].get("values") or ())
                if ra["kind"] in ("tg", "ctx_tg") and len_a and len_b and f.verdict != "same":
                    why = attribution(ra["t_s"], rows_b[test]["t_s"], len_a, len_b)
                    f = replace(f, note=f"{f.note}; {why}" if f.note else why)
                out.append(f)
            else:
                out.append(ReceiptDelta("bench", test, ra["t_s"], None, "not comparable", "row missing in B"))
    elif name == "recall" and ma.get("total") and mb.get("total"):
        pb = cb.get("params") or {}
        out.append(recall_finding(ma["found"], ma["total"], mb["found"], mb["total"], pb.get("min_found"),
                                  pb.get("poisoned_max")))
    elif name == "structured" and ma.get("total") and mb.get("total"):
        bad_a, bad_b = ma["total"] - ma["valid"], mb["total"] - mb["valid"]
        v: Verdict = "regression" if bad_b and not bad_a else "improvement" if bad_a and not bad_b else "same"
        out.append(ReceiptDelta("structured", "valid replies", f"{ma['valid']}/{ma['total']}",
                           f"{mb['valid']}/{mb['total']}", v, "any invalid reply is the sampler bug class"))
    elif name == "reasoning" and ma and mb:
        for key, label in (("accepted", "efforts accepted"), ("think_leaks", "answers with </think>"),
                           ("effort_problems", "effort not honoured")):
            worse = mb.get(key, 0) < ma.get(key, 0) if key == "accepted" else mb.get(key, 0) > ma.get(key, 0)
            if ma.get(key) != mb.get(key):
                out.append(ReceiptDelta("reasoning", label, ma.get(key), mb.get(key),
                                        "regression" if worse else "changed"))
        if ma.get("tool_call_parsed") and not mb.get("tool_call_parsed"):
            out.append(ReceiptDelta("reasoning", "tool call parsed", True, False, "regression"))
    elif name == "gsm8k" and ma.get("strict_match") is not None and mb.get("strict_match") is not None:
        a, b = ma["strict_match"], mb["strict_match"]
        se = math.sqrt((ma.get("strict_match_stderr") or 0) ** 2 + (mb.get("strict_match_stderr") or 0) ** 2)
        v = "regression" if a - b > 2 * se else "improvement" if b - a > 2 * se else "noise"
        out.append(ReceiptDelta("gsm8k", "strict-match accuracy", a, b, v, f"two standard errors = {2 * se:.3f}"))
    return out


def _like_for_like(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    pa, pb = a["provenance"], b["provenance"]
    out = []
    na, nb = (pa.get("profile") or {}), (pb.get("profile") or {})
    if na.get("name") != nb.get("name") or na.get("digest") != nb.get("digest"):
        out.append(f"not like-for-like: profile {na.get('name')} ({str(na.get('digest'))[:12]}) vs "
                   f"{nb.get('name')} ({str(nb.get('digest'))[:12]})")
    if pa.get("lock_digest") != pb.get("lock_digest"):
        out.append(f"not like-for-like: lock {str(pa.get('lock_digest'))[:12]} vs {str(pb.get('lock_digest'))[:12]} "
                   f"(different stacks)")
    if a.get("size") != b.get("size"):
        out.append(f"not like-for-like: gate size {a.get('size')} vs {b.get('size')}")
    for label, r in (("A", a), ("B", b)):
        if not r.get("complete"):
            out.append(f"receipt {label} is incomplete (interrupted): only its finished checks are compared")
    ba, bb = check(a, "bench"), check(b, "bench")
    if ba and bb and (ba.get("params") or {}).get("corpus") != (bb.get("params") or {}).get("corpus"):
        out.append("bench corpora differ: speculative-decoding acceptance (and so tg) depends on the text")
    return out


def receipt_channel(r: dict[str, Any]) -> str | None:
    """The engine channel a receipt's serve ran (receipts before channels existed name none)."""
    return r["provenance"].get("channel")


def compare(a: dict[str, Any], b: dict[str, Any], *, across_channels: bool = False) -> ReceiptComparison:
    """Raises ApplianceError (exit 2) for receipts of two channels unless `across_channels`: a regression between
    engine lines is a different question from a regression of one stack, and is asked for by name."""
    ca, cb = receipt_channel(a), receipt_channel(b)
    if ca != cb and not across_channels:
        raise ApplianceError(
            f"receipt A is of channel {ca or 'unknown (no channel recorded)'}, receipt B of channel "
            f"{cb or 'unknown (no channel recorded)'}", field="gate compare", value=f"{ca} vs {cb}",
            fix="compare receipts of one channel, or pass --across-channels to compare two engine lines knowingly",
            reason="across channels the engine, its kernels and its defaults all differ: a delta is not the change "
                   "under test")
    result = ReceiptComparison(warnings=_like_for_like(a, b))
    if ca != cb:
        result.warnings.insert(0, f"across channels (--across-channels): {ca} vs {cb}: engine, kernels and "
                                  f"defaults differ, not only the change under test")
    va = ((a["provenance"].get("engine") or {}).get("version"))
    vb = ((b["provenance"].get("engine") or {}).get("version"))
    if va != vb:
        result.findings.append(ReceiptDelta("provenance", "engine version", va, vb, "changed"))
    result.findings += engagement_findings(a["engagement"], b["engagement"])
    for ca in a["checks"]:
        cb = check(b, ca["name"])
        if cb is None:
            result.findings.append(ReceiptDelta("check", ca["name"], ca["status"], None, "not comparable",
                                                "not run in B"))
            continue
        result.findings += _check_findings(ca, cb)
    if a.get("verdict") == "pass" and b.get("verdict") == "fail":
        result.findings.append(ReceiptDelta("receipt", "verdict", "pass", "fail", "regression"))
    return result


def render(result: ReceiptComparison, a_label: str, b_label: str) -> str:
    lines = [f"A: {a_label}", f"B: {b_label}", ""]
    lines += [f"warning: {w}" for w in result.warnings]
    if result.warnings:
        lines.append("")
    width = max((len(f"{f.area} {f.metric}") for f in result.findings), default=10)
    for f in result.findings:
        change = f" ({f.change})" if f.change else ""
        lines.append(f"{f.verdict.upper():<14} {f'{f.area} {f.metric}':<{width}}  {f.a} -> {f.b}{change}"
                     + (f"  {f.note}" if f.note else ""))
    n = len(result.regressions)
    lines += ["", f"{n} regression(s)" if n else "no regression"]
    return "\n".join(lines)


def label(r: dict[str, Any]) -> str:
    p = r["provenance"]
    return (f"{(p.get('profile') or {}).get('name')} vLLM {(p.get('engine') or {}).get('version')} "
            f"lock {str(p.get('lock_digest'))[:12]} at {r.get('started_at')} ({r.get('verdict')})")
