"""Multi-needle retrieval with distractors in the shape of the harness's probe (check C9).

The shape: for each line count and each repeat (the harness re-rolls per repeat), a haystack of numbered filler
lines with N facts "the access code for vault KEY is CODE" that the question asks for and N distractors of the
same form that it does not; facts spread evenly and shuffled, so a distractor sits near each needle. A needle is
found only when its key and code appear paired (`KEY=CODE`, `KEY: CODE`, `KEY is CODE`); a distractor reported
is a leak. A row passes at N/N with no leak and no truncation; a row without a result (an error, a prompt longer
than the serve's window) is a failure, never left out ("a checker that only counts rows reporting 'N/8' skips
them and calls four clean rows a pass"). Keys, filler wording and the random stream are this module's own; counts,
seed, budgets and criteria are the harness's.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass

from appliance.canary.client import ApiRequest
from appliance.gate.battery.sizing import NeedleParams
from appliance.gate.client import ServeClient, ServeError, chat_text, finish_reason, prompt_tokens
from appliance.gate.context import GateContext
from appliance.jsonstrict import JsonObject

STEMS = ("ALDER", "BIRCH", "CEDAR", "DAPHNE", "ELM", "FIR", "GORSE", "HAZEL", "IVY", "JUNIPER", "KALMIA", "LARCH",
         "MAPLE", "NUTMEG", "OLIVE", "POPLAR", "QUINCE", "ROWAN", "SPRUCE", "TAMARIND", "UMBRA", "VIBURNUM",
         "WILLOW", "YEW")
KEYS = tuple(f"{stem}-{n:02d}" for n in range(1, 9) for stem in STEMS)
"""Spelled-out words with a number: a bare letter would be "found" inside any text."""


@dataclass(frozen=True)
class NeedlePrompt:
    text: str
    line_count: int
    needles: tuple[tuple[str, str], ...]
    distractors: tuple[tuple[str, str], ...]


def build_prompt(line_count: int, needles: int, distractors: int, seed: int) -> NeedlePrompt:
    total = needles + distractors
    if total > len(KEYS) or total * 2 > line_count:
        raise ValueError(f"{line_count} lines cannot hold {total} facts apart")
    rng = random.Random(seed)
    keys = rng.sample(KEYS, total)
    codes = [str(c) for c in rng.sample(range(100000, 1000000), total)]
    facts = list(zip(keys, codes, strict=True))
    step = (line_count - 3) / max(1, total - 1)
    slots = [2 + round(step * i) for i in range(total)]
    rng.shuffle(slots)
    placed = dict(zip(slots, facts, strict=True))
    asked = facts[:needles]
    rows = ["You answer a retrieval question about the vault register below.",
            "Use only the register. Several vaults are listed; report only the vaults asked for.", ""]
    for n in range(1, line_count + 1):
        if n in placed:
            key, code = placed[n]
            rows.append(f"Line {n:04d}: The access code for vault {key} is {code}.")
        else:
            rows.append(f"Line {n:04d}: ledger={n % 23:02d}; shelf={n % 43:02d}; mark={(n * 127) % 9967:04d}; "
                        f"routine register entry with nothing to report.")
    rows += ["", f"Question: what are the access codes for these vaults: {', '.join(k for k, _ in asked)}?",
             "Answer with one line per vault, as VAULT=CODE. Leave out every vault not asked about."]
    return NeedlePrompt("\n".join(rows), line_count, tuple(asked), tuple(facts[needles:]))


def _paired(text: str, key: str, code: str) -> bool:
    pattern = rf"\b{re.escape(key)}\b[^0-9A-Z]{{0,4}}(?:IS\b[^0-9A-Z]{{0,4}})?{re.escape(code)}\b"
    return re.search(pattern, text.upper()) is not None


def score(text: str, prompt: NeedlePrompt) -> JsonObject:
    hit = [k for k, c in prompt.needles if _paired(text, k, c)]
    leaked = [k for k, c in prompt.distractors if _paired(text, k, c)]
    return {"needles_hit": len(hit), "needles_total": len(prompt.needles),
            "missed": [k for k, _ in prompt.needles if k not in hit], "leaked": leaked}


def row_passes(row: JsonObject) -> bool:
    return (not row.get("error") and not row.get("truncated") and row.get("needles_hit") == row.get("needles_total")
            and not row.get("leaked"))


async def run(ctx: GateContext, p: NeedleParams) -> list[JsonObject]:
    rows = []
    async with ServeClient(ctx.url, timeout=p.timeout_s, transport=ctx.transport) as client:
        for lines in p.line_counts:
            for repeat in range(1, p.repeats + 1):
                prompt = build_prompt(lines, p.needles, p.distractors, p.seed + repeat)
                ctx.progress.step(f"{lines} lines, repeat {repeat}/{p.repeats}")
                body: ApiRequest = {"model": ctx.model, "messages": [{"role": "user", "content": prompt.text}],
                                    "max_tokens": p.max_tokens, "temperature": 0.0}
                if ctx.profile.server.reasoning_parser:
                    body["reasoning_effort"] = "none"
                row: JsonObject = {"line_count": lines, "repeat": repeat}
                started = time.monotonic()
                try:
                    reply = await client.post("/v1/chat/completions", body, timeout=p.timeout_s)
                except ServeError as exc:
                    rows.append({**row, "error": str(exc)[:300]})
                    continue
                row["seconds"] = round(time.monotonic() - started, 2)
                if not reply.ok:
                    text = reply.error_text()
                    window = "maximum context length" in text or "max_model_len" in text
                    rows.append({**row, "error": ("prompt longer than the serve's window: " if window else "")
                                 + text[:300], "window": window})
                    continue
                answer, _ = chat_text(reply.body)
                rows.append({**row, **score(answer, prompt), "truncated": finish_reason(reply.body) == "length",
                             "prompt_tokens": prompt_tokens(reply.body), "answer": answer[:300]})
    return rows
