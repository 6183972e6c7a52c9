"""The long-context coherence gate in the shape of the harness's ("arthur", checks C5, C6, D*-c1).

The shape, as the harness defines it: a prompt of numbered filler lines with three validation codes planted at
lines 17, n/2 and n-13, the question asking for the three codes; `concurrency` identical requests at once,
`repeat` times (so c=12 x 2 = 24 requests, and a shared prefix whose cache blocks the concurrent requests race
for); greedy, thinking off. A request passes when its answer holds all three codes and reads as coherent English:
no DeepSeek control token leaked into it, no U+FFFD, at most 15 % of its letters outside the Latin scripts, no
degenerate repetition. The run's result is `passed=N/total` requests. The filler wording and the codes are this
module's own; counts, positions, budgets and criteria are the harness's.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
import time
from dataclasses import dataclass

from appliance.canary.client import ApiRequest
from appliance.gate.battery.sizing import CoherenceParams
from appliance.gate.client import ServeClient, ServeError, chat_text, count_tokens, prompt_tokens
from appliance.gate.context import GateContext
from appliance.jsonstrict import JsonObject

CODES = ("amber-falcon-23", "cedar-lynx-58", "onyx-heron-91")
_CONTROL_TOKEN = re.compile(r"<｜[^｜<>]{1,40}｜>")
"""DeepSeek's special tokens (`<｜begin▁of▁sentence｜>`): one in decoded text is always a defect."""


@dataclass(frozen=True)
class CoherencePrompt:
    text: str
    line_count: int
    codes: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def code_lines(line_count: int) -> dict[int, int]:
    """Line number -> index of the code planted there: near the start, the middle and near the end."""
    if line_count < 40:
        raise ValueError(f"line_count {line_count}: at least 40 lines hold three codes apart")
    return {17: 0, line_count // 2: 1, line_count - 13: 2}


def build_prompt(line_count: int, codes: tuple[str, ...] = CODES) -> CoherencePrompt:
    where = code_lines(line_count)
    names = ("first", "middle", "last")
    rows = ["You are checking long-context recall.",
            "Read every line below. Answer only from what the lines say.",
            "Never claim that the context is absent or incomplete.", ""]
    for n in range(1, line_count + 1):
        if n in where:
            i = where[n]
            rows.append(f"Line {n:04d}: MARKER {names[i].upper()}: the {names[i]} validation code is {codes[i]}.")
        else:
            rows.append(f"Line {n:04d}: unit={n % 19:02d}; slot={n % 31:02d}; digest={(n * 41) % 1013:04d}; "
                        f"steady padding text for the long-context recall check.")
    rows += ["", "Task:", "In one short paragraph, give the first, the middle and the last validation code from the "
             "lines above, written exactly as they appear."]
    return CoherencePrompt("\n".join(rows), line_count, codes)


def _non_latin_letter(ch: str) -> bool:
    """A letter outside Basic Latin, Latin-1 and Latin Extended (A, B, Additional): Greek, Cyrillic, CJK, ..."""
    if not ch.isalpha():
        return False
    cp = ord(ch)
    return not (cp <= 0x024F or 0x1E00 <= cp <= 0x1EFF)


def _degenerate(text: str) -> bool:
    """Collapsed output: two distinct characters or fewer, or one character run over half of it."""
    compact = "".join(text.split())
    if len(compact) < 24:
        return False
    if len(set(compact)) <= 2:
        return True
    longest = run = 1
    for a, b in itertools.pairwise(compact):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    return longest >= max(20, len(compact) // 2)


def judge_answer(text: str, codes: tuple[str, ...], max_non_latin: float = 0.15) -> tuple[bool, str]:
    """(passed, why) for one answer."""
    lowered = text.lower()
    missing = [c for c in codes if c.lower() not in lowered]
    if missing:
        return False, f"missing code(s): {', '.join(missing)}"
    if "missing" in lowered and "context" in lowered:
        return False, "says the context is missing"
    stripped = text.strip()
    if not stripped:
        return False, "empty answer"
    leaked = _CONTROL_TOKEN.findall(text)
    if leaked:
        return False, f"control token(s) in the answer: {sorted(set(leaked))}"
    if "\ufffd" in text:
        return False, "U+FFFD replacement character in the answer"
    letters = [ch for ch in text if ch.isalpha()]
    share = sum(map(_non_latin_letter, letters)) / len(letters) if letters else 0.0
    if share > max_non_latin:
        return False, f"non-Latin letters {share:.2f} > {max_non_latin:.2f} (mixed-script gibberish)"
    if _degenerate(stripped):
        return False, "degenerate repetition"
    return True, "all three codes, coherent"


async def fit(client: ServeClient, ctx: GateContext, p: CoherenceParams) -> CoherencePrompt:
    """The prompt at p.line_count lines, shortened (and said so) where it would not fit max_model_len."""
    prompt = build_prompt(p.line_count)
    room = ctx.profile.limits.max_model_len - p.max_tokens - 64  # 64: the chat template
    tokens = await count_tokens(client, ctx.model, prompt.text)
    while tokens and tokens > room and prompt.line_count > 40:
        prompt = build_prompt(max(40, int(prompt.line_count * room / tokens * 0.97)))
        tokens = await count_tokens(client, ctx.model, prompt.text)
    return prompt


def body(ctx: GateContext, prompt: CoherencePrompt, p: CoherenceParams) -> ApiRequest:
    out: ApiRequest = {"model": ctx.model, "messages": [{"role": "user", "content": prompt.text}],
                       "max_tokens": p.max_tokens, "temperature": 0.0}
    if ctx.profile.server.reasoning_parser:
        out["reasoning_effort"] = "none"  # thinking off: the fragile direct path, as the harness asks
    return out


async def one_run(client: ServeClient, ctx: GateContext, prompt: CoherencePrompt, p: CoherenceParams,
                  label: str) -> list[JsonObject]:
    """`concurrency` requests at once, `repeat` times over: one row per request."""
    sem = asyncio.Semaphore(p.concurrency)
    done = 0
    total = p.concurrency * p.repeat

    async def one(index: int) -> JsonObject:
        nonlocal done
        async with sem:
            started = time.monotonic()
            try:
                reply = await client.post("/v1/chat/completions", body(ctx, prompt, p), timeout=p.timeout_s)
            except ServeError as exc:
                return {"index": index, "passed": False, "why": f"request failed: {exc}"}
            done += 1
            ctx.progress.step(f"{label}{done}/{total} answered")
            if not reply.ok:
                return {"index": index, "passed": False, "why": f"request failed: {reply.error_text()}"}
            answer, _ = chat_text(reply.body)
            ok, why = judge_answer(answer, prompt.codes, p.max_non_latin)
            return {"index": index, "passed": ok, "why": why, "answer": answer[:240],
                    "prompt_tokens": prompt_tokens(reply.body), "seconds": round(time.monotonic() - started, 2)}

    return list(await asyncio.gather(*(one(i) for i in range(total))))


async def run(ctx: GateContext, p: CoherenceParams) -> JsonObject:
    """Every run's `passed=N/total`, the rows, and the prompt's shape."""
    async with ServeClient(ctx.url, timeout=p.timeout_s, transport=ctx.transport) as client:
        prompt = await fit(client, ctx, p)
        runs = []
        for r in range(p.runs):
            label = f"run {r + 1}/{p.runs}: " if p.runs > 1 else ""
            ctx.progress.step(f"{label}{p.concurrency} at once x {p.repeat}, {prompt.line_count} lines")
            runs.append(await one_run(client, ctx, prompt, p, label))
    return {"passed": [sum(row["passed"] for row in rows) for rows in runs],
            "total": p.concurrency * p.repeat, "line_count": prompt.line_count, "prompt_sha256": prompt.sha256,
            "prompt_tokens": next((row.get("prompt_tokens") for rows in runs for row in rows
                                   if row.get("prompt_tokens")), None),
            "rows": runs}
