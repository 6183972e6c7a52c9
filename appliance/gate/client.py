"""The few HTTP calls the gate makes to a serve (OpenAI-compatible vLLM API) and its health exporter.

Async (httpx.AsyncClient) so that concurrent checks are plain `asyncio.gather` and Ctrl-C cancels the
requests in flight instead of waiting for them in worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from appliance.apikey import api_headers


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
    def __init__(self, base_url: str, *, timeout: float, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, trust_env=False,
                                         headers=api_headers(), transport=transport)

    async def __aenter__(self) -> ServeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Reply:
        kwargs: dict[str, Any] = {"json": body}
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            response = await self._client.post(path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServeError(f"POST {self.base_url}{path}: {type(exc).__name__}: {exc}") from None
        try:
            parsed: Any = response.json()
        except ValueError:
            parsed = response.text
        return Reply(response.status_code, parsed)


def get_json(url: str, timeout: float = 10.0, *, to_serve: bool = True) -> dict[str, Any]:
    """One synchronous GET for provenance (version, models, /status); raises ServeError. The serve's key goes
    only to the serve (`to_serve`), never to the health exporter, which neither needs nor checks it."""
    try:
        response = httpx.get(url, timeout=timeout, trust_env=False, headers=api_headers() if to_serve else None)
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ServeError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise ServeError(f"GET {url}: expected a JSON object, got {type(data).__name__}")
    return data


async def count_tokens(client: ServeClient, model: str, text: str) -> int | None:
    """Tokens of `text` by the serve's own tokenizer (vLLM's /tokenize); None where the serve lacks it."""
    try:
        reply = await client.post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
    except ServeError:
        return None
    count = reply.body.get("count") if reply.ok else None
    return int(count) if isinstance(count, int) else None


def chat_text(body: Any) -> tuple[str, str]:
    """(answer content, reasoning) of a chat completion; empty strings where absent."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return "", ""
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return message.get("content") or "", reasoning if isinstance(reasoning, str) else ""
