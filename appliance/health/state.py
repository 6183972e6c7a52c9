"""The serve's state: starting -> loading -> ready -> degraded -> failed, with an injected clock.

- starting: nothing in the log of this run yet;
- loading:  the engine is starting (log lines, no readiness evidence yet);
- ready:    the log says ready, every blocking expectation passes, vLLM /health is 200 and, while
            requests run, the engine makes progress (K18: /health stays green behind a wedged engine);
            on a multi-node head, no worker loaded another NCCL (K15);
- degraded: started once (or finished starting) but one of those conditions fails now;
- failed:   a fatal signature (K17); a new engine run in the log starts over at loading.

The correctness canary (appliance/canary) adds its own reasons: confirmed corruption is `degraded`,
corruption past the last step-down rung is `failed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from appliance.health.engine import EngineSample
from appliance.health.expect import Evaluation

State = Literal["starting", "loading", "ready", "degraded", "failed"]
STATES: tuple[State, ...] = ("starting", "loading", "ready", "degraded", "failed")


class ProgressWatch:
    """Stalled = requests are running and no progress counter moved for `window` seconds."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._last_value: float | None = None
        self._last_move: float | None = None

    def reset(self) -> None:
        self._last_value = self._last_move = None

    def observe(self, now: float, running: float | None, progress: float | None) -> bool:
        if running is None or progress is None:
            return False  # no metrics: say nothing rather than guess
        if running <= 0 or progress != self._last_value or self._last_move is None:
            self._last_move = now
        self._last_value = progress
        return running > 0 and now - self._last_move > self.window

    def idle_for(self, now: float) -> float:
        return 0.0 if self._last_move is None else now - self._last_move


@dataclass(frozen=True)
class Assessment:
    state: State
    reasons: list[str]
    since: float
    ever_ready: bool
    stalled: bool


class StateMachine:
    def __init__(self, clock: Callable[[], float], progress_window: float = 60.0) -> None:
        self.clock = clock
        self.progress = ProgressWatch(progress_window)
        self.state: State = "starting"
        self.since = clock()
        self.ever_ready = False
        """Ready at least once in the current engine run."""
        self.run = 0

    def update(self, *, run: int, log_started: bool, evaluation: Evaluation, engine: EngineSample,
               stopping: bool = False, cross_rank: Sequence[str] = (), canary: Sequence[str] = (),
               canary_failed: bool = False) -> Assessment:
        now = self.clock()
        if run != self.run:
            self.run, self.ever_ready = run, False
            self.progress.reset()
        stalled = engine.healthy and self.progress.observe(now, engine.running, engine.progress)
        reasons = self._reasons(evaluation, engine, stalled, stopping, now) + list(cross_rank) + list(canary)
        state: State
        if evaluation.fatal or canary_failed:
            state = "failed"
        elif not reasons:
            state, self.ever_ready = "ready", True
        elif self.ever_ready or evaluation.log_ready:
            state = "degraded"
        else:
            state = "loading" if log_started else "starting"
        if state != self.state:
            self.state, self.since = state, now
        return Assessment(state, reasons, self.since, self.ever_ready, stalled)

    def _reasons(self, evaluation: Evaluation, engine: EngineSample, stalled: bool, stopping: bool,
                 now: float) -> list[str]:
        reasons = [f"{h.rule} fatal {h.id} at line {h.line}: {h.message}" for h in evaluation.fatal]
        if not evaluation.log_ready:
            reasons.append("the log has not said ready yet")
        if stopping:
            reasons.append("the engine is shutting down")
        if engine.checked and not engine.healthy:
            reasons.append(f"engine: {engine.error}")
        if stalled:
            reasons.append(f"K18 no engine progress for {self.progress.idle_for(now):.0f} s while "
                           f"{engine.running:g} request(s) run (window {self.progress.window:g} s)")
        reasons += [f"{r.rule} {r.name}: {r.detail}" for r in evaluation.results if r.blocking]
        return reasons
