"""Test equipment: a loopback HTTP proxy in front of a real engine that corrupts the text it answers with.

Every request goes to the engine unchanged and every answer comes back, except the generated text of
`/v1/completions` and `/v1/chat/completions` (streamed or not): each piece of it becomes the same word again and
again — the silent `the the the …` loop users report from a broken kernel, with HTTP 200, well-formed JSON and
`/health` green. What a bad candidate engine looks like to the gate and the canary; it runs only on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

WORD = "the "
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "accept-encoding"}
GENERATING = ("/v1/completions", "/v1/chat/completions")


def corrupt_choice(choice: dict[str, Any]) -> None:
    if isinstance(choice.get("text"), str) and choice["text"]:
        choice["text"] = WORD * max(1, len(choice["text"]) // len(WORD))
    for key in ("message", "delta"):
        part = choice.get(key)
        if isinstance(part, dict) and isinstance(part.get("content"), str) and part["content"]:
            part["content"] = WORD * max(1, len(part["content"]) // len(WORD))


def corrupt_body(data: Any) -> Any:
    if isinstance(data, dict):
        for choice in data.get("choices") or []:
            if isinstance(choice, dict):
                corrupt_choice(choice)
    return data


class CorruptingProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/")
        self.client = httpx.Client(timeout=600, trust_env=False)
        self.corrupted = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> CorruptingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self.client.close()


class _Handler(BaseHTTPRequestHandler):
    server: CorruptingProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        generating = self.command == "POST" and self.path.split("?")[0] in GENERATING
        try:
            with self.server.client.stream(self.command, self.server.upstream + self.path, content=body,
                                           headers=headers) as reply:
                stream = reply.headers.get("content-type", "").startswith("text/event-stream")
                self.send_response(reply.status_code)
                for k, v in reply.headers.items():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                if stream:
                    self.end_headers()
                    for line in reply.iter_lines():
                        self.wfile.write((self._line(line) if generating else line).encode() + b"\n")
                        self.wfile.flush()
                    return
                data = reply.read()
                if generating and reply.status_code == 200:
                    try:
                        data = json.dumps(corrupt_body(json.loads(data))).encode()
                        self.server.corrupted += 1
                    except ValueError:
                        pass
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        except httpx.HTTPError as exc:
            message = f"upstream: {exc}".encode()
            self.send_response(502)
            self.send_header("Content-Length", str(len(message)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(message)
        self.close_connection = True

    def _line(self, line: str) -> str:
        if not line.startswith("data: ") or line == "data: [DONE]":
            return line
        try:
            event = json.loads(line[6:])
        except ValueError:
            return line
        self.server.corrupted += 1
        return "data: " + json.dumps(corrupt_body(event))
