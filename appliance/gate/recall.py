"""Long-context recall: needles ("the secret code of Arthur is 481516") planted at known depths in filler
text, `c` requests sent at once, score = codes found / needles planted (after the seed's "arthur c=12", which
it names without describing: recall_bands applies its figures here as fractions).

Every request carries the SAME filler with its own needles, so concurrent requests share a long
prefix: the prefix-cache race behind K4 (a block hash published before its KV is written) is what
made healthy serves (means 20.7-23.0/24) fall to 11.5/24, and only shared prefixes under concurrency reach it.
Planting and scoring are pure functions, tested on answers whose right result is known.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import asdict, dataclass

from appliance.gate.client import ServeClient, ServeError, chat_text, count_tokens
from appliance.gate.context import GateContext
from appliance.gate.corpus import filler
from appliance.gate.recall_bands import CALIBRATION, MORE_SERVES, ONE_SERVE, Bands, exposed
from appliance.gate.result import CheckResult, GateStatus, utc_now
from appliance.gate.sizing import RecallParams

RULES = ("K4",)
"""The rule ids this check is evidence for (`appliance rules`)."""

NAMES = ("Arthur", "Beatrice", "Cedric", "Dorothea", "Edmund", "Fenella", "Gideon", "Harriet", "Ignatius",
         "Josephine", "Kenneth", "Lavinia", "Montague", "Nerissa", "Oswald", "Philippa", "Quentin", "Rosalind",
         "Sebastian", "Theodora", "Ulric", "Verity", "Wilfred", "Ximena", "Yorick", "Zenobia")
CHARS_PER_TOKEN = 4.0
"""Used only when the serve has no /tokenize: English prose runs at about four characters a token."""


@dataclass(frozen=True)
class Needle:
    name: str
    code: str
    depth: float
    """Where it sits in the filler, 0 = start, 1 = end."""

    @property
    def sentence(self) -> str:
        return f"The secret code of {self.name} is {self.code}."


@dataclass(frozen=True)
class RecallCase:
    index: int
    needles: tuple[Needle, ...]
    prompt: str


@dataclass(frozen=True)
class CaseScore:
    index: int
    found: tuple[str, ...]
    missing: tuple[str, ...]
    wrong: tuple[str, ...] = ()
    """Names whose line in the answer gives a code that is not theirs."""
    error: str | None = None


def make_needles(cases: int, per_case: int, seed: int) -> list[tuple[Needle, ...]]:
    """Distinct names and six-digit codes; depths spread evenly over all needles so each depth band is probed."""
    total = cases * per_case
    if total > len(NAMES):
        raise ValueError(f"{cases} requests x {per_case} needles: at most {len(NAMES)} needles (one per name)")
    rng = random.Random(seed)
    names = NAMES[:total]
    codes = rng.sample(range(100000, 1000000), total)
    slots = [(i + 0.5) / total for i in range(total)]
    rng.shuffle(slots)
    out = []
    for c in range(cases):
        picked = range(c * per_case, (c + 1) * per_case)
        out.append(tuple(sorted((Needle(names[i], str(codes[i]), round(slots[i], 4)) for i in picked),
                                key=lambda n: n.depth)))
    return out


def plant(hay: str, needles: tuple[Needle, ...]) -> str:
    """Insert each needle's sentence at the sentence boundary nearest to its depth."""
    cuts = [m.end() for m in re.finditer(r"[.!?] ", hay)] or [len(hay)]
    pieces: list[str] = []
    last = 0
    for needle in sorted(needles, key=lambda n: n.depth):
        target = needle.depth * len(hay)
        cut = min(cuts, key=lambda c: abs(c - target))
        cut = max(cut, last)
        pieces += [hay[last:cut], needle.sentence + " "]
        last = cut
    pieces.append(hay[last:])
    return "".join(pieces)


def question(needles: tuple[Needle, ...]) -> str:
    names = " and ".join(n.name for n in needles)
    lines = "\n".join(f"{n.name}: <code>" for n in needles)
    return (f"The text above hides secret codes. What is the secret code of {names}? "
            f"Answer with one line per name, exactly like this:\n{lines}")


def build_cases(hay: str, cases: int, per_case: int, seed: int) -> list[RecallCase]:
    return [RecallCase(i, needles, f"{plant(hay, needles)}\n\n{question(needles)}")
            for i, needles in enumerate(make_needles(cases, per_case, seed))]


def score(case: RecallCase, answer: str) -> CaseScore:
    """A needle is found when its code appears in the answer. A line naming someone with another six-digit
    number is counted as `wrong` (a confabulated code), which also does not count as found."""
    found, missing, wrong = [], [], []
    for needle in case.needles:
        if re.search(rf"(?<!\d){needle.code}(?!\d)", answer):
            found.append(needle.name)
            continue
        missing.append(needle.name)
        line = re.search(rf"{re.escape(needle.name)}\b[^\n]*?(?<!\d)(\d{{6}})(?!\d)", answer)
        if line:
            wrong.append(needle.name)
    return CaseScore(case.index, tuple(found), tuple(missing), tuple(wrong))


def total(scores: list[CaseScore], cases: list[RecallCase]) -> tuple[int, int]:
    return sum(len(s.found) for s in scores), sum(len(c.needles) for c in cases)


async def _hay(client: ServeClient, model: str, tokens: int, seed: int) -> tuple[str, int | None]:
    """Filler of about `tokens` tokens, measured with the serve's own tokenizer where it has one."""
    sample = filler(8000, seed)
    counted = await count_tokens(client, model, sample)
    ratio = len(sample) / counted if counted else CHARS_PER_TOKEN
    hay = filler(int(tokens * ratio), seed)
    measured = await count_tokens(client, model, hay)
    for _ in range(3):  # filler ends at a sentence, so a cut can overshoot by a few tokens: shrink, bounded
        if not measured or measured <= tokens:
            break
        hay = filler(int(len(hay) * tokens / measured * 0.99), seed)
        measured = await count_tokens(client, model, hay)
    return hay, measured


async def _ask(client: ServeClient, ctx: GateContext, case: RecallCase, p: RecallParams) -> tuple[str, str | None]:
    body: dict[str, object] = {"model": ctx.model, "messages": [{"role": "user", "content": case.prompt}],
                               "max_tokens": p.max_tokens, "temperature": 0.0}
    if ctx.profile.server.reasoning_parser:
        body["reasoning_effort"] = "none"  # recall is about the KV cache, not about thinking time
    try:
        reply = await client.post("/v1/chat/completions", body, timeout=p.timeout_s)
    except ServeError as exc:
        return "", str(exc)
    if not reply.ok:
        return "", reply.error_text()
    content, reasoning = chat_text(reply.body)
    return f"{content}\n{reasoning}".strip(), None


async def _one_run(client: ServeClient, ctx: GateContext, p: RecallParams, hay: str, hay_tokens: int | None,
                   run: int) -> tuple[list[RecallCase], list[CaseScore], list[str]]:
    cases = build_cases(hay, p.concurrency, p.needles_per_request, p.seed + run)
    label = f"run {run + 1}/{p.runs}: " if p.runs > 1 else ""
    ctx.progress.step(f"{label}{len(cases)} requests at once, ~{hay_tokens or p.context_tokens} tokens each")
    done = 0

    async def one(case: RecallCase) -> tuple[str, str | None]:
        nonlocal done
        answer = await _ask(client, ctx, case, p)
        done += 1
        ctx.progress.step(f"{label}{done}/{len(cases)} answered")
        return answer

    answers = await asyncio.gather(*(one(c) for c in cases))
    scores = []
    for case, (text, error) in zip(cases, answers, strict=True):
        s = score(case, text)
        scores.append(CaseScore(s.index, s.found, s.missing, s.wrong, error))
    return cases, scores, [text for text, _ in answers]


async def _run(ctx: GateContext, p: RecallParams) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    bands = Bands(p.min_found, min(p.poisoned_max, p.min_found))
    per_run: list[tuple[list[RecallCase], list[CaseScore], list[str]]] = []
    async with ServeClient(ctx.url, timeout=p.timeout_s, transport=ctx.transport) as client:
        hay, hay_tokens = await _hay(client, ctx.model, p.context_tokens, p.seed)
        for run in range(p.runs):  # one after another: each run's requests race each other, not the last run's
            per_run.append(await _one_run(client, ctx, p, hay, hay_tokens, run))
    runs_found = [total(scores, cases)[0] for cases, scores, _ in per_run]
    needles = sum(len(c.needles) for c in per_run[0][0])
    found = sum(runs_found)
    errors = [s for _, scores, _ in per_run for s in scores if s.error]
    mean = found / (needles * p.runs)
    band = bands.judge(mean)
    status: GateStatus = "error" if errors else band
    if status == "pass" and exposed(ctx.profile):
        status = "inconclusive"  # the healthy band on one serve: the race poisons about half of cold serves
    each = f" (runs {', '.join(map(str, runs_found))}; mean {mean * needles:.1f}/{needles})" if p.runs > 1 else ""
    summary = (f"{found}/{needles * p.runs} needles found{each} ({p.concurrency} concurrent requests, "
               f"~{hay_tokens} tokens)")
    if errors:
        summary += f"; {len(errors)} request(s) failed: {errors[0].error}"
    elif status == "fail":
        summary += f"; in the poisoned band (<= {bands.poisoned_ceiling * needles:.1f}/{needles})"
    elif status == "inconclusive" and band == "pass":
        summary += f"; in the healthy band on this serve, but {ONE_SERVE}"
    elif status == "inconclusive":
        summary += (f"; between the poisoned band (<= {bands.poisoned_ceiling * needles:.1f}) and the pass line "
                    f"({bands.pass_line * needles:.1f}): {MORE_SERVES}")
    return CheckResult(
        "recall", status, summary, started_at=started, seconds=time.monotonic() - began,
        params={"concurrency": p.concurrency, "needles_per_request": p.needles_per_request,
                "context_tokens": p.context_tokens, "max_tokens": p.max_tokens, "min_found": round(p.min_found, 4),
                "poisoned_max": round(bands.poisoned_ceiling, 4), "runs": p.runs, "seed": p.seed,
                "bands_calibrated_on": CALIBRATION},
        metrics={"found": found, "total": needles * p.runs, "score": f"{found}/{needles * p.runs}",
                 "context_tokens": hay_tokens, "runs_found": runs_found, "needles_per_run": needles,
                 "serve_mean": round(mean, 4), "band": band,
                 "wrong": sum(len(s.wrong) for _, scores, _ in per_run for s in scores)},
        details={"cases": [{**asdict(s), "run": run, "depths": [n.depth for n in c.needles], "answer": text[:300]}
                           for run, (cases, scores, texts) in enumerate(per_run)
                           for s, c, text in zip(scores, cases, texts, strict=True)]},
    )


def run(ctx: GateContext) -> CheckResult:
    return asyncio.run(_run(ctx, ctx.params.recall))
