"""A fake OpenAI-compatible serve with hostile or broken modes, on loopback, for the canary and gate clients' tests
and the fuzz suite (a test double for a *misbehaving* serve: the real CPU engine is well behaved, so it cannot play
this part).

`modes` maps a path (`/v1/models`, `/v1/completions`, `/v1/chat/completions`, `/tokenize`, `/version`, `/status`;
`PATH#stream` for streamed requests only) to a mode; unmapped paths answer well. Modes: good, not-json, empty,
wrong-shape, deep, huge, status-500, trickle (a byte every 0.2 s, forever), endless (SSE events forever, never
[DONE]), bad-events (SSE data that is no JSON), dup-keys, nan, echo (a well-formed answer whose model ids and text
are the request's Authorization header: what the client sent must not come back on its screen).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("good", "not-json", "empty", "wrong-shape", "deep", "huge", "status-500", "trickle", "endless",
         "bad-events", "dup-keys", "nan", "echo")
GOOD: dict[str, Any] = {
    "/v1/models": {"object": "list", "data": [{"id": "m", "root": "m", "max_model_len": 2048}]},
    "/v1/completions": {"choices": [{"text": "a reply", "finish_reason": "stop"}], "usage": {"completion_tokens": 2}},
    "/v1/chat/completions": {"choices": [{"message": {"content": "a reply"}, "finish_reason": "stop"}],
                             "usage": {"completion_tokens": 2}},
    "/tokenize": {"tokens": [1, 2, 3], "count": 3},
    "/version": {"version": "0.32.0"},
    "/status": {"state": "ready", "facts": {}, "profile": {"name": "cpu-smoke"}},
}
WRONG: dict[str, Any] = {
    "/v1/models": {"data": "m"}, "/v1/completions": {"choices": [{"text": 5}]},
    "/v1/chat/completions": {"choices": [{"message": "hi"}]}, "/tokenize": {"tokens": "x"},
    "/version": {"version": ["x"]}, "/status": {"facts": [1], "profile": "p", "expectations": 3},
}


class _Handler(BaseHTTPRequestHandler):
    server: HostileServer
    protocol_version = "HTTP/1.0"  # a body ends when the connection closes: endless and trickling bodies are easy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer(None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        self._answer(body)

    def _answer(self, body: dict[str, Any] | None) -> None:
        path = self.path.split("?", 1)[0]
        self.server.asked.append(path)
        stream = bool(body and body.get("stream"))
        mode = self.server.modes.get(f"{path}#stream" if stream else path) or self.server.modes.get(path, "good")
        with contextlib.suppress(OSError):  # the client gave up: what a hostile serve wants, and what is tested
            self._mode(path, mode, stream)

    def _send(self, code: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(data)

    def _mode(self, path: str, mode: str, stream: bool) -> None:
        good = GOOD.get(path, {"ok": True})
        if mode == "good":
            if stream:
                text = good["choices"][0].get("text") or good["choices"][0]["message"]["content"]
                key = "text" if path == "/v1/completions" else "delta"
                piece = {"text": text} if key == "text" else {"delta": {"content": text}}
                self._send(200, f"data: {json.dumps({'choices': [piece]})}\n\ndata: [DONE]\n\n".encode(),
                           "text/event-stream")
            else:
                self._send(200, json.dumps(good).encode())
        elif mode == "not-json":
            self._send(200, b"<html>an error page, not JSON</html>", "text/html")
        elif mode == "empty":
            self._send(200, b"")
        elif mode == "wrong-shape":
            self._send(200, json.dumps(WRONG.get(path, [1, 2])).encode())
        elif mode == "deep":
            self._send(200, b"[" * 100_000 + b"]" * 100_000)
        elif mode == "huge":
            self.send_response(200)
            self.end_headers()
            chunk = b" " * (1 << 20)
            for _ in range(64):  # 64 MiB of whitespace, then a valid document
                self.wfile.write(chunk)
            self.wfile.write(json.dumps(good).encode())
        elif mode == "status-500":
            self._send(500, b'{"error": {"message": "internal"}}')
        elif mode == "trickle":
            self.send_response(200)
            self.end_headers()
            for byte in (json.dumps(good).encode() * 1000):
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        elif mode == "endless":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            event = b'data: {"choices": [{"text": "x", "delta": {"content": "x"}}]}\n\n'
            while not self.server.closing.is_set():
                self.wfile.write(event * 64)
        elif mode == "bad-events":
            self._send(200, b"data: {not json\n\ndata: [1, 2]\n\ndata: {\"choices\": 5}\n\n", "text/event-stream")
        elif mode == "dup-keys":
            self._send(200, b'{"data": [{"id": "a"}], "data": [{"id": "b"}], "choices": [], "choices": []}')
        elif mode == "echo":
            said = self.headers.get("Authorization", "none")
            text = json.dumps(good).replace("a reply", f"you sent {said}").replace('"m"', json.dumps(said))
            echoed = json.loads(text)
            if stream:
                piece = {"text": f"you sent {said}", "delta": {"content": f"you sent {said}"}}
                self._send(200, f"data: {json.dumps({'choices': [piece]})}\n\ndata: [DONE]\n\n".encode(),
                           "text/event-stream")
            else:
                self._send(200, json.dumps(echoed).encode())
        elif mode == "nan":
            self._send(200, b'{"data": [{"id": NaN}], "choices": [{"text": NaN}], "tokens": [NaN]}')
        else:
            raise ValueError(mode)


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.modes: dict[str, str] = {}
        self.asked: list[str] = []
        self.closing = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> HostileServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()
