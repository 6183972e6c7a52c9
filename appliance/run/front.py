"""The serve's front (server.front): owns the public API port and forwards each request to the engine that the state
file names, so `appliance upgrade promote --beside` moves traffic between two engines without a gap
(appliance/upgrade/bridge.py).

It speaks HTTP, not bytes: the backend is chosen per request, so a client's keep-alive connection follows a switch
at its next request, and a request in flight finishes on the engine it started on. A streamed answer (SSE) is passed
on chunk by chunk; a client that goes away cancels its handler, which closes the upstream request, and vLLM aborts
it.

    python -m appliance.run.front --listen :8000 --state RUN_DIR/front.json --fallback http://127.0.0.1:8001

front.json: {"backend": "http://127.0.0.1:PORT"}, replaced by a rename; read again when its stat changes (one stat per
request). `--fallback`: the serve's own engine, asked when the backend refuses the connection (a bridge that died
with the promote that started it) or front.json cannot be read."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from aiohttp import (
    ClientConnectionError,
    ClientConnectorError,
    ClientResponse,
    ClientSession,
    ClientTimeout,
    TCPConnector,
    web,
)
from multidict import CIMultiDict, CIMultiDictProxy

# RFC 9110 7.6.1: connection-specific fields are the hop's own, never forwarded; Host and the length are set anew.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length"})


MAX_BODY = 1 << 30
"""A request body the front reads whole before it forwards it: a long prompt with images inline, not an upload."""


class Backend:
    """The state file's backend, read again when the file's stat changes."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self._seen: tuple[int, int, int] | None = None
        self._url = ""

    def url(self, fallback: str) -> str:
        try:
            st = os.stat(self.state)
            seen = (st.st_ino, st.st_mtime_ns, st.st_size)
            if seen != self._seen:
                url = json.loads(self.state.read_text())["backend"]
                if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                    raise ValueError(f"backend {url!r} is no http(s) URL")
                self._url, self._seen = url.rstrip("/"), seen
        except (OSError, ValueError, KeyError, TypeError):
            return fallback
        return self._url


def _forwarded(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """Every end-to-end field, repeated ones kept (a dict would keep one of two Set-Cookie fields)."""
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP)


def make_app(state: Path, fallback: str) -> web.Application:
    backend = Backend(state)
    app = web.Application(client_max_size=MAX_BODY)

    async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
        # No total timeout: a long generation streams for minutes; connect is bounded.
        # An idle pooled connection is dropped before uvicorn's keep-alive (5 s) closes it from the other side.
        app["session"] = ClientSession(connector=TCPConnector(limit=0, keepalive_timeout=3),
                                       timeout=ClientTimeout(total=None, connect=10), auto_decompress=False)
        yield
        await app["session"].close()

    async def send(request: web.Request, url: str, body: bytes) -> ClientResponse:
        session: ClientSession = request.app["session"]
        return await session.request(request.method, f"{url}{request.rel_url}", headers=_forwarded(request.headers),
                                     data=body or None, allow_redirects=False)

    async def forward(request: web.Request) -> web.StreamResponse:
        url = backend.url(fallback)
        body = await request.read()
        try:
            try:
                upstream = await send(request, url, body)
            except ClientConnectorError:
                if url == fallback:
                    raise
                url = fallback  # the backend refused the connection: nothing was sent, the own engine is asked
                upstream = await send(request, url, body)
        except ClientConnectionError as exc:
            return web.json_response({"error": {"message": f"the engine at {url} did not answer: {exc}",
                                                "type": "front"}}, status=502)
        # From here a broken upstream ends the client's answer where it broke (aiohttp closes the connection).
        async with upstream:
            answer = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                        headers=_forwarded(upstream.headers))
            if upstream.content_length is not None:
                answer.content_length = upstream.content_length
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer

    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="appliance-front", description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--state", type=Path, required=True, help="front.json")
    ap.add_argument("--fallback", required=True, help="the serve's own engine (http://127.0.0.1:PORT)")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    host = host.strip("[]")
    # All interfaces where the engine would take them all: vLLM's socket on "::" takes IPv4 too, an aiohttp site
    # bound to "::" alone would not (IPV6_V6ONLY); unset binds both families.
    # handler_cancellation: a client that goes away cancels its handler, which closes the upstream request, and vLLM
    # aborts it (aiohttp's default lets it run to the end for nobody).
    web.run_app(make_app(args.state, args.fallback.rstrip("/")), host=None if host in ("", "::") else host,
                port=int(port), print=None, handle_signals=True, access_log=None, shutdown_timeout=30,
                handler_cancellation=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
