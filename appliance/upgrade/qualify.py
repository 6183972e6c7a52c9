"""`appliance upgrade qualify PROFILE --to CHANNEL`: obtain the candidate, serve it, gate it and judge it against the
incumbent's last receipt (U2), in the mode the host allows (U3).

    plan (U1)  ->  the incumbent's receipt (its last one, else the gate run on it now)  ->  obtain the candidate's
    engine  ->  side by side: the candidate on other ports beside the running incumbent
                window:       the incumbent's engine stopped, the candidate served on other ports (clients get a
                              refusal, never an unqualified engine), the incumbent restored whatever happens
    ->  the gate on the candidate (bench, recall bands, reasoning, structured, canary calibration, engagement read
        back from its log)  ->  `gate compare`'s noise rules  ->  promote | refuse | inconclusive, with reasons.

Every step is timed and the record (with both receipts) kept in APPLIANCE_HOME/upgrades/<profile>/.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.bounds import PORT_MAX, PORT_MIN
from appliance.channels.engines import obtain_engine
from appliance.errors import ApplianceError
from appliance.gate.receipt import load as load_receipt
from appliance.gate.receipt_model import Receipt
from appliance.hostmem.cards import VISIBLE_ENV, CardPick
from appliance.interrupts import sigterm_as_interrupt
from appliance.profile.active import CHANNEL_ENV, SET_ENV
from appliance.profile.loader import LoadedProfile
from appliance.upgrade.candidate import (
    Pair,
    Request,
    candidate_active,
    check_same_serve,
    load_candidate,
    pair_for,
    read_serve_launch,
    require_renderable,
)
from appliance.upgrade.history import RecordJson, latest_receipt, new_record, utc_now, write_record
from appliance.upgrade.mode import OMP_BIND_ENV, ModeChoice, Requested, candidate_cpu_bind, choose_mode
from appliance.upgrade.serve import EngineControl, Expect, Ready, RunningServe, StartedServe, start_serve, wait_ready
from appliance.upgrade.verdict import Judgement, judge, never_ready

Report = Callable[[str], None]


@dataclass
class QualifyOptions:
    run_dir: Path
    """The incumbent's run folder (launch.json, supervisord.conf)."""
    procfs: Path = Path("/proc")
    mode: Requested = "auto"
    incumbent_receipt: Path | None = None
    checks: str | None = None
    budget_s: float | None = None
    """Seconds the candidate (and, in a window, the restored incumbent) may take to turn ready."""
    candidate_port: int | None = None
    candidate_health_port: int | None = None
    gate_url: str | None = None
    """The candidate's API as clients would reach it (a proxy in front of it); default its own port."""
    model_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)


def free_port(avoid: set[int]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if PORT_MIN <= port <= PORT_MAX and port not in avoid:
            return port
    raise ApplianceError("no free loopback port for the candidate", field="--candidate-port",
                         fix="name one with --candidate-port / --candidate-health-port")


def beside_env(loaded: LoadedProfile, report: Report) -> dict[str, str]:
    """A CPU candidate beside the incumbent gets cores of its own (mode.candidate_cpu_bind), where its engine
    reads the binding variable and the profile does not set it. The process environment, not the profile: what
    is qualified stays the profile a promote serves."""
    from appliance.channels.facts import load_facts

    profile = loaded.profile
    if profile.hardware.target != "cpu" or OMP_BIND_ENV in profile.engine.extra_env or OMP_BIND_ENV in os.environ \
            or not load_facts(profile.engine.channel).has_env(OMP_BIND_ENV):
        return {}
    cores = candidate_cpu_bind(os.sched_getaffinity(0))
    if cores is None:
        return {}
    report(f"the candidate's engine binds to cores {cores} ({OMP_BIND_ENV}), away from the incumbent's")
    return {OMP_BIND_ENV: cores}


def side_sets(ports: tuple[int, int]) -> tuple[str, ...]:
    """What a candidate serving on its own ports (API, exporter) is told: those ports, and no front of its own (the
    incumbent's front holds server.port, its engine server.engine_port; a candidate is asked on its API directly)."""
    return (f"server.port={ports[0]}", f"server.health_port={ports[1]}", "server.front=false",
            "server.engine_port=null")


def serve_beside(req: Request, pair: Pair, run_dir: Path, ports: tuple[int, int], budget_s: float | None,
                 report: Report, extra: tuple[str, ...] = (), *, beside: bool = True, cards: CardPick | None = None
                 ) -> tuple[StartedServe, Ready, LoadedProfile]:
    """The candidate as a serve of its own in `run_dir` on `ports` (API, exporter), `extra` --set on top, until it
    is ready or the budget (default the profile's startup budget) runs out. `beside`: it runs beside the incumbent
    (a CPU candidate then binds cores of its own; on discrete GPUs it runs on `cards`, U3's pick). The
    qualification's side-by-side candidate, and a promote's bridge (appliance/upgrade/bridge.py)."""
    sets = (*side_sets(ports), *extra)
    loaded = load_candidate(req, pair.to_channel.name, pair.sets, sets)
    # The candidate's layer rides in the environment, which outweighs this host's active.json (the incumbent's).
    env = {k: v for k, v in os.environ.items() if k not in ("APPLIANCE_HEALTH_PORT", "APPLIANCE_LOG_DIR")}
    env |= {CHANNEL_ENV: pair.to_channel.name, SET_ENV: ";".join(pair.sets)}
    if beside:
        env |= beside_env(loaded, report)
    if cards is not None:
        env |= cards.env()
        report(f"the candidate's engine runs on GPU(s) {cards.indices} ({VISIBLE_ENV}), away from the incumbent's")
    serve = start_serve(req.profile, run_dir, [*req.cli_overrides, *sets], env, report)
    budget = budget_s or default_budget(loaded.profile)
    report(f"waiting for the candidate to turn ready (budget {budget:g} s)")
    ready = wait_ready(serve.look, Expect(pair.to_channel.name, loaded.digest), budget, alive=serve.alive,
                       report=report)
    return serve, ready, loaded


def default_budget(profile: Any) -> float:
    from appliance.render.k8s import probe_budget

    b = probe_budget(profile)
    return float(b.startup_period_s * b.startup_failures)


def run_gate_on(req: Request, url: str, exporter: str, extra: list[str], checks: str | None, out: Path,
                model_dir: Path | None, active: Any = True) -> Receipt:
    """`appliance gate` in this process against a serve; the receipt (also written to `out`)."""
    from appliance.gate.prepare import GateRequest, prepare
    from appliance.gate.progress import Progress
    from appliance.gate.runner import run_gate

    request = GateRequest(url=url, exporter=exporter, profile=req.profile, overrides=[*req.cli_overrides, *extra],
                          env_overrides=list(req.env_overrides), checks=checks, out=out, model_dir=model_dir,
                          active=active)
    progress = Progress()
    ctx, selected, receipt = prepare(request, progress)
    progress.note(f"{ctx.profile.name} ({ctx.profile.engine.channel}) at {url}: {', '.join(selected)}; receipt in "
                  f"{out}")
    return run_gate(ctx, selected, receipt)


def doctor_problems(candidate: Any, skip: set[str], procfs: Path) -> list[str]:
    """doctor's checks for the candidate (on its own ports) here, less those the qualification answers itself."""
    from appliance.doctor import run_doctor

    checks = run_doctor(candidate, "single", procfs=procfs)
    return [f"doctor {c.name}: {c.detail}" for c in checks if c.status == "fail" and c.name not in skip]


class Qualification:
    def __init__(self, req: Request, opts: QualifyOptions, report: Report) -> None:
        self.req, self.opts, self.report = req, opts, report
        self.t: dict[str, float] = {}
        self.began = time.monotonic()

    def timed(self, key: str, began: float) -> None:
        self.t[key] = round(time.monotonic() - began, 1)

    # --- the sides -----------------------------------------------------------------------------------------
    def incumbent(self, pair: Pair) -> RunningServe:
        launch = read_serve_launch(self.opts.run_dir)
        if launch is None:
            raise ApplianceError(f"no serve runs in {self.opts.run_dir} (no launch.json)", field="--run-dir",
                                 value=str(self.opts.run_dir),
                                 fix="point --run-dir at the run folder of the serve to upgrade (`appliance run "
                                     "--run-dir`, $APPLIANCE_LOG_DIR, or $APPLIANCE_HOME/run/PROFILE)")
        check_same_serve(pair.incumbent, launch, self.opts.run_dir)
        serve = RunningServe(self.opts.run_dir, launch)
        look = serve.look()
        if look.status is None or look.status.get("state") != "ready":
            raise ApplianceError(f"the incumbent in {self.opts.run_dir} is not ready "
                                 f"({(look.status or {}).get('state') or look.error})", field="--run-dir",
                                 value=str(self.opts.run_dir),
                                 fix="qualify against a serve that is ready (`appliance upgrade status`, its /status)",
                                 reason="the candidate is judged against the incumbent, and a window restores it")
        return serve

    def incumbent_receipt(self, pair: Pair, serve: RunningServe, folder: Path) -> tuple[Receipt, str]:
        if self.opts.incumbent_receipt:
            return load_receipt(self.opts.incumbent_receipt), str(self.opts.incumbent_receipt)
        found = latest_receipt(pair.name, pair.from_channel.name, pair.incumbent.digest)
        if found is not None:
            self.report(f"the incumbent's last receipt: {found}")
            return load_receipt(found), str(found)
        self.report("no receipt of the incumbent on this profile and channel: gating the incumbent first")
        began = time.monotonic()
        receipt = run_gate_on(self.req, serve.api_url, serve.exporter_url, [], self.opts.checks, folder / "incumbent",
                              self.opts.model_dir)
        self.timed("incumbent_gate", began)
        return receipt, str(folder / "incumbent" / "receipt.json")

    def candidate_ports(self, serve: RunningServe) -> tuple[int, int]:
        taken = {serve.launch.placement.api_port, serve.launch.exporter.port}
        api = self.opts.candidate_port or free_port(taken)
        health = self.opts.candidate_health_port or free_port(taken | {api})
        if api in taken or health in taken or api == health:
            raise ApplianceError(f"candidate ports {api}/{health}: in use by the incumbent or equal",
                                 field="--candidate-port", value=[api, health],
                                 fix="give the candidate ports of its own")
        return api, health

    def on_ports(self, pair: Pair, ports: tuple[int, int]) -> LoadedProfile:
        return load_candidate(self.req, pair.to_channel.name, pair.sets, side_sets(ports))

    def serve_candidate(self, pair: Pair, folder: Path, ports: tuple[int, int],
                        beside: bool = False, cards: CardPick | None = None) -> tuple[StartedServe, Ready]:
        began = time.monotonic()
        serve, ready, _ = serve_beside(self.req, pair, folder / "candidate-serve", ports,
                                       self.opts.budget_s, self.report, beside=beside, cards=cards)
        self.timed("candidate_start", began)
        return serve, ready

    def gate_candidate(self, pair: Pair, serve: StartedServe, folder: Path, ports: tuple[int, int]) -> Receipt:
        began = time.monotonic()
        extra = list(side_sets(ports))
        receipt = run_gate_on(self.req, self.opts.gate_url or serve.api_url, serve.exporter_url, extra,
                              self.opts.checks, folder / "candidate", self.opts.model_dir,
                              candidate_active(pair.name, pair.to_channel.name, pair.sets))
        self.timed("candidate_gate", began)
        return receipt

    # --- the run -------------------------------------------------------------------------------------------
    def run(self) -> RecordJson:
        pair = pair_for(self.req)
        require_renderable(pair.candidate, "nothing was installed or started")
        serve = self.incumbent(pair)
        choice = choose_mode(pair.candidate.profile, self.opts.mode, self.opts.procfs)
        folder = new_record(pair.name, "qualify", pair.to_channel.name)
        self.report(f"qualify {pair.name}: {pair.from_channel.name} -> {pair.to_channel.name}, {choice.mode} "
                    f"({choice.why}); record {folder}")
        record: RecordJson = {
            "kind": "qualify", "profile": pair.name, "started_at": utc_now(), "mode": choice.to_json(),
            "from": {"channel": pair.from_channel.name, "lock_digest": pair.from_channel.digest,
                     "profile_digest": pair.incumbent.digest},
            "candidate": {"channel": pair.to_channel.name, "lock_digest": pair.to_channel.digest,
                          "profile_digest": pair.candidate.digest, "sets": list(pair.sets)},
            "run_dir": str(self.opts.run_dir), "seconds": self.t, "verdict": None, "receipts": {},
        }
        write_record(folder, record)
        try:
            judgement = self._qualify(pair, serve, choice, folder, record)
        except BaseException as exc:
            record.update(verdict="error", reasons=[f"{type(exc).__name__}: {exc}"], finished_at=utc_now())
            self.t["total"] = round(time.monotonic() - self.began, 1)
            write_record(folder, record)
            raise
        record.update(judgement.to_json(), finished_at=utc_now())
        self.t["total"] = round(time.monotonic() - self.began, 1)
        write_record(folder, record)
        record["record"] = str(folder)
        return record

    def _qualify(self, pair: Pair, serve: RunningServe, choice: ModeChoice, folder: Path,
                 record: RecordJson) -> Judgement:
        inc_receipt, inc_path = self.incumbent_receipt(pair, serve, folder)
        record["receipts"]["incumbent"] = inc_path
        began = time.monotonic()
        _, installed = obtain_engine(pair.to_channel, self.report)
        self.timed("obtain", began)
        record["obtained_install_s"] = round(installed, 1)
        ports = self.candidate_ports(serve)
        if choice.mode == "side-by-side":
            problems = doctor_problems(self.on_ports(pair, ports).profile, {"engine", "memory", "memory.gpu"},
                                       self.opts.procfs)
            if problems:
                return Judgement("refuse", [f"U3 the candidate cannot start beside the incumbent: {p}"
                                            for p in problems])
            cards = choice.cards
            if cards is not None:  # picked before the incumbent's gate and the install: minutes ago
                now = choose_mode(pair.candidate.profile, "auto", self.opts.procfs)
                if now.cards is None:
                    return Judgement("refuse", [f"U3 the candidate cannot start beside the incumbent any more: "
                                                f"{now.why}"])
                cards = now.cards
            return self._candidate(pair, folder, ports, record, inc_receipt, beside=True, cards=cards)
        return self._window(pair, serve, folder, ports, record, inc_receipt)

    def _candidate(self, pair: Pair, folder: Path, ports: tuple[int, int], record: RecordJson,
                   inc_receipt: Receipt, beside: bool = False, cards: CardPick | None = None) -> Judgement:
        cand, ready = self.serve_candidate(pair, folder, ports, beside, cards)
        try:
            record["candidate"]["ready"] = {"ok": ready.ok, "seconds": round(ready.seconds, 1), "why": ready.why,
                                            "restarts": ready.restarts}
            if not ready.ok:
                self.report(f"the candidate did not turn ready: {ready.why}\n{cand.tail(12)}")
                return never_ready(ready.why)
            receipt = self.gate_candidate(pair, cand, folder, ports)
            record["receipts"]["candidate"] = str(folder / "candidate" / "receipt.json")
            return judge(inc_receipt, receipt)
        finally:
            self.report(f"stopping the candidate serve ({cand.stop():.0f} s)")

    def _window(self, pair: Pair, serve: RunningServe, folder: Path, ports: tuple[int, int],
                record: RecordJson, inc_receipt: Receipt) -> Judgement:
        runs = serve.look().runs
        engine = serve.engine_control()  # one client for the window's stop and start, as a promote's restart has
        self.report(f"window: stopping the incumbent's engine in {serve.run_dir}")
        began = time.monotonic()
        restored: Ready | None = None
        try:
            engine.stop()
            problems = doctor_problems(self.on_ports(pair, ports).profile, set(), self.opts.procfs)
            if problems:
                return Judgement("refuse", [f"U3 the candidate cannot start in the window: {p}" for p in problems])
            return self._candidate(pair, folder, ports, record, inc_receipt)
        finally:
            restored = self._restore(serve, engine, pair, runs)
            self.t["window"] = round(time.monotonic() - began, 1)
            record["window"] = {"seconds": self.t["window"], "restored": restored.ok, "why": restored.why,
                                "restore_s": round(restored.seconds, 1)}
            self.report(f"window closed after {self.t['window']:.0f} s: the incumbent is "
                        + ("ready again" if restored.ok else f"NOT ready again: {restored.why}"))

    def _restore(self, serve: RunningServe, engine: EngineControl, pair: Pair, runs: int) -> Ready:
        self.report("window: starting the incumbent's engine again")
        try:
            engine.start()
        except ApplianceError as exc:
            return Ready(False, 0.0, exc.message)
        budget = self.opts.budget_s or default_budget(pair.incumbent.profile)
        return wait_ready(serve.look, Expect(pair.from_channel.name, pair.incumbent.digest, after_runs=runs), budget,
                          alive=serve.alive, report=self.report)


def qualify(req: Request, opts: QualifyOptions, report: Report = print) -> RecordJson:
    """SIGTERM (a `kill`, a timeout, systemd) unwinds like Ctrl-C: the candidate serve is stopped, a window's
    incumbent started again and the record marked `error`. SIGKILL unwinds nothing; the tether stops the candidate."""
    with sigterm_as_interrupt():
        return Qualification(req, opts, report).run()


def render_result(record: RecordJson) -> str:
    m, t = record["mode"], record["seconds"]
    lines = [f"{str(record['verdict']).upper()}: {record['profile']} {record['from']['channel']} -> "
             f"{record['candidate']['channel']} ({record['record']})",
             f"  mode: {m['mode']} ({m['why']})"]
    if record.get("window"):
        w = record["window"]
        lines.append(f"  window: the incumbent was out of service {w['seconds']:.0f} s"
                     + ("" if w["restored"] else f"; NOT RESTORED: {w['why']}"))
    lines.append("  seconds: " + ", ".join(f"{k} {v:g}" for k, v in t.items()))
    lines += [f"  reason: {r}" for r in record.get("reasons") or []]
    lines += [f"  note: {n}" for n in (record.get("notes") or [])[:12]]
    for side, path in record.get("receipts", {}).items():
        lines.append(f"  receipt ({side}): {path}")
    return "\n".join(lines)
