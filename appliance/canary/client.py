"""The canary's OpenAI-compatible client: chat and completions, streamed or not, always greedy.

Streamed replies are reassembled from their SSE chunks, so a check compares what a streaming user
saw with what a non-streaming user saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Required, TypedDict

import httpx

from appliance.apikey import api_headers
from appliance.canary.golden import Endpoint
from appliance.errors import ApplianceError
from appliance.http_bounded import Reply, ReplyError, event_stream, request
from appliance.jsonstrict import JsonError, JsonObject, loads
from appliance.redact import clip

Prompt = str | list[int] | list[dict[str, str]]
"""Text; token ids (completions); or chat messages (chat)."""
PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
SEED = 1234


class ApiRequest(TypedDict, total=False):
    """A request body the appliance sends to the serve's OpenAI-compatible API (chat and text completions, responses,
    vLLM's /tokenize): the fields it sets. What the serve answers is the engine's JSON, read where it is taken."""

    model: Required[str]
    messages: list[JsonObject]
    prompt: Prompt
    input: str
    max_tokens: int
    max_output_tokens: int
    temperature: float
    top_p: float
    seed: int
    stream: bool
    stream_options: dict[str, bool]
    reasoning_effort: str
    reasoning: dict[str, str]
    response_format: JsonObject
    tools: list[JsonObject]
    tool_choice: str
    add_special_tokens: bool


class Unreachable(Exception):
    """The serve did not answer at all (connection refused, timeout): not evidence of corruption."""


@dataclass(frozen=True)
class Completion:
    endpoint: Endpoint
    stream: bool
    text: str
    finish_reason: str | None
    tokens: int | None


def greedy_body(model: str, endpoint: Endpoint, prompt: Prompt, max_tokens: int,
                stream: bool, reasoning_effort: str | None = None) -> ApiRequest:
    body: ApiRequest = {"model": model, "max_tokens": max_tokens, "temperature": 0, "seed": SEED, "stream": stream}
    if endpoint == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        if reasoning_effort:
            body["reasoning_effort"] = reasoning_effort
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


class CanaryClient:
    """Every request has a total deadline of `timeout` seconds and a size cap (appliance/http_bounded.py); a reply
    that is no OpenAI answer of the shape asked for raises Unreachable, naming what was wrong: a broken serve is
    not evidence of corruption (exit 2), and never a traceback."""

    def __init__(self, base_url: str, *, timeout: float = 120.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, trust_env=False,
                                       headers=api_headers(), transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> Reply:
        try:
            return await request(self._http, method, path, deadline=self.timeout, **kwargs)
        except httpx.HTTPError as exc:
            raise Unreachable(f"{self.base_url}{path}: {type(exc).__name__}: {clip(str(exc), 200)}") from None
        except ReplyError as exc:
            raise Unreachable(clip(str(exc), 300)) from None

    async def models(self) -> list[str]:
        reply = await self._request("GET", "/v1/models")
        if reply.status != 200:
            raise ApplianceError(f"{self.base_url}/v1/models answered HTTP {reply.status}", field="--url",
                                 value=self.base_url,
                                 fix="point --url at an OpenAI-compatible serve (with or without /v1)")
        try:
            data = reply.json_object().get("data")
            if not isinstance(data, list):
                raise ReplyError("no `data` list")
            ids = [m.get("id") if isinstance(m, dict) else None for m in data]
            if not all(isinstance(i, str) and i for i in ids):
                raise ReplyError("a model without a text `id`")
        except ReplyError as exc:
            raise Unreachable(f"/v1/models is no OpenAI model list: {clip(str(exc), 200)}") from None
        return ids  # type: ignore[return-value]

    async def tokenize_chat(self, model: str, messages: list[dict[str, str]]) -> list[int] | None:
        """The chat prompt's token ids from vLLM's /tokenize; None where the serve has no such endpoint (or answers
        it with anything but a list of token ids)."""
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        try:
            reply = await self._request("POST", "/tokenize", json=body)
            tokens = reply.json_object().get("tokens") if reply.status == 200 else None
        except (Unreachable, ReplyError):
            return None
        ok = isinstance(tokens, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in tokens)
        return tokens if ok else None  # type: ignore[return-value]

    async def complete(self, model: str, endpoint: Endpoint, prompt: Prompt, max_tokens: int, *,
                       stream: bool = False, reasoning_effort: str | None = None) -> Completion:
        body = greedy_body(model, endpoint, prompt, max_tokens, stream, reasoning_effort)
        if stream:
            return await self._streamed(endpoint, body)
        reply = await self._request("POST", PATHS[endpoint], json=body)
        if reply.status != 200:
            raise Unreachable(f"{PATHS[endpoint]} answered HTTP {reply.status}: {clip(reply.text, 200)}")
        try:
            data = reply.json_object()
            choice = _first_choice(data)
            text = _field(choice.get("message"), "content") if endpoint == "chat" else choice.get("text")
            usage = data.get("usage")
            tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
            return Completion(endpoint, False, _text(text), _finish(choice), _count(tokens))
        except ReplyError as exc:
            raise Unreachable(f"{PATHS[endpoint]}: no OpenAI completion: {clip(str(exc), 200)}") from None

    async def _streamed(self, endpoint: Endpoint, body: ApiRequest) -> Completion:
        parts: list[str] = []
        finish: str | None = None
        tokens: int | None = None
        done = False
        path = PATHS[endpoint]
        try:
            async with event_stream(self._http, "POST", path, deadline=self.timeout, json=body) as (status, lines):
                if status != 200:
                    raise Unreachable(f"{path} (stream) answered HTTP {status}")
                async for line in lines:
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                        break
                    chunk = loads(payload, f"{path} (stream)")
                    if not isinstance(chunk, dict):
                        raise ReplyError(f"an event that is a JSON {type(chunk).__name__}, not an object")
                    usage = chunk.get("usage")
                    if isinstance(usage, dict):
                        tokens = _count(usage.get("completion_tokens"))
                    choices = chunk.get("choices", [])
                    if not isinstance(choices, list):
                        raise ReplyError("`choices` is not a list")
                    for choice in choices:
                        if not isinstance(choice, dict):
                            raise ReplyError("a choice is not an object")
                        piece = _field(choice.get("delta"), "content") if endpoint == "chat" else choice.get("text")
                        parts.append(_text(piece))
                        finish = _finish(choice) or finish
                if not done:  # every OpenAI-compatible stream ends so; a body without it is no event stream
                    raise ReplyError("the stream ended without `data: [DONE]`")
        except httpx.HTTPError as exc:
            raise Unreachable(f"{path} (stream): {type(exc).__name__}: {clip(str(exc), 200)}") from None
        except (ReplyError, JsonError) as exc:
            raise Unreachable(f"{path} (stream): no OpenAI event stream: {clip(str(exc), 200)}") from None
        return Completion(endpoint, True, "".join(parts), finish, tokens)


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ReplyError("no `choices` list with an object in it")
    return choices[0]


def _field(value: Any, key: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReplyError(f"a {type(value).__name__} where an object with `{key}` belongs")
    return value.get(key)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReplyError(f"text that is a JSON {type(value).__name__}")
    return value


def _finish(choice: dict[str, Any]) -> str | None:
    value = choice.get("finish_reason")
    return value if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else None
