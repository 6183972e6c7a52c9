"""The canary's OpenAI-compatible client: chat and completions, streamed or not, always greedy.

Streamed replies are reassembled from their SSE chunks, so a check compares what a streaming user
saw with what a non-streaming user saw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from appliance.apikey import api_headers
from appliance.canary.golden import Endpoint
from appliance.errors import ApplianceError

Prompt = str | list[int] | list[dict[str, str]]
"""Text; token ids (completions); or chat messages (chat)."""
PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
SEED = 1234


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
                stream: bool, reasoning_effort: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0, "seed": SEED,
                            "stream": stream}
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
    def __init__(self, base_url: str, *, timeout: float = 120.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, trust_env=False,
                                       headers=api_headers(), transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def models(self) -> list[str]:
        try:
            reply = await self._http.get("/v1/models")
        except httpx.HTTPError as exc:
            raise Unreachable(f"{self.base_url}/v1/models: {type(exc).__name__}: {exc}") from None
        if reply.status_code != 200:
            raise ApplianceError(f"{self.base_url}/v1/models answered HTTP {reply.status_code}", field="--url",
                                 value=self.base_url,
                                 fix="point --url at an OpenAI-compatible serve (with or without /v1)")
        return [m["id"] for m in reply.json().get("data", [])]

    async def tokenize_chat(self, model: str, messages: list[dict[str, str]]) -> list[int] | None:
        """The chat prompt's token ids from vLLM's /tokenize; None where the serve has no such endpoint."""
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        try:
            reply = await self._http.post("/tokenize", json=body)
        except httpx.HTTPError:
            return None
        if reply.status_code != 200:
            return None
        tokens = reply.json().get("tokens")
        return tokens if isinstance(tokens, list) else None

    async def complete(self, model: str, endpoint: Endpoint, prompt: Prompt, max_tokens: int, *,
                       stream: bool = False, reasoning_effort: str | None = None) -> Completion:
        body = greedy_body(model, endpoint, prompt, max_tokens, stream, reasoning_effort)
        try:
            if stream:
                return await self._streamed(endpoint, body)
            reply = await self._http.post(PATHS[endpoint], json=body)
        except httpx.HTTPError as exc:
            raise Unreachable(f"{PATHS[endpoint]}: {type(exc).__name__}: {exc}") from None
        if reply.status_code != 200:
            raise Unreachable(f"{PATHS[endpoint]} answered HTTP {reply.status_code}: {reply.text[:200]}")
        data = reply.json()
        choice = data["choices"][0]
        text = choice["message"]["content"] if endpoint == "chat" else choice["text"]
        return Completion(endpoint, False, text or "", choice.get("finish_reason"),
                          (data.get("usage") or {}).get("completion_tokens"))

    async def _streamed(self, endpoint: Endpoint, body: dict[str, Any]) -> Completion:
        parts: list[str] = []
        finish: str | None = None
        tokens: int | None = None
        async with self._http.stream("POST", PATHS[endpoint], json=body) as reply:
            if reply.status_code != 200:
                raise Unreachable(f"{PATHS[endpoint]} (stream) answered HTTP {reply.status_code}")
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if chunk.get("usage"):
                    tokens = chunk["usage"].get("completion_tokens")
                for choice in chunk.get("choices", []):
                    piece = (choice.get("delta") or {}).get("content") if endpoint == "chat" else choice.get("text")
                    parts.append(piece or "")
                    finish = choice.get("finish_reason") or finish
        return Completion(endpoint, True, "".join(parts), finish, tokens)
