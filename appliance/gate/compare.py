"""`gate compare A B`: what changed between two receipts, judged by the seed's noise rules.

The `±` inside one llama-benchy invocation is 5-30x smaller than the spread between builds, so it
cannot tell a real change from noise. From single runs, differences under ~15 % on decode (tg) or
~2 % on prefill (pp, ctx_pp) are NOT resolvable: they are reported as noise with the way to resolve
them, never as a regression. Correctness signals have their own rules: structured output and think
leaks allow no failure at all; recall uses a two-standard-error band on the found fraction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from appliance.gate.receipt import check

TG_NOISE = 0.15
PP_NOISE = 0.02
BLOCKS = 5
PAIRED = (f"within noise; to resolve, run blocked, paired runs (both builds alternated, ≥ {BLOCKS} blocks) "
          f"and compare with a paired test")
RECALL_FLOOR = 2 / 24
"""A healthy serve scores 22-24/24: two needles of spread are normal."""

Verdict = Literal["regression", "improvement", "noise", "same", "changed", "not comparable"]


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


def bench_finding(test: str, kind: str, a: float, b: float) -> ReceiptDelta:
    """One llama-benchy row: noise unless the relative change passes the seed's single-run band."""
    tol = TG_NOISE if kind in ("tg", "ctx_tg") else PP_NOISE
    rel = (b - a) / a if a else 0.0
    band = f"the ~{tol * 100:.0f} % single-run band on {'tg' if tol == TG_NOISE else 'prefill'}"
    if a == b:
        return ReceiptDelta("bench", test, a, b, "same")
    if abs(rel) < tol:
        return ReceiptDelta("bench", test, a, b, "noise", PAIRED, _pct(a, b))
    if rel < 0:
        return ReceiptDelta("bench", test, a, b, "regression", f"slower beyond {band}", _pct(a, b))
    return ReceiptDelta("bench", test, a, b, "improvement", f"faster beyond {band}", _pct(a, b))


def recall_finding(fa: int, na: int, fb: int, nb: int, min_b: float | None) -> ReceiptDelta:
    """Found fractions differ beyond max(2/24, two standard errors of the difference) = real; or B falls
    under its own pass threshold while A was at or above it."""
    pa, pb = fa / na, fb / nb
    pooled = (fa + fb) / (na + nb)
    se = math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
    tol = max(RECALL_FLOOR, 2 * se)
    a, b = f"{fa}/{na}", f"{fb}/{nb}"
    crossed = min_b is not None and pb < min_b <= pa
    if pa - pb > tol or crossed:
        why = f"fell under the pass threshold {min_b:.2f}" if crossed else f"drop beyond the ±{tol:.2f} band"
        return ReceiptDelta("recall", "needles found", a, b, "regression", why)
    if pb - pa > tol:
        return ReceiptDelta("recall", "needles found", a, b, "improvement", f"gain beyond the ±{tol:.2f} band")
    return ReceiptDelta("recall", "needles found", a, b, "same" if pa == pb else "noise",
                   "" if pa == pb else f"within ±{tol:.2f} (two standard errors, at least 2/24)")


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
        for test, ra in rows_a.items():
            if test in rows_b:
                out.append(bench_finding(test, ra["kind"], ra["t_s"], rows_b[test]["t_s"]))
            else:
                out.append(ReceiptDelta("bench", test, ra["t_s"], None, "not comparable", "row missing in B"))
    elif name == "recall" and ma.get("total") and mb.get("total"):
        out.append(recall_finding(ma["found"], ma["total"], mb["found"], mb["total"],
                                  (cb.get("params") or {}).get("min_found")))
    elif name == "structured" and ma.get("total") and mb.get("total"):
        bad_a, bad_b = ma["total"] - ma["valid"], mb["total"] - mb["valid"]
        v: Verdict = "regression" if bad_b and not bad_a else "improvement" if bad_a and not bad_b else "same"
        out.append(ReceiptDelta("structured", "valid replies", f"{ma['valid']}/{ma['total']}",
                           f"{mb['valid']}/{mb['total']}", v, "any invalid reply is the sampler bug class"))
    elif name == "reasoning" and ma and mb:
        for key, label in (("accepted", "efforts accepted"), ("think_leaks", "answers with </think>")):
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


def compare(a: dict[str, Any], b: dict[str, Any]) -> ReceiptComparison:
    result = ReceiptComparison(warnings=_like_for_like(a, b))
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
