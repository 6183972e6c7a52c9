"""FakeHub: a TEST DOUBLE for the Hugging Face hub, which cannot be reached from these machines.

It serves, on a loopback port, the few routes huggingface_hub's downloads call (2.x): the repository tree with each
file's size, git blob id and LFS sha256 (`GET /api/models/{repo}/tree/{rev}`), the repository info
(`GET /api/models/{repo}/revision/{rev}`), and the files (`HEAD`/`GET /{repo}/resolve/{rev}/{path}`, with the
`X-Repo-Commit`, `ETag`/`X-Linked-Etag` and `X-Linked-Size` headers the library reads, and byte ranges). Everything
else (the client, the cache layout, the tree listing it records) is huggingface_hub's own: point it here with
`endpoint=hub.url` or `HF_ENDPOINT`.

Faults for the tests: `cut[path] = n` ends the response after n bytes of that file (a connection lost mid-download),
`slow[path] = seconds` sleeps between chunks of it (a download long enough to be killed).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_MIN = 1024
"""Files at least this large are served as LFS files (sha256 etag), smaller ones as git blobs (sha1 etag)."""
CHUNK = 64 * 1024


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    commit: str
    files: dict[str, bytes]

    def entry(self, path: str) -> dict[str, object]:
        data = self.files[path]
        out: dict[str, object] = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha1(data)}
        if len(data) >= LFS_MIN:
            out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out

    def etag(self, path: str) -> str:
        entry = self.entry(path)
        lfs = entry.get("lfs")
        return str(lfs["oid"]) if isinstance(lfs, dict) else str(entry["oid"])


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    cut: dict[str, int] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, path, Range header) of every request, in order."""
    _server: ThreadingHTTPServer | None = None

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.repo_id] = repo
        return repo

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def downloads(self, name: str) -> list[str | None]:
        """The Range header of each GET of file `name` (None = the whole file)."""
        return [rng for method, path, rng in self.requests if method == "GET" and "/resolve/" in path
                and path.endswith(f"/{name}")]

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _json(self, code: int, payload: object) -> None:
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _route(self, head: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Range")))
                for repo in hub.repos.values():
                    api = f"/api/models/{repo.repo_id}/"
                    if path.startswith(api + "tree/"):
                        return self._json(200, [repo.entry(p) for p in sorted(repo.files)])
                    if path.startswith(api + "revision/"):
                        return self._json(200, {"id": repo.repo_id, "sha": repo.commit,
                                                "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
                    resolve = f"/{repo.repo_id}/resolve/"
                    if path.startswith(resolve):
                        rev, _, name = path[len(resolve):].partition("/")
                        if rev not in (repo.commit, "main") or name not in repo.files:
                            return self._json(404, {"error": "Entry not found"})
                        return self._file(repo, name, head)
                return self._json(404, {"error": "Repository not found"})

            def _file(self, repo: FakeRepo, name: str, head: bool) -> None:
                data = repo.files[name]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0] or 0)
                body = data[start:]
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("ETag", f'"{repo.etag(name)}"')
                if len(data) >= LFS_MIN:
                    self.send_header("X-Linked-Etag", f'"{repo.etag(name)}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", str(len(body)))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if head:
                    return
                limit = hub.cut.get(name)
                sent = 0
                for i in range(0, len(body), CHUNK):
                    piece = body[i:i + CHUNK]
                    if limit is not None and sent + len(piece) > limit:
                        self.wfile.write(piece[: max(0, limit - sent)])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)  # the connection is lost mid-file
                        return
                    self.wfile.write(piece)
                    sent += len(piece)
                    if name in hub.slow:
                        self.wfile.flush()
                        time.sleep(hub.slow[name])

            def do_GET(self) -> None:
                self._route(head=False)

            def do_HEAD(self) -> None:
                self._route(head=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def safetensors_bytes(n: int, seed: int = 7) -> bytes:
    """A valid safetensors file holding one uint8 tensor of n bytes of seeded noise (like weights, no two blocks
    alike: a delta transfer cannot match a block of one file against another block)."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + random.Random(seed).randbytes(n)


def checkpoint_files(shards: int = 3, shard_bytes: int = 300_000, config: dict[str, object] | None = None
                     ) -> dict[str, bytes]:
    """A small checkpoint laid out like a real one: config.json, the safetensors index and its shards."""
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    files = {name: safetensors_bytes(shard_bytes, seed=i) for i, name in enumerate(names, 1)}
    index = {"metadata": {"total_size": shards * shard_bytes}, "weight_map": {f"layer{i}.w": n for i, n in
                                                                               enumerate(names)}}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    files["config.json"] = json.dumps(config or {"architectures": ["LlamaForCausalLM"]}).encode()
    return files
