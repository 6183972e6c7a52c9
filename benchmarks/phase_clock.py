"""Where an engine start spends its time, for the benchmarks (warm_start.py, upgrade_downtime.py): the serve log read
as it is written, each mark the moment the first line holding its anchor appeared, on the benchmark's own clock
(the log's timestamps have one-second steps and say nothing of the appliance's own steps before the engine).

The marks (MARKS) follow the CPU engine's start in the order it runs; vLLM 0.32.0 and 0.31.0 print each anchor
at the place named. The CPU platform forces the `mp` executor and `spawn` (vllm/platforms/cpu.py:341, :409), so the
API server, the engine core and the worker are three processes that each import vLLM and torch from scratch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Mark:
    id: str
    anchor: str
    """A literal piece of the line (first sight counts)."""
    phase: str
    """What ran between the mark before and this one."""
    source: str


MARKS = (
    Mark("banner", "non-default args:", "API server process: python imports (vllm, torch), arguments",
         "vllm/entrypoints/serve/utils/api_utils.py:286"),
    Mark("engine-core", "Initializing a V1 LLM engine", "config, model inspection, engine-core process spawned "
         "(imports vllm, torch again)", "vllm/v1/engine/core.py:134 (0.31.0 :130)"),
    Mark("worker", "Starting to load model", "worker process spawned (imports again), distributed init",
         "vllm/v1/worker/cpu_model_runner.py:68 (0.31.0 :69)"),
    Mark("weights", "Loading weights took", "model construction and weights read",
         "vllm/model_executor/model_loader/default_loader.py:502 (0.31.0 :485)"),
    Mark("warmup-start", "Warming up model for the compilation", "memory setup before the warm-up",
         "vllm/v1/worker/cpu_model_runner.py:87 (0.31.0 :88)"),
    Mark("warmup-done", "Warming up done.", "warm-up: torch.compile (Dynamo trace, Inductor or its cache)",
         "vllm/v1/worker/cpu_model_runner.py:91 (0.31.0 :92)"),
    Mark("kv", "KV cache size:", "KV cache sized and allocated", "vllm/v1/core/kv_cache_utils.py:2328 (0.31.0 :2465)"),
    Mark("init-engine", "init engine (profile, create kv cache, warmup model) took", "engine core's last steps",
         "vllm/v1/engine/core.py:403 (0.31.0 :381)"),
    Mark("api-up", "Application startup complete", "API server: tokenizer, chat template, routes",
         "uvicorn/lifespan/on.py:62"),
)


@dataclass
class LineClock:
    """A thread that reads `path` as it grows and keeps when each mark's anchor first appeared (seconds since
    `t0`, time.monotonic), and when `launch` (a file `appliance run` writes before it execs supervisord) appeared."""

    path: Path
    t0: float
    launch: Path | None = None
    offset: int = 0
    seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _partial: bytes = b""

    def __enter__(self) -> LineClock:
        try:
            self.offset = self.path.stat().st_size  # a restart appends to the log: only this start's lines
        except OSError:
            self.offset = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._read()

    def note(self, name: str) -> None:
        self.seen.setdefault(name, time.monotonic() - self.t0)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            if self.launch is not None and "launch" not in self.seen and self.launch.exists():
                self.note("launch")
            self._read()

    def _read(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        if not chunk:
            return
        self.offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        now = time.monotonic() - self.t0
        for raw in lines:
            if "first-line" not in self.seen:
                self.seen["first-line"] = now
            text = raw.decode("utf-8", "replace")
            for mark in MARKS:
                if mark.id not in self.seen and mark.anchor in text:
                    self.seen[mark.id] = now

    def phases(self, ready_s: float, since_s: float = 0.0, restart: bool = False) -> list[tuple[str, float]]:
        """(phase, seconds) in order, from `since_s` to `ready_s` (seconds since t0): the appliance's own steps (to
        launch.json), supervisord and the engine's process start (to its first line), then one per mark; a mark not
        seen merges into the next. `restart`: the log already holds a serve, whose shutdown lines come first, so
        the phases start at the new engine's banner."""
        order = [] if restart else [
            ("launch", "appliance's own steps (validate, checks, resolve, launch.json)"),
            ("first-line", "supervisord, `appliance exec`, the engine's first line")]
        order += [(m.id, m.phase if m.id != "banner" or not restart else
                   "engine stopped, restarted, API server's imports") for m in MARKS]
        order += [("ready", "to the first request served" if restart else "to /health answering 200")]
        out, last = [], since_s
        for mark, phase in order:
            at = ready_s if mark == "ready" else self.seen.get(mark)
            if at is None:
                continue
            out.append((phase, round(at - last, 1)))
            last = at
        return out
