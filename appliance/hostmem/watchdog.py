"""The runtime memory watchdog (K24): watch the host while the engine runs and stop the engine cleanly
before unified memory runs out, then start it again once memory has recovered.

Signals (read by appliance.hostmem.sources, the same readers doctor uses): MemAvailable and its rate
of fall, memory PSI (`some`/`full` avg10), and new kernel-log lines (NVRM NV_ERR_NO_MEMORY, GPU Xid;
healthchecks/kernelchecks.yaml). Thresholds come from the profile's `memory` section.

The ladder, each step only while the one before holds:
- ok:        nothing to do;
- not-ready: MemAvailable under `not_ready_below_gib`, PSI some over its mark, or a recent Xid: /ready
             answers 503 so no new traffic comes;
- stop:      MemAvailable under `stop_below_gib`, or falling fast enough to cross it within `lead_s`,
             PSI full over its mark, or an NVRM out-of-memory line: the engine is stopped through
             supervisord (SIGTERM to its group: a clean shutdown), once;
- recovery:  after a stop, once MemAvailable has stayed at or above `resume_above_gib` with no stop or
             not-ready signal for `recover_s`, supervisord starts the engine again.
With `memory.watchdog: warn` the same ladder is computed, logged and exported, and nothing is acted on.
A source that cannot be read is listed as unknown, never counted as healthy.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, get_args

from appliance.hostmem.sources import KernelChecks, KernelLog, Pressure, kernel_hits, mem_available_gib, memory_pressure
from appliance.profile.model import Memory

log = logging.getLogger(__name__)

RULE = "K24"
RATE_WINDOW_S = 3.0
"""MemAvailable's rate of fall is the slope over this many seconds of samples."""
MAX_EVENTS = 20

Level = Literal["ok", "not-ready", "stop"]
LEVELS: tuple[Level, ...] = get_args(Level)


@dataclass(frozen=True)
class Reading:
    """One look at the host. None = that source could not be read."""

    at: float
    available_gib: float | None
    pressure: Pressure | None
    kernel_lines: list[str] | None


@dataclass(frozen=True)
class Decision:
    level: Level
    reasons: list[str]
    """Why the level is not ok, each starting with the rule id."""
    fall_gib_per_s: float | None
    unknown: list[str]


class Ladder:
    """The policy: readings in, a level out. Pure but for its memory of recent samples and kernel hits."""

    def __init__(self, memory: Memory, checks: KernelChecks) -> None:
        self.memory, self.checks = memory, checks
        self._samples: deque[tuple[float, float]] = deque()
        self._kernel: dict[str, tuple[float, str]] = {}
        """signal id -> (when last seen, the line)."""

    def fall_rate(self, now: float, available: float) -> float | None:
        self._samples.append((now, available))
        while self._samples and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        t0, a0 = self._samples[0]
        return (a0 - available) / (now - t0) if now - t0 >= 0.5 else None

    def decide(self, r: Reading) -> Decision:
        m = self.memory
        stop: list[str] = []
        hold: list[str] = []
        unknown: list[str] = []
        rate = None
        if r.available_gib is None:
            unknown.append("MemAvailable (meminfo unreadable)")
        else:
            a = r.available_gib
            rate = self.fall_rate(r.at, a)
            if a < m.stop_below_gib:
                stop.append(f"{RULE} MemAvailable {a:.2f} GiB is under the floor {m.stop_below_gib:g} GiB")
            elif rate and rate > 0 and a - rate * m.lead_s < m.stop_below_gib:
                stop.append(f"{RULE} MemAvailable {a:.2f} GiB falling at {rate:.2f} GiB/s crosses the floor "
                            f"{m.stop_below_gib:g} GiB within {(a - m.stop_below_gib) / rate:.1f} s")
            elif a < m.not_ready_below_gib:
                hold.append(f"{RULE} MemAvailable {a:.2f} GiB is under {m.not_ready_below_gib:g} GiB")
        if r.pressure is None:
            unknown.append("memory PSI (pressure/memory unreadable)")
        else:
            if r.pressure.full_avg10 >= m.psi_full_stop:
                stop.append(f"{RULE} memory PSI full avg10 {r.pressure.full_avg10:g}% >= {m.psi_full_stop:g}%: "
                            f"every task is stalled on memory")
            if r.pressure.some_avg10 >= m.psi_some_not_ready:
                hold.append(f"{RULE} memory PSI some avg10 {r.pressure.some_avg10:g}% >= {m.psi_some_not_ready:g}%")
        if r.kernel_lines is None:
            unknown.append("kernel log (unreadable)")
        else:
            for hit in kernel_hits(r.kernel_lines, self.checks):
                self._kernel[hit.signal.id] = (r.at, hit.line.strip())
        for signal in self.checks.signals:
            seen = self._kernel.get(signal.id)
            if seen and r.at - seen[0] <= signal.hold_s:
                text = f"{signal.rule} kernel log {signal.id} {r.at - seen[0]:.0f} s ago: {seen[1][:160]}"
                (stop if signal.action == "stop" else hold).append(text)
        level: Level = "stop" if stop else "not-ready" if hold else "ok"
        return Decision(level, stop + hold, rate, unknown)


class EngineControl(Protocol):
    def stop(self) -> None: ...

    def start(self) -> None: ...


class SupervisorControl:
    """The engine program under the supervisord that runs this process (its XML-RPC on the unix socket;
    supervisord puts SUPERVISOR_SERVER_URL in its children's environment)."""

    def __init__(self, program: str, env: Mapping[str, str]) -> None:
        from supervisor import childutils

        self.program = program
        self.rpc = childutils.getRPCInterface(dict(env))

    @classmethod
    def from_env(cls, program: str, env: Mapping[str, str] | None = None) -> SupervisorControl | None:
        env = os.environ if env is None else env
        return cls(program, env) if env.get("SUPERVISOR_SERVER_URL") else None

    def stop(self) -> None:
        # wait=False: SIGTERM to the group now; supervisord escalates to SIGKILL after stopwaitsecs.
        self.rpc.supervisor.stopProcess(self.program, False)

    def start(self) -> None:
        self.rpc.supervisor.startProcess(self.program, False)


@dataclass(frozen=True)
class Event:
    at: float
    wall: float
    action: str
    detail: str
    available_gib: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"at_unix": round(self.wall, 3), "action": self.action, "detail": self.detail,
                "mem_available_gib": None if self.available_gib is None else round(self.available_gib, 3)}


@dataclass(frozen=True)
class WatchState:
    mode: str
    level: Level
    reasons: list[str]
    unknown: list[str]
    available_gib: float | None
    fall_gib_per_s: float | None
    pressure: Pressure | None
    engine_stopped: bool
    stops: int
    restarts: int
    kernel_source: str
    procfs: str
    events: list[Event] = field(default_factory=list)

    @property
    def holds(self) -> list[str]:
        """Reasons that take the serve out of traffic (mode stop only; warn reports them and no more)."""
        if self.mode != "stop":
            return []
        out = list(self.reasons)
        if self.engine_stopped:
            out.insert(0, f"{RULE} engine stopped by the memory watchdog; it starts again once memory recovers")
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "rule": RULE, "mode": self.mode, "level": self.level, "reasons": self.reasons, "unknown": self.unknown,
            "mem_available_gib": None if self.available_gib is None else round(self.available_gib, 3),
            "fall_gib_per_s": None if self.fall_gib_per_s is None else round(self.fall_gib_per_s, 3),
            "psi_some_avg10": self.pressure.some_avg10 if self.pressure else None,
            "psi_full_avg10": self.pressure.full_avg10 if self.pressure else None,
            "engine_stopped": self.engine_stopped, "stops": self.stops, "restarts": self.restarts,
            "sources": {"procfs": self.procfs, "kernel_log": self.kernel_source},
            "events": [e.to_json() for e in self.events],
        }


class Watchdog:
    def __init__(self, memory: Memory, checks: KernelChecks, *, procfs: Path, kernel: KernelLog,
                 control: EngineControl | None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, say: Callable[[str], None] | None = None) -> None:
        self.memory, self.procfs, self.kernel, self.control = memory, procfs, kernel, control
        self.ladder = Ladder(memory, checks)
        self.clock, self.wall = clock, wall
        self.say = say or (lambda text: print(f"appliance memory watchdog: {text}", flush=True))
        self.events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self.engine_stopped = False
        self.stops = self.restarts = 0
        self._recovered_since: float | None = None
        self._last_level: Level = "ok"
        self.state = self._state(Decision("ok", [], None, []), None, None)

    def read(self) -> Reading:
        return Reading(self.clock(), mem_available_gib(self.procfs), memory_pressure(self.procfs),
                       self.kernel.read_new())

    def step(self, reading: Reading | None = None) -> WatchState:
        r = reading or self.read()
        d = self.ladder.decide(r)
        if d.level != self._last_level:
            self._record(r, f"level {d.level}", "; ".join(d.reasons) or "memory is fine again")
            self._last_level = d.level
        if self.memory.watchdog == "stop":
            self._act(r, d)
        self.state = self._state(d, r.available_gib, r.pressure)
        return self.state

    def _act(self, r: Reading, d: Decision) -> None:
        if d.level == "stop" and not self.engine_stopped:
            if self.control is None:
                self._record(r, "stop-unavailable", "not under supervisord: cannot stop the engine; "
                             + "; ".join(d.reasons))
                return
            try:
                self.control.stop()
            except Exception as exc:  # the engine may already be down (FATAL, STOPPED): say so, keep watching
                self._record(r, "stop-failed", f"{type(exc).__name__}: {exc}")
                return
            self.engine_stopped, self._recovered_since = True, None
            self.stops += 1
            self._record(r, "engine-stopped", "; ".join(d.reasons))
            return
        if not self.engine_stopped or self.control is None:
            return
        recovered = d.level == "ok" and r.available_gib is not None and r.available_gib >= self.memory.resume_above_gib
        if not recovered:
            self._recovered_since = None
            return
        self._recovered_since = self._recovered_since if self._recovered_since is not None else r.at
        if r.at - self._recovered_since >= self.memory.recover_s:
            try:
                self.control.start()
            except Exception as exc:
                self._record(r, "start-failed", f"{type(exc).__name__}: {exc}")
                return
            self.engine_stopped = False
            self.restarts += 1
            self._record(r, "engine-started", f"MemAvailable {r.available_gib:.2f} GiB >= "
                         f"{self.memory.resume_above_gib:g} GiB for {self.memory.recover_s:g} s")

    def _record(self, r: Reading, action: str, detail: str) -> None:
        self.events.append(Event(r.at, self.wall(), action, detail, r.available_gib))
        self.say(f"{action}: {detail}")

    def _state(self, d: Decision, available: float | None, pressure: Pressure | None) -> WatchState:
        return WatchState(self.memory.watchdog, d.level, d.reasons, d.unknown, available, d.fall_gib_per_s,
                          pressure, self.engine_stopped, self.stops, self.restarts, self.kernel.source,
                          str(self.procfs), list(self.events))

    def run(self, stop: threading.Event, interval: float) -> None:
        """Step every `interval` seconds until `stop` is set; an error in one step is logged, not fatal."""
        while not stop.is_set():
            began = self.clock()
            try:
                self.step()
            except Exception as exc:
                log.warning("memory watchdog step failed: %s: %s", type(exc).__name__, exc)
            stop.wait(max(0.0, interval - (self.clock() - began)))
