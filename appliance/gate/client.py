"""The few HTTP calls the gate makes to a serve (OpenAI-compatible vLLM API) and its health exporter.

Async (httpx.AsyncClient) so that concurrent checks are plain `asyncio.gather` and Ctrl-C cancels the
requests in flight instead of waiting for them in worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from appliance.apikey import api_headers
from appliance.canary.client import ApiRequest
from appliance.http_bounded import ReplyError, get, request
from appliance.redact import clip


class ServeError(Exception):
    """A request the serve did not answer as asked: the check that made it records an error."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    """Parsed JSON, or the text when the body is not JSON."""

    @property
    def ok(self) -> bool:
        return self.status == 200 and isinstance(self.body, dict)

    def error_text(self) -> str:
        if isinstance(self.body, dict):
            err = self.body.get("error", self.body)
            msg = err.get("message", err) if isinstance(err, dict) else err
            return f"HTTP {self.status}: {str(msg)[:300]}"
        return f"HTTP {self.status}: {str(self.body)[:300]}"


class ServeClient:
    """Every request within a total deadline (`timeout`, or the call's) and a size cap (appliance/http_bounded.py):
    a serve that trickles, streams without end or answers a gigabyte makes the check that asked record an error."""

    def __init__(self, base_url: str, *, timeout: float, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, trust_env=False,
                                         headers=api_headers(), transport=transport)

    async def __aenter__(self) -> ServeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def post(self, path: str, body: ApiRequest, timeout: float | None = None) -> Reply:
        kwargs: dict[str, ApiRequest | float] = {"json": body}
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            response = await request(self._client, "POST", path, deadline=timeout or self.timeout, **kwargs)
        except httpx.HTTPError as exc:
            raise ServeError(f"POST {self.base_url}{path}: {type(exc).__name__}: {clip(str(exc), 200)}") from None
        except ReplyError as exc:
            raise ServeError(f"POST {self.base_url}{path}: {clip(str(exc), 200)}") from None
        try:
            parsed: Any = response.json()
        except ReplyError:
            parsed = response.text
        return Reply(response.status, parsed)


def get_json(url: str, timeout: float = 10.0, *, to_serve: bool = True) -> dict[str, Any]:
    """One synchronous GET for provenance (version, models, /status); raises ServeError. The serve's key goes
    only to the serve (`to_serve`), never to the health exporter, which neither needs nor checks it."""
    try:
        with httpx.Client(timeout=timeout, trust_env=False, headers=api_headers() if to_serve else None) as client:
            response = get(client, url, deadline=timeout)
        if response.status != 200:
            raise ServeError(f"GET {url}: HTTP {response.status}")
        return response.json_object()
    except httpx.HTTPError as exc:
        raise ServeError(f"GET {url}: {type(exc).__name__}: {clip(str(exc), 200)}") from None
    except ReplyError as exc:
        raise ServeError(f"GET {url}: {clip(str(exc), 200)}") from None


async def count_tokens(client: ServeClient, model: str, text: str) -> int | None:
    """Tokens of `text` by the serve's own tokenizer (vLLM's /tokenize); None where the serve lacks it."""
    try:
        reply = await client.post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
    except ServeError:
        return None
    count = reply.body.get("count") if reply.ok else None
    return int(count) if isinstance(count, int) else None


def first_choice(body: Any) -> dict[str, Any]:
    """choices[0] of a completion; {} when the reply has no such object (a broken or hostile serve)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}


def chat_message(body: Any) -> dict[str, Any]:
    message = first_choice(body).get("message")
    return message if isinstance(message, dict) else {}


def prompt_tokens(body: Any) -> int | None:
    """usage.prompt_tokens of a completion; None when the reply carries no such count."""
    usage = body.get("usage") if isinstance(body, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def finish_reason(body: Any) -> str | None:
    value = first_choice(body).get("finish_reason")
    return value if isinstance(value, str) else None


def chat_text(body: Any) -> tuple[str, str]:
    """(answer content, reasoning) of a chat completion; empty strings where absent or not text."""
    message = chat_message(body)
    content = message.get("content")
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return content if isinstance(content, str) else "", reasoning if isinstance(reasoning, str) else ""
