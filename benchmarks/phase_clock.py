"""Where an engine start spends its time, for the benchmarks (warm_start.py, upgrade_downtime.py): the serve log read
as it is written through the log-check table (healthchecks/logchecks.yaml: the patterns, their anchors and the
engine source lines each follows live there), each mark the moment its fact first appeared, on the benchmark's own
clock (the log's timestamps have one-second steps and say nothing of the appliance's own steps before the engine).

The marks follow the CPU engine's start in the order it runs. With W6 (a one-rank CPU serve) the API server and the
engine core are two processes that each import vLLM and torch, and the worker runs inside the engine core.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from appliance.health.facts import Extractor
from appliance.health.table import LogTable, load_table


@dataclass(frozen=True)
class Mark:
    id: str
    facts: tuple[str, ...]
    """Facts of the log-check table: the mark is the first sight of any of them."""
    phase: str
    """What ran between the mark before and this one."""


MARKS = (
    Mark("banner", ("engine_started",), "API server process: python imports (vllm, torch), arguments"),
    Mark("load", ("load_model_path", "load_from_hub"), "config, model inspection, engine-core process spawned "
         "(imports vllm, torch again), the worker set up in it"),
    Mark("weights", ("weights_load_seconds",), "model construction and weights read"),
    Mark("warmup-start", ("warmup_started",), "memory setup before the warm-up"),
    Mark("kv", ("kv_tokens",), "warm-up: torch.compile (Dynamo trace, Inductor or its cache), KV cache sized"),
    Mark("init-engine", ("init_engine_seconds",), "engine core's last steps"),
    Mark("api-up", ("startup_complete",), "API server: tokenizer, chat template, routes"),
)


@cache
def _table() -> LogTable:
    return load_table()


@dataclass
class LineClock:
    """A thread that reads `path` as it grows and keeps when each mark's fact first appeared (seconds since
    `t0`, time.monotonic), and when `launch` (a file `appliance run` writes before it execs supervisord) appeared."""

    path: Path
    t0: float
    launch: Path | None = None
    offset: int = 0
    seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _partial: bytes = b""
    _extractor: Extractor = field(default_factory=lambda: Extractor(_table()))

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
        if not lines:
            return
        now = time.monotonic() - self.t0
        self.seen.setdefault("first-line", now)
        self._extractor.feed(b"\n".join(lines) + b"\n")
        values = self._extractor.facts.values
        for mark in MARKS:
            if mark.id not in self.seen and any(name in values for name in mark.facts):
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
