"""K19 reasoning and tool calls: every effort accepted on /v1/chat/completions and /v1/responses, no
`</think>` left in any answer text, and a tool call parsed into `tool_calls`.

The seed's K19 failure happened "whenever a request omitted `reasoning`, which is exactly what a stock
OpenAI SDK sends", so both endpoints are also asked with no reasoning field at all. And as the seed
measured: "`effort: none` disables thinking" and "`high` reasons deeper than `low`"; its tests pin "that
`max` specifically survives into `chat_template_kwargs` without thinking being switched off on the way" and
"that the widened field still rejects a value the model has no tier for": `max` must reason, and an effort
outside the seven is asked too and must be refused.

Applies where the profile names a reasoning parser (DeepSeek-V4); elsewhere `not_applicable`. The
detectors are pure functions over response bodies, unit-tested on crafted replies.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

from appliance.canary.client import ApiRequest
from appliance.gate.client import Reply, ServeClient, ServeError, chat_message, chat_text
from appliance.gate.context import GateContext
from appliance.gate.result import CheckResult, utc_now
from appliance.gate.sizing import ReasoningParams
from appliance.jsonstrict import JsonError, JsonObject, loads
from appliance.redact import clip

RULES = ("K19",)
"""The rule ids this check is evidence for (`appliance rules`)."""

PROMPT = "What is 17 + 25? Answer with the number only."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
# Tool-call markup that a working parser removes from the content (DeepSeek's special tokens, Hermes-style tags).
TOOL_MARKUP = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "｜DSML｜", "<tool_call>", "<|tool_call|>")
_THINK = re.compile(r"</?think>", re.IGNORECASE)


def think_leaks(text: str) -> list[str]:
    """Reasoning markup left in answer text: a bare `</think>` (the K19 failure: the parser let the end of
    the reasoning through) or a whole `<think>…</think>` block. Returns a short excerpt per finding."""
    leaks = []
    for m in _THINK.finditer(text):
        tag = m.group(0).lower()
        excerpt = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
        leaks.append(f"{'bare ' if tag == '</think>' else ''}{tag} in answer: …{excerpt}…")
    return leaks


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolParse:
    calls: list[ToolCall] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_tool_calls(body: Any) -> ToolParse:
    """The tool calls of a chat completion, each with JSON-object arguments; problems say what is wrong."""
    out = ToolParse()
    message = chat_message(body)
    if not message:
        out.problems.append("no choices[0].message in the reply")
        return out
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    markup = [m for m in TOOL_MARKUP if m in content]
    if markup:
        out.problems.append(f"tool-call markup left unparsed in content: {markup[0]}")
    out.problems += think_leaks(content)
    calls = message.get("tool_calls")
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            out.problems.append(f"tool_calls[{index}] has no function name")
            continue
        raw = fn.get("arguments")
        try:
            args = loads(raw, "arguments") if isinstance(raw, str) else raw
        except JsonError:
            out.problems.append(f"tool_calls[{index}] ({clip(fn['name'], 80)}): arguments are not JSON: "
                                f"{clip(str(raw), 120)}")
            continue
        if not isinstance(args, dict):
            out.problems.append(f"tool_calls[{index}] ({clip(fn['name'], 80)}): arguments are not a JSON object")
            continue
        out.calls.append(ToolCall(fn["name"], args))
    if not out.calls and not out.problems:
        out.problems.append("no tool call in the reply")
    return out


def responses_text(body: Any) -> tuple[str, str]:
    """(answer text, reasoning text) of a /v1/responses reply."""
    if not isinstance(body, dict):
        return "", ""
    answer: list[str] = []
    reasoning: list[str] = []
    for item in body.get("output") or []:
        if not isinstance(item, dict):
            continue
        parts = [*(item.get("content") or []), *(item.get("summary") or [])]
        texts = [p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        (reasoning if item.get("type") == "reasoning" else answer).extend(texts)
    if not answer and isinstance(body.get("output_text"), str):
        answer.append(body["output_text"])
    return "".join(answer), "".join(reasoning)


def judge_effort(surface: str, effort: str, reply: Reply | None, error: str | None) -> JsonObject:
    """One (endpoint, effort) probe: accepted (HTTP 200 with a body) and no think markup in the answer."""
    row: JsonObject = {"endpoint": surface, "effort": effort}
    if reply is None or not reply.ok:
        return {**row, "accepted": False, "problems": [error or (reply.error_text() if reply else "no reply")]}
    answer, reasoning = chat_text(reply.body) if surface == "chat" else responses_text(reply.body)
    problems = think_leaks(answer)
    return {**row, "accepted": True, "problems": problems, "answer": answer[:200],
            "reasoning_chars": len(reasoning)}


OMITTED = "omitted"
"""The probe that sends no reasoning field at all (a stock OpenAI SDK request)."""
UNSUPPORTED = "extreme"
"""An effort no tier exists for: both endpoints must refuse it (HTTP 4xx), not fold it onto one silently."""


async def _probe(client: ServeClient, ctx: GateContext, surface: str, effort: str,
                 p: ReasoningParams) -> JsonObject:
    if surface == "chat":
        path = "/v1/chat/completions"
        body: ApiRequest = {"model": ctx.model, "messages": [{"role": "user", "content": PROMPT}],
                            "max_tokens": p.max_tokens}
        if effort != OMITTED:
            body["reasoning_effort"] = effort
    else:
        path = "/v1/responses"
        body = {"model": ctx.model, "input": PROMPT, "max_output_tokens": p.max_tokens}
        if effort != OMITTED:
            body["reasoning"] = {"effort": effort}
    try:
        reply = await client.post(path, body, timeout=p.timeout_s)
    except ServeError as exc:
        return judge_effort(surface, effort, None, str(exc))
    return judge_effort(surface, effort, reply, None)


async def _tool(client: ServeClient, ctx: GateContext, p: ReasoningParams) -> JsonObject:
    body = {"model": ctx.model, "messages": [{"role": "user", "content": TOOL_PROMPT}], "tools": [WEATHER_TOOL],
            "tool_choice": "auto", "max_tokens": p.max_tokens}
    try:
        reply = await client.post("/v1/chat/completions", body, timeout=p.timeout_s)
    except ServeError as exc:
        return {"parsed": False, "problems": [str(exc)]}
    if not reply.ok:
        return {"parsed": False, "problems": [reply.error_text()]}
    parsed = parse_tool_calls(reply.body)
    named = [c for c in parsed.calls if c.name == "get_weather" and isinstance(c.arguments.get("city"), str)]
    problems = list(parsed.problems)
    if parsed.calls and not named:
        problems.append(f"no get_weather call with a city: {[c.name for c in parsed.calls]}")
    return {"parsed": bool(named) and not problems, "problems": problems,
            "calls": [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]}


def effort_problems(rows: list[JsonObject]) -> list[str]:
    """What the probes say about effort itself: `none` must not think; `max` must think; `high` must reason more
    than `low` (by reasoning characters); an unsupported effort must be refused, per endpoint."""
    out = []
    by = {(r["endpoint"], r["effort"]): r for r in rows if r["accepted"]}
    for surface in ("chat", "responses"):
        none, low, high, top = (by.get((surface, e)) for e in ("none", "low", "high", "max"))
        if none and none.get("reasoning_chars", 0) > 0:
            out.append(f"{surface}: effort none still reasoned ({none['reasoning_chars']} chars)")
        if top and top.get("reasoning_chars", 0) == 0:
            out.append(f"{surface}: effort max did not think (no reasoning): thinking was switched off on the way")
        if (surface, UNSUPPORTED) in by:
            out.append(f"{surface}: the unsupported effort {UNSUPPORTED!r} was accepted instead of refused")
        if low and high and high.get("reasoning_chars", 0) <= low.get("reasoning_chars", 0):
            out.append(f"{surface}: high reasoned no more than low ({high.get('reasoning_chars', 0)} vs "
                       f"{low.get('reasoning_chars', 0)} chars)")
    return out


async def _run(ctx: GateContext, p: ReasoningParams) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    rows = []
    async with ServeClient(ctx.url, timeout=p.timeout_s, transport=ctx.transport) as client:
        for surface in ("chat", "responses"):
            for effort in (OMITTED, *p.efforts, UNSUPPORTED):
                ctx.progress.step(f"{surface} effort={effort}")
                rows.append(await _probe(client, ctx, surface, effort, p))
        ctx.progress.step("tool call")
        tool = await _tool(client, ctx, p)
    refused = [r for r in rows if r["effort"] == UNSUPPORTED]
    rows = [r for r in rows if r["effort"] != UNSUPPORTED]
    rejected = [f"{r['endpoint']}:{r['effort']}" for r in rows if not r["accepted"]]
    leaks = [f"{r['endpoint']}:{r['effort']}" for r in rows if r["accepted"] and r["problems"]]
    efforts = effort_problems([*rows, *refused])
    ok = not rejected and not leaks and not efforts and tool["parsed"]
    parts = [f"{len(rows) - len(rejected)}/{len(rows)} effort probes accepted (reasoning omitted included)",
             "no </think> in answers" if not leaks else f"think markup in {', '.join(leaks)}",
             "tool call parsed" if tool["parsed"] else f"tool call NOT parsed ({'; '.join(tool['problems'])[:160]})"]
    if rejected:
        parts.insert(1, f"rejected: {', '.join(rejected)}")
    if efforts:
        parts.insert(2, "; ".join(efforts))
    return CheckResult("reasoning", "pass" if ok else "fail", "; ".join(parts), started_at=started,
                       seconds=time.monotonic() - began,
                       params={"efforts": list(p.efforts), "omitted_probe": True, "max_tokens": p.max_tokens},
                       metrics={"accepted": len(rows) - len(rejected), "probes": len(rows),
                                "think_leaks": len(leaks), "effort_problems": len(efforts),
                                "tool_call_parsed": tool["parsed"]},
                       details={"probes": rows, "unsupported_effort": refused, "tool_call": tool})


def not_applicable(ctx: GateContext) -> CheckResult | None:
    if ctx.profile.server.reasoning_parser:
        return None
    return CheckResult("reasoning", "not_applicable",
                       f"profile {ctx.profile.name} sets no reasoning parser (server.reasoning_parser), so K19's "
                       f"efforts and </think> handling do not apply to this serve", started_at=utc_now())


def run(ctx: GateContext) -> CheckResult:
    return not_applicable(ctx) or asyncio.run(_run(ctx, ctx.params.reasoning))
