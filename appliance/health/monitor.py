"""The exporter's reader: tail the log, keep facts, ask the engine, decide the state.

One thread calls `poll()` every interval; HTTP handlers only read `snapshot`, an immutable value
swapped in whole, so a probe never waits for a scan or an engine call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from appliance.health.canary_state import CanaryState
from appliance.health.engine import NOT_CHECKED, EngineProbe, EngineSample
from appliance.health.expect import Evaluation, Judge
from appliance.health.facts import Extractor, Facts, FatalHit
from appliance.health.peers import CrossRank, PeerWatch
from appliance.health.report import LogReport, log_report
from appliance.health.startup import Startup, StartupTracker, drawing
from appliance.health.state import Assessment, State, StateMachine
from appliance.health.tail import LogTailer
from appliance.jsonstrict import JsonObject


class HostSections(Protocol):
    """What the host side adds to a poll: reasons that hold the serve out of traffic, and /status sections."""

    def holds(self) -> list[str]: ...

    def sections(self) -> JsonObject: ...


class StatusJson(TypedDict, total=False):
    """The exporter's /status document (Snapshot.to_json), as its readers take it: the gate's engagement facts, the
    upgrade's probes. A section the host side adds (`memory`, `fabric`) rides beside these."""

    state: str
    ready: bool
    state_for_s: float
    reasons: list[str]
    verdict: str
    log_ready: bool
    profile: dict[str, str]
    """name, digest: the profile this exporter judges."""
    lock_digest: str
    channel: str
    role: str
    versions: JsonObject
    facts: JsonObject
    """The facts read from the engine's log (health/facts.py), by name."""
    expectations: list[JsonObject]
    fatal: list[JsonObject]
    fatal_during_shutdown: list[JsonObject]
    engine: JsonObject
    log: JsonObject
    ranks: JsonObject | None
    canary: JsonObject | None
    startup: JsonObject | None
    age_s: float


@dataclass(frozen=True)
class ExporterIdentity:
    """Who this exporter speaks for: shown in /status and the info metric."""

    profile: str
    profile_digest: str
    lock_digest: str
    """The digest of the profile's channel lock (versions.json channels.NAME)."""
    channel: str
    role: str
    log: str
    engine_url: str | None
    lock_versions: dict[str, str] = field(default_factory=dict)
    groups: dict[str, JsonObject] = field(default_factory=dict)
    """The channel's pin groups as installed here (lock.group_state): whether FlashInfer's jit-cache is present."""


@dataclass(frozen=True)
class Snapshot:
    at: float
    state: State
    since: float
    reasons: list[str]
    started: bool
    """Ready at least once since the exporter started (the startup probe)."""
    stalled: bool
    evaluation: Evaluation
    facts: JsonObject
    quiet: list[FatalHit]
    engine: EngineSample
    runs: int
    lines_read: int
    bytes_read: int
    ranks: CrossRank | None = None
    """The head's comparison with its workers (None on a single node and on workers)."""
    host: JsonObject = field(default_factory=dict)
    """Host-side sections (the memory watchdog, K24; fabric qualification, K25) for /status."""
    canary: CanaryState | None = None
    """The correctness canary's state file as last read (None when the serve runs no canary)."""
    startup: Startup | None = None
    """Where this engine run's start stands (phase, times, counts), read from the log."""

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def versions(self, identity: ExporterIdentity) -> JsonObject:
        return {
            "vllm": self.facts.get("vllm_version"),
            "nccl_vllm": self.facts.get("nccl_version"),
            "nccl_library": self.facts.get("nccl_lib_version"),
            "channel": identity.channel,
            "lock": identity.lock_versions,
            "groups": identity.groups,
        }

    def report(self, identity: ExporterIdentity) -> LogReport:
        """The live log's verdict, as logscan reports a finished one (not ready yet: `unknown`)."""
        return log_report(identity.log, self.evaluation, Facts(), (), finished=False)

    def to_json(self, identity: ExporterIdentity, now: float) -> StatusJson:
        return {  # type: ignore[typeddict-item]  # the host side's sections ride beside the declared keys
            "state": self.state,
            "ready": self.ready,
            "state_for_s": round(now - self.since, 1),
            "reasons": self.reasons,
            "verdict": self.report(identity).verdict,
            "log_ready": self.evaluation.log_ready,
            "profile": {"name": identity.profile, "digest": identity.profile_digest},
            "lock_digest": identity.lock_digest,
            "channel": identity.channel,
            "role": identity.role,
            "versions": self.versions(identity),
            "facts": self.facts,
            "expectations": [r.to_json() for r in self.evaluation.results],
            "fatal": [h.to_json() for h in self.evaluation.fatal],
            "fatal_during_shutdown": [h.to_json() for h in self.quiet],
            "engine": {"url": identity.engine_url, **self.engine.to_json(), "progress_stalled": self.stalled},
            "log": {"path": identity.log, "runs": self.runs, "lines": self.lines_read, "bytes": self.bytes_read},
            "ranks": self.ranks.to_json(now) if self.ranks else None,
            **self.host,
            "canary": self.canary.to_json() if self.canary else None,
            "startup": self.startup.to_json() if self.startup else None,
            "age_s": round(now - self.at, 2),
        }


class Monitor:
    def __init__(self, *, judge: Judge, tailer: LogTailer, identity: ExporterIdentity, clock: Callable[[], float],
                 engine: EngineProbe | None = None, progress_window: float = 60.0,
                 peers: PeerWatch | None = None, host: HostSections | None = None,
                 canary: Callable[[], CanaryState | None] | None = None,
                 follow: Callable[[], tuple[Judge, ExporterIdentity] | None] | None = None,
                 report: Callable[[Snapshot], None] | None = None) -> None:
        self.judge = judge
        self.tailer = tailer
        self.identity = identity
        self.clock = clock
        self.engine = engine
        self.peers = peers
        self.host = host
        self.canary = canary
        self.follow = follow
        self.report = report
        """Told every new snapshot (the container's output: state changes with their reasons, start-up progress)."""
        self.extractor = Extractor(judge.table)
        self.machine = StateMachine(clock, progress_window)
        self.startup = StartupTracker(judge.table.startup, clock)
        self._started = False
        self.last_error: str | None = None
        evaluation = judge.evaluate(self.extractor.facts)
        first = self.machine.update(run=0, log_started=False, evaluation=evaluation, engine=NOT_CHECKED)
        self.snapshot = self._snap(evaluation, NOT_CHECKED, first)

    def poll(self) -> Snapshot:
        moved = False
        followed = self.follow() if self.follow else None
        if followed:  # the engine was relaunched with another profile (a canary step-down): judge that one
            self.judge, self.identity = followed
            moved = True
        for chunk in self.tailer.poll():
            self.extractor.feed(chunk)
            moved = True
        facts = self.extractor.facts
        # The verdict is a function of the facts alone: a quiet log keeps the last one.
        evaluation = self.judge.evaluate(facts) if moved else self.snapshot.evaluation
        sample = self.engine.sample() if self.engine else NOT_CHECKED
        ranks = self.peers.check(facts.values) if self.peers else None
        holds = self.host.holds() if self.host else []
        canary = self.canary() if self.canary else None
        canary_reasons, canary_failed = canary.readiness() if canary else ([], False)
        assessment = self.machine.update(run=facts.runs, log_started=facts.lines_read > 0, evaluation=evaluation,
                                         engine=sample, stopping=self.extractor.stopping,
                                         cross_rank=[*(ranks.reasons if ranks else ()), *holds],
                                         canary=canary_reasons, canary_failed=canary_failed)
        # The start's phase from the facts and from the bar the engine is still drawing (a line without its newline).
        live = {**facts.values, **self.extractor.peek(drawing(self.tailer.pending))}
        startup = self.startup.observe(facts.runs, facts.lines_read > 0, live, evaluation.log_ready)
        self.snapshot = self._snap(evaluation, sample, assessment, ranks, canary, startup)
        if self.report:
            self.report(self.snapshot)
        return self.snapshot

    def _snap(self, evaluation: Evaluation, sample: EngineSample, a: Assessment, ranks: CrossRank | None = None,
              canary: CanaryState | None = None, startup: Startup | None = None) -> Snapshot:
        facts = self.extractor.facts
        self._started = self._started or a.ever_ready
        return Snapshot(
            at=self.clock(), state=a.state, since=a.since, reasons=a.reasons,
            started=self._started, stalled=a.stalled, evaluation=evaluation, facts=facts.to_json(),
            quiet=list(facts.quiet.values()), engine=sample, runs=facts.runs, lines_read=facts.lines_read,
            bytes_read=self.tailer.bytes_read, ranks=ranks, host=self.host.sections() if self.host else {},
            canary=canary, startup=startup)

    def run(self, stop: threading.Event, interval: float) -> None:
        """Poll until `stop` is set; an error in one poll is reported in /status, not fatal."""
        while not stop.is_set():
            began = self.clock()
            try:
                self.poll()
            except Exception as exc:  # keep serving the last snapshot; /live goes stale if this repeats
                self.last_error = f"{type(exc).__name__}: {exc}"
            else:
                self.last_error = None
            stop.wait(max(0.0, interval - (self.clock() - began)))
