"""Non-greedy structured output: a JSON schema through `response_format`, sampled at temperature > 0.

The seed's out-of-vocab sampler bug needs a row whose every candidate is masked ("which structured-output
constraints can produce") and a batch that is not all greedy (its fused sampler "is skipped when all_greedy"):
a grammar sampled at temperature > 0 reaches both. Every reply must parse and match the schema; one bad reply
fails the check (a grammar-constrained request has no noise allowance).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from appliance.gate.client import ServeClient, ServeError, chat_text, finish_reason
from appliance.gate.context import GateContext
from appliance.gate.result import CheckResult, GateStatus, utc_now
from appliance.gate.sizing import StructuredParams
from appliance.jsonstrict import JsonError, JsonObject, loads

SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "colour": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    },
    "required": ["name", "age", "colour"],
    "additionalProperties": False,
}
PROMPT = "Invent a person and describe them as JSON with a name, an age, a favourite colour and up to three tags."


def schema_errors(value: Any, schema: JsonObject, path: str = "$") -> list[str]:
    """The subset of JSON Schema that SCHEMA uses: type, enum, properties, required, additionalProperties,
    items, maxItems, maxLength, minimum, maximum. Enough to judge our own schema, not a general validator."""
    errors: list[str] = []
    kind = schema.get("type")
    checks = {"object": dict, "array": list, "string": str}
    if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
        return [f"{path}: expected an integer, got {json.dumps(value)[:40]}"]
    if kind in checks and not isinstance(value, checks[kind]):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {json.dumps(value)[:40]} is not one of {schema['enum']}")
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        errors.append(f"{path}: longer than {schema['maxLength']}")
    number = isinstance(value, int) and not isinstance(value, bool)
    if number and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        errors.append(f"{path}: {value} outside [{schema.get('minimum')}, {schema.get('maximum')}]")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{path}: more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{path}: missing {key!r}" for key in schema.get("required", []) if key not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{path}: unexpected {key!r}" for key in value if key not in props]
        for key, sub in props.items():
            if key in value:
                errors += schema_errors(value[key], sub, f"{path}.{key}")
    return errors


def judge(content: str, finish_reason: str | None) -> list[str]:
    """Problems with one reply's content; empty = valid."""
    try:
        value = loads(content, "the reply")  # strict: a model's 100k-deep nesting is no valid answer either
    except JsonError as exc:
        cut = " (cut by max_tokens)" if finish_reason == "length" else ""
        return [f"not JSON{cut}: {exc}: {content[:120]!r}"]
    return schema_errors(value, SCHEMA)


async def _one(client: ServeClient, ctx: GateContext, p: StructuredParams, seed: int) -> JsonObject:
    body = {"model": ctx.model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": p.max_tokens,
            "temperature": p.temperature, "top_p": p.top_p, "seed": seed,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}}
    try:
        reply = await client.post("/v1/chat/completions", body, timeout=p.timeout_s)
    except ServeError as exc:
        return {"seed": seed, "valid": False, "problems": [str(exc)], "error": True}
    if not reply.ok:
        return {"seed": seed, "valid": False, "problems": [reply.error_text()], "error": True}
    content, _ = chat_text(reply.body)
    finish = finish_reason(reply.body)
    problems = judge(content, finish)
    return {"seed": seed, "valid": not problems, "problems": problems, "finish_reason": finish,
            "content": content[:200]}


async def _run(ctx: GateContext, p: StructuredParams) -> CheckResult:
    started, began = utc_now(), time.monotonic()
    async with ServeClient(ctx.url, timeout=p.timeout_s, transport=ctx.transport) as client:
        ctx.progress.step(f"{p.requests} requests at temperature {p.temperature}")
        rows = await asyncio.gather(*(_one(client, ctx, p, seed) for seed in range(1, p.requests + 1)))
    valid = sum(r["valid"] for r in rows)
    errors = [r for r in rows if r.get("error")]
    status: GateStatus = "error" if errors else ("pass" if valid == len(rows) else "fail")
    summary = f"{valid}/{len(rows)} sampled replies parse and match the schema (temperature {p.temperature})"
    bad = next((r for r in rows if not r["valid"]), None)
    if bad:
        summary += f"; first problem: {bad['problems'][0][:160]}"
    return CheckResult("structured", status, summary, started_at=started, seconds=time.monotonic() - began,
                       params={"requests": p.requests, "temperature": p.temperature, "top_p": p.top_p,
                               "max_tokens": p.max_tokens, "via": "response_format json_schema"},
                       metrics={"valid": valid, "total": len(rows)}, details={"replies": rows, "schema": SCHEMA})


def run(ctx: GateContext) -> CheckResult:
    return asyncio.run(_run(ctx, ctx.params.structured))
