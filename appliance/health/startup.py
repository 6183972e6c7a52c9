"""Where an engine start stands, read from its log: the phase (the table's `startup:` section), how long the start
and the phase have lasted, and, where the log counts (weights shards, CUDA graphs), the fraction and the engine's
own estimate of the time left. A 20-40 minute DeepSeek start then says more than `loading`.

Times are the exporter's clock when it first read each phase's line (an exporter started late reads a start that is
already past at once, and its phases then look short). Pure but for the tracker's memory of when it saw what.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from appliance.health.table import StartupPhase
from appliance.jsonstrict import JsonObject


def tqdm_seconds(text: Any) -> float | None:
    """tqdm's `MM:SS` / `H:MM:SS` (its {remaining}); None for `?` or anything else."""
    if not isinstance(text, str):
        return None
    parts = text.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds


def drawing(pending: bytes) -> str:
    """The redraw a progress bar shows now, from the partial line the log holds (tqdm writes `\\r` + bar each time)."""
    segments = [s for s in pending.decode("utf-8", "replace").split("\r") if s.strip()]
    return segments[-1] if segments else ""


@dataclass(frozen=True)
class Startup:
    """One engine run's start as of a poll (`/status` → `startup`, the appliance_startup_* gauges)."""

    phase: str | None
    """The latest phase entered; None before the run's first line."""
    label: str
    index: int
    """1-based position of the phase in the table (0 = none yet)."""
    phases: tuple[str, ...]
    elapsed_s: float
    """Since the run's first line; frozen at the time to ready once the log said ready."""
    phase_elapsed_s: float
    done: int | None = None
    total: int | None = None
    unit: str | None = None
    detail: str | None = None
    eta_s: float | None = None
    """The engine's estimate of the phase's time left, aged by the time since its line was read."""
    history: tuple[tuple[str, float], ...] = ()
    """(phase, seconds after the run's first line it was entered), in order."""
    ready: bool = False
    """The phase is the table's `ready: true` one: the log said this rank finished starting."""

    @property
    def fraction(self) -> float | None:
        if self.done is None or not self.total:
            return None
        return min(1.0, self.done / self.total)

    def line(self) -> str:
        """The concise line for the container's output."""
        if self.phase is None:
            return "waiting for the engine's first log line"
        if self.ready:
            steps = ", ".join(f"{name} {_clock(later - at)}" for (name, at), (_, later) in pairwise(self.history))
            return f"ready after {_clock(self.elapsed_s)}" + (f" ({steps})" if steps else "")
        text = f"loading {_clock(self.elapsed_s)}: {self.label} ({self.phase}, phase {self.index}/{len(self.phases)}"
        text += f", {_clock(self.phase_elapsed_s)} in it)"
        if self.done is not None and self.total:
            text += f" {self.done}/{self.total}{' ' + self.unit if self.unit else ''} ({self.fraction:.0%}"
            text += f", ~{_clock(self.eta_s)} left)" if self.eta_s is not None else ")"
        if self.detail:
            text += f" [{self.detail}]"
        return text

    def to_json(self) -> JsonObject:
        return {
            "phase": self.phase, "label": self.label, "index": self.index, "phases": list(self.phases),
            "elapsed_s": round(self.elapsed_s, 1), "phase_elapsed_s": round(self.phase_elapsed_s, 1),
            "done": self.done, "total": self.total, "unit": self.unit,
            "fraction": None if self.fraction is None else round(self.fraction, 4),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1), "detail": self.detail,
            "history": [{"phase": name, "at_s": round(at, 1)} for name, at in self.history],
        }


def _clock(seconds: float | None) -> str:
    s = max(0, round(seconds or 0))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@dataclass
class _Run:
    started: float
    entered: dict[str, float] = field(default_factory=dict)
    ready_at: float | None = None
    count_seen: dict[str, tuple[Any, float]] = field(default_factory=dict)
    """The phase's `remaining` as last read, and when: an estimate ages while no new line comes."""


class StartupTracker:
    """Feed it each poll's facts (and the line the engine is still drawing); read `view()`."""

    def __init__(self, phases: list[StartupPhase], clock: Callable[[], float]) -> None:
        self.phases = phases
        self.clock = clock
        self._names = tuple(p.id for p in phases)
        self._run_id: int | None = None
        self._run: _Run | None = None
        self._facts: Mapping[str, Any] = {}

    def observe(self, run: int, started: bool, facts: Mapping[str, Any], log_ready: bool) -> Startup:
        """`started`: this run has printed a line; `facts`: what it said so far, the line still being drawn
        (a tqdm bar without its newline) merged over them."""
        now = self.clock()
        if run != self._run_id:
            self._run_id, self._run = run, None
        if started and self._run is None:
            self._run = _Run(started=now)
        self._facts = facts
        current = self._run
        if current is not None:
            for p in self.phases:
                if p.id not in current.entered and self._entered(p, facts, log_ready):
                    current.entered[p.id] = now
            if log_ready and current.ready_at is None:
                current.ready_at = now
        return self.view(now)

    @staticmethod
    def _entered(phase: StartupPhase, facts: Mapping[str, Any], log_ready: bool) -> bool:
        if phase.ready:
            return log_ready
        return any(f in facts for f in phase.enter) or any(all(f in facts for f in group)
                                                           for group in phase.enter_together)

    def view(self, now: float | None = None) -> Startup:
        now = self.clock() if now is None else now
        run = self._run
        if run is None or not run.entered:
            return Startup(None, "", 0, self._names, 0.0, 0.0)
        order = [p for p in self.phases if p.id in run.entered]
        phase = max(order, key=lambda p: self.phases.index(p))
        at = run.entered[phase.id]
        end = run.ready_at if run.ready_at is not None else now
        done, total, eta = self._count(phase, run, now)
        history = tuple((p.id, run.entered[p.id] - run.started) for p in order)
        detail = self._facts.get(phase.detail) if phase.detail else None
        return Startup(phase.id, phase.label, self.phases.index(phase) + 1, self._names, end - run.started,
                       end - at, done, total, phase.unit if total else None,
                       str(detail) if detail is not None else None, eta, history, phase.ready)

    def _count(self, phase: StartupPhase, run: _Run, now: float) -> tuple[int | None, int | None, float | None]:
        if phase.done is None or phase.total is None:
            return None, None, None
        done, total = self._facts.get(phase.done), self._facts.get(phase.total)
        if not isinstance(done, int) or not isinstance(total, int) or total <= 0:
            return None, None, None
        eta = None
        if phase.remaining:
            raw = self._facts.get(phase.remaining)
            seen = run.count_seen.get(phase.id)
            if seen is None or seen[0] != (done, raw):
                run.count_seen[phase.id] = seen = ((done, raw), now)
            left = tqdm_seconds(raw)
            if left is not None and done < total:
                eta = max(0.0, left - (now - seen[1]))
            elif done >= total:
                eta = 0.0
        return done, total, eta
