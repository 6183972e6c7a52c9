"""HTTP replies read within bounds, for every client the appliance points at a serve or a peer (the canary, the gate,
the exporter's engine probe and peer watch).

httpx's timeouts are per operation: a serve that trickles one byte a second, or streams events without end, keeps
a request alive forever, and a body of any size is read into memory. Here every request has a **total deadline**
(connect, send, status and the whole body) and a **size cap**, and a JSON body is read by the strict reader
(appliance/jsonstrict.py: no duplicate keys, NaN, 400-digit numbers or 100k-deep nesting). A reply that breaks a
bound raises ReplyError, which each client turns into its own "the serve did not answer as one" outcome.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from appliance.jsonstrict import JsonError, loads

MAX_REPLY_BYTES = 16 << 20
"""A completion, a model list or a /status body is KiBs; a metrics page a few hundred KiB."""
MAX_LINE_BYTES = 1 << 20
"""One server-sent event line."""


class ReplyError(Exception):
    """The reply broke a bound (too slow in total, too big) or is not the JSON it should be."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    url: str

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as strict JSON; ReplyError when it is none."""
        try:
            return loads(self.body, self.url)
        except JsonError as exc:
            raise ReplyError(str(exc)) from None

    def json_object(self) -> dict[str, Any]:
        data = self.json()
        if not isinstance(data, dict):
            raise ReplyError(f"{self.url}: a JSON {type(data).__name__}, not an object")
        return data


def _too_big(url: str, cap: int) -> ReplyError:
    return ReplyError(f"{url}: the reply is over {cap:,} bytes")


async def request(client: httpx.AsyncClient, method: str, url: str, *, deadline: float,
                  max_bytes: int = MAX_REPLY_BYTES, **kwargs: Any) -> Reply:
    """One request, its whole reply read within `deadline` seconds and `max_bytes`; httpx.HTTPError for a transport
    failure (refused, reset), ReplyError for a broken bound."""
    try:
        async with asyncio.timeout(deadline):
            async with client.stream(method, url, **kwargs) as response:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise _too_big(str(response.url), max_bytes)
                return Reply(response.status_code, bytes(body), str(response.url))
    except TimeoutError:
        raise ReplyError(f"{method} {url}: no complete reply within {deadline:g} s") from None


@asynccontextmanager
async def event_stream(client: httpx.AsyncClient, method: str, url: str, *, deadline: float,
                       max_bytes: int = MAX_REPLY_BYTES, **kwargs: Any
                       ) -> AsyncIterator[tuple[int, AsyncIterator[str]]]:
    """A streamed reply as (status, its lines), all of it within `deadline` and `max_bytes` (a line within
    MAX_LINE_BYTES): an endless or trickling stream ends in ReplyError instead of holding the client."""
    try:
        async with asyncio.timeout(deadline):
            async with client.stream(method, url, **kwargs) as response:
                yield response.status_code, _lines(response, max_bytes)
    except TimeoutError:
        raise ReplyError(f"{method} {url}: the stream did not end within {deadline:g} s") from None


async def _lines(response: httpx.Response, max_bytes: int) -> AsyncIterator[str]:
    seen, pending = 0, bytearray()
    async for chunk in response.aiter_bytes():
        seen += len(chunk)
        if seen > max_bytes:
            raise _too_big(str(response.url), max_bytes)
        pending += chunk
        while (cut := pending.find(b"\n")) >= 0:
            line, pending = bytes(pending[:cut]), pending[cut + 1:]
            yield line.rstrip(b"\r").decode("utf-8", "replace")
        if len(pending) > MAX_LINE_BYTES:
            raise ReplyError(f"{response.url}: an event line over {MAX_LINE_BYTES:,} bytes")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


def get(client: httpx.Client, url: str, *, deadline: float, max_bytes: int = MAX_REPLY_BYTES,
        **kwargs: Any) -> Reply:
    """A synchronous GET within `deadline` (each read may wait up to the client's read timeout, so a reply ends at
    most one read timeout after the deadline) and `max_bytes`."""
    began = time.monotonic()
    try:
        with client.stream("GET", url, **kwargs) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise _too_big(url, max_bytes)
                if time.monotonic() - began > deadline:
                    raise ReplyError(f"GET {url}: no complete reply within {deadline:g} s")
            return Reply(response.status_code, bytes(body), str(response.url))
    except httpx.ReadTimeout:  # one read stalled past the client's timeout: the same broken bound, said one way
        raise ReplyError(f"GET {url}: no complete reply within {deadline:g} s (a read stalled)") from None
