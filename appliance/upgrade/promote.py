"""`appliance upgrade promote` and `rollback`: switch a serve's active channel atomically, restart it on the new
channel, and keep the previous channel as the rollback target (U4).

Without containers the switch is the active launch: `APPLIANCE_HOME/upgrades/<profile>/active.json` (replaced by a
rename; the record it replaced rides inside it as `previous`) and the run folder's launch.json re-resolved from it
(supervisord.conf names only launch.json, so it does not change), then the engine program restarted. The switch then
has to prove itself within a stated budget: the exporter ready on the new channel and profile (its log expectations
passing), then the first canary rounds healthy, with the calibration the qualification recorded on this candidate.
If it does not, the previous channel is switched back the same way and the serve restarted on it, and the record
says why.

A promote rests on a qualification of exactly this candidate (its profile digest on its channel's lock) whose verdict
was `promote`; `--force` goes without one and the record says so. A multi-node serve switches every rank at once
(U5): through the compose env file every node reads, or the Kubernetes manifests (appliance/upgrade/media.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from appliance.bounds import PROMOTE_DRAIN_S
from appliance.canary.calibration import RECEIPT_KEY
from appliance.channels.engines import obtain_engine
from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.profile.active import Active, active_path, read_active, write_active
from appliance.profile.loader import LoadedProfile
from appliance.rules.upgrade import RULES
from appliance.upgrade.candidate import (
    Pair,
    Request,
    check_same_serve,
    load_incumbent,
    pair_for,
    read_serve_launch,
    require_renderable,
)
from appliance.upgrade.history import Record, RecordJson, latest_qualification, new_record, utc_now, write_record
from appliance.upgrade.qualify import default_budget
from appliance.upgrade.serve import Expect, Ready, RunningServe, exporter_change, wait_ready
from appliance.upgrade.steps import StepClock, Steps
from appliance.upgrade.unfinished import (
    SWITCHING_BACK,
    close_chain,
    either_side,
    refuse_stacking,
    returning,
    returns_to,
    switched_and_unfinished,
)

Report = Callable[[str], None]
Drained = Literal["idle", "busy", "unknown", "gone", "skipped"]
STOP_POLL_S = 0.1
"""The drain's look interval: the stop follows the first look that finds the engine idle."""


@dataclass(frozen=True)
class Drain:
    """How a wait for an idle engine ended, and its seconds."""

    result: Drained
    seconds: float = 0.0

    def then(self, last: Drain) -> Drain:
        """This wait (before the switch) followed by `last` (the look just before the stop): the last one's
        result, both waits' seconds."""
        return Drain(last.result, self.seconds + last.seconds)


@dataclass
class PromoteOptions:
    run_dir: Path
    budget_s: float | None = None
    """Seconds the switched serve has to turn ready and pass its first canary rounds."""
    canary_rounds: int = 1
    force: bool = False
    """Promote without a qualification (said in the record)."""
    procfs: Path = Path("/proc")
    beside: bool = False
    """Serve the candidate as a bridge behind the serve's front while the engine restarts (appliance/upgrade/
    bridge.py): no time out of service."""
    drain_s: float = PROMOTE_DRAIN_S
    """At most this long before the stop, wait for a moment when the engine runs no request (0: stop at once)."""


@dataclass
class Proof:
    ok: bool
    why: str
    ready: Ready | None = None
    canary: list[JsonObject] = field(default_factory=list)
    seconds: float = 0.0
    steps: Steps = field(default_factory=Steps)
    """The restart's steps (drain, restart, ready, canary, out of service)."""
    drain: Drained | None = None
    """How the drain before the stop ended: `idle` (no request was aborted), `busy` (requests still ran or waited
    at its bound, and the stop aborted them), `unknown` (the engine's /metrics gave no request count: the bound was
    waited out), `gone` (the engine no longer answered), `skipped` (--drain-s 0)."""

    def to_json(self) -> JsonObject:
        r = self.ready
        return {"ok": self.ok, "why": self.why, "seconds": round(self.seconds, 1),
                "ready": None if r is None else {"ok": r.ok, "seconds": round(r.seconds, 1), "why": r.why,
                                                 "restarts": r.restarts},
                "canary": self.canary, "steps": self.steps.to_json(), "drain": self.drain}


def require_qualification(pair: Pair, force: bool) -> Record | None:
    """U4: the newest qualification of this very candidate, with verdict promote; None with --force."""
    rec = latest_qualification(pair.name, pair.candidate.digest, pair.to_channel.digest)
    if rec is not None and rec.data.get("verdict") == "promote":
        return rec
    if force:
        return None
    u4 = RULES["U4"]
    said = (f"its last qualification ({rec.id}) says {rec.data.get('verdict')}: "
            + "; ".join(rec.data.get("reasons") or [])[:400]) if rec else "it was never qualified"
    raise ApplianceError(f"U4 no qualification with verdict promote for {pair.name} on {pair.to_channel.name} "
                         f"(lock {pair.to_channel.digest[:12]}): {said}", field="--to", value=pair.to_channel.name,
                         fix=f"qualify it first: appliance upgrade qualify {pair.name} --to {pair.to_channel.name}"
                             + (" " + " ".join(f"--set {s}" for s in pair.sets) if pair.sets else "")
                             + " (or pass --force to promote without one: not advised)", reason=u4.reason)


def canary_rounds(url: str, loaded: LoadedProfile, rounds: int, calibration: Path | None,
                  report: Report) -> list[JsonObject]:
    """`rounds` canary rounds against the switched serve; each round's verdict, seconds and signatures."""
    from appliance.canary.session import one_round, plan_for_profile

    p = loaded.profile
    plan = plan_for_profile(p)
    out = []
    for i in range(rounds):
        began = time.monotonic()
        try:
            result = asyncio.run(one_round(url, model=p.server.served_model_name, plan=plan,
                                           calibration_path=calibration, timeout=300.0))
        except ApplianceError as exc:
            out.append({"round": i + 1, "healthy": False, "error": exc.message,
                        "seconds": round(time.monotonic() - began, 1)})
            report(f"canary round {i + 1}: error: {exc.message}")
            break
        row = {"round": i + 1, "healthy": result.healthy, "seconds": round(time.monotonic() - began, 1),
               "checks": result.checks, "signatures": result.signatures,
               "evidence": [f.render() for f in result.findings[:3]]}
        out.append(row)
        report(f"canary round {i + 1}: {'healthy' if result.healthy else 'CORRUPTION ' + ', '.join(result.signatures)}"
               f" ({row['seconds']:g} s)")
        if not result.healthy:
            break
    return out


@dataclass
class NativeSwitch:
    """The active launch of a native serve: active.json + the run folder's launch.json, and its supervisord."""

    req: Request
    name: str
    """The profile's name (the key of its active record)."""
    run_dir: Path
    report: Report
    drain_s: float = PROMOTE_DRAIN_S

    @property
    def serve(self) -> RunningServe:
        launch = read_serve_launch(self.run_dir)
        if launch is None:
            raise ApplianceError(f"no serve runs in {self.run_dir} (no launch.json)", field="--run-dir",
                                 value=str(self.run_dir), fix="point --run-dir at the run folder of `appliance run`")
        return RunningServe(self.run_dir, launch)

    def relaunch(self, expect_digest: str) -> LoadedProfile:
        """launch.json re-resolved for what the profile resolves to now (the active layer just written), as
        `appliance run` resolves it; refused, with nothing written, when that is not `expect_digest` or when the
        exporter's arguments (ports, peers) would change."""
        from appliance.paths import appliance_home
        from appliance.run.launch import resolve_relaunch, write_launch
        from appliance.settings import load_settings

        before = self.serve.launch
        loaded = load_incumbent(self.req)
        if loaded.digest != expect_digest:
            raise ApplianceError(f"the profile resolves to digest {loaded.digest[:12]} after the switch, not the "
                                 f"{expect_digest[:12]} planned", field="engine.channel", value=loaded.digest[:12],
                                 fix="an override outweighs the active channel: `appliance config` shows the origins")
        # The same node, told the same as `appliance run` was (launch.json's placement), on the switched profile.
        launch = resolve_relaunch(loaded, self.run_dir / "launch.json", load_settings(), appliance_home(), self.report)
        changed = exporter_change(before.exporter, launch.exporter())
        if changed:
            raise ApplianceError(f"the relaunch would change the running exporter's inputs: {changed}",
                                 field="APPLIANCE_HEALTH_PORT", value=changed,
                                 fix="run `appliance upgrade` with the serve's APPLIANCE_HEALTH_PORT and flags",
                                 reason="a promote restarts the engine only: the exporter keeps the ports, log and "
                                        "peers it started with")
        write_launch(launch)
        return loaded

    def switch(self, active: Active | None, expect_digest: str) -> LoadedProfile:
        """Write the active record (or remove it) and the launch; on a refusal both are put back."""
        before = read_active(self.name)
        write_active(active, self.name)
        try:
            return self.relaunch(expect_digest)
        except BaseException:
            write_active(before, self.name)
            raise

    def restart_and_prove(self, loaded: LoadedProfile, channel: str, budget_s: float, rounds: int,
                          calibration: Path | None, canary_url: str | None = None,
                          drained: Drain | None = None) -> Proof:
        """`canary_url`: where the canary asks (default the serve's API; with a bridge taking the traffic, the
        engine itself). `drained`: the wait for an idle engine already spent before the switch; what is left of
        `drain_s` (at least one look) is waited here, just before the stop."""
        serve = self.serve
        runs = serve.look().runs
        engine = serve.engine_control()  # made ready before the look, so the stop follows it by milliseconds
        last = self.drain(serve, self.drain_s - (drained.seconds if drained else 0.0))
        drain = drained.then(last) if drained else last
        steps = Steps(drain_s=drain.seconds)
        timer = StepClock(steps)
        began = time.monotonic()
        self.report(f"restarting the engine on channel {channel} (budget {budget_s:g} s)")
        with timer.step("restart"):
            engine.stop()
            engine.start()
        with timer.step("ready"):
            ready = wait_ready(serve.look, Expect(channel, loaded.digest, after_runs=runs),
                               max(1.0, budget_s - (time.monotonic() - began)), alive=serve.alive,
                               report=self.report)
        steps.out_of_service_s = time.monotonic() - began
        if not ready.ok:
            return Proof(False, f"not ready: {ready.why}", ready, seconds=time.monotonic() - began, steps=steps,
                         drain=drain.result)
        self.report(f"ready on {channel} after {time.monotonic() - began:.0f} s")
        with timer.step("canary"):
            rows = canary_rounds(canary_url or serve.api_url, loaded, rounds, calibration, self.report) \
                if rounds else []
        bad = next((r for r in rows if not r["healthy"]), None)
        took = time.monotonic() - began
        if bad is not None:
            return Proof(False, f"canary round {bad['round']} failed: " +
                         (bad.get("error") or ", ".join(bad["signatures"]) + "; " + "; ".join(bad["evidence"])),
                         ready, rows, took, steps, drain.result)
        if took > budget_s:
            return Proof(False, f"ready and canary rounds took {took:.0f} s, past the budget of {budget_s:g} s",
                         ready, rows, took, steps, drain.result)
        return Proof(True, f"ready in {ready.seconds:.0f} s and {len(rows)} canary round(s) healthy", ready, rows, took,
                     steps, drain.result)

    def drain(self, serve: RunningServe, bound_s: float) -> Drain:
        """Until the engine runs and queues no request, at most `bound_s` (at least one look while `drain_s` is
        not 0). A bare `supervisorctl restart` stops the engine whenever it is called: a request in flight then is
        aborted, and vLLM 0.31.0's shutdown waits for that request until supervisord's SIGKILL (docs/performance.md,
        P9). Under load that never leaves the engine idle, the bound is waited out and the stop aborts what runs:
        `--beside` is the promote that aborts nothing."""
        if self.drain_s <= 0:
            return Drain("skipped")
        from appliance.health.engine import wait_idle

        engine = serve.launch.placement.engine_url or serve.api_url  # behind a front: the engine's own port
        result, took, sample = wait_idle(engine, max(0.0, bound_s), STOP_POLL_S)
        if result == "busy" and sample.running is None:
            self.report(f"the engine's /metrics gave no vllm:num_requests_running ({sample.error or 'no such series'})"
                        f": whether requests ran is not known after {took:.0f} s; stopping it")
            return Drain("unknown", took)
        if result == "busy":
            running = f"{sample.running:g} running" + (f", {sample.waiting:g} waiting" if sample.waiting else "")
            self.report(f"requests still in the engine after {took:.0f} s ({running}; --drain-s {self.drain_s:g}): "
                        f"the stop aborts them")
        return Drain(result, took)


def calibration_of(qual: Record | None) -> Path | None:
    """The candidate's canary calibration, as its qualification's gate recorded it (its receipt carries it); None
    when there is no qualification, or its receipt is gone or carries none. The receipt is read by the gate's one
    strict reader: a FIFO there, a 400-digit number or 10,000-deep nesting is exit 2 naming it, before anything is
    switched (read loosely, a FIFO hung the promote after the switch)."""
    if qual is None:
        return None
    path = (qual.data.get("receipts") or {}).get("candidate")
    if not path or not os.path.lexists(path):
        return None
    from appliance.gate.receipt import load

    try:
        receipt = load(Path(path))
    except ApplianceError as exc:
        raise ApplianceError(f"the candidate's receipt of qualification {qual.id} cannot be read: {exc.message}",
                             field="record.json receipts.candidate", value=path,
                             fix=f"qualify the candidate again (appliance upgrade qualify), or move {qual.path} "
                                 "aside", reason="the promote's canary compares the switched serve with the "
                                                 "calibration its qualification recorded") from None
    return Path(path) if RECEIPT_KEY in (receipt.model_extra or {}) else None


def _native(req: Request, opts: PromoteOptions, report: Report) -> NativeSwitch:
    return NativeSwitch(req, load_incumbent(req).profile.name, opts.run_dir, report, opts.drain_s)


def promote(req: Request, opts: PromoteOptions, report: Report = print) -> RecordJson:
    entered = time.monotonic()
    from appliance.upgrade.bridge import reset_front

    sw = _native(req, opts, report)
    refuse_stacking(sw.name, read_active(sw.name), opts.run_dir)  # first: the active channel is not the incumbent
    pair = pair_for(req)
    serve = sw.serve
    check_same_serve(pair.incumbent, serve.launch, opts.run_dir)
    reset_front(serve, report)
    require_renderable(pair.candidate, "nothing was switched")
    if pair.incumbent.profile.hardware.nodes > 1:
        from appliance.upgrade.ranks import check_one_lock

        agreement = check_one_lock(serve.look().status, pair.incumbent.profile.hardware.nodes, serve.exporter_url)
        raise ApplianceError(f"U5 {pair.name} is a {pair.incumbent.profile.hardware.nodes}-node serve ({agreement}): "
                             f"without containers no one file is read by every rank", field="--run-dir",
                             value=str(opts.run_dir),
                             fix="promote through --compose-env (the same env file on every node) or --k8s-out "
                                 "(one LeaderWorkerSet for every rank)", reason=RULES["U5"].reason)
    qual = require_qualification(pair, opts.force)
    calibration = calibration_of(qual)
    obtain_engine(pair.to_channel, report)
    previous = read_active(pair.name)
    if previous is not None and not previous.origin.startswith("upgrade:"):
        raise ApplianceError(f"the active channel of {pair.name} comes from {previous.origin}", field=previous.origin,
                             fix="in a container, promote through --compose-env or --k8s-out")
    folder = new_record(pair.name, "promote", pair.to_channel.name)
    budget = opts.budget_s or default_budget(pair.candidate.profile)
    record: RecordJson = {
        "kind": "promote", "profile": pair.name, "started_at": utc_now(), "medium": "native",
        "run_dir": str(opts.run_dir), "from": {"channel": pair.from_channel.name, "profile_digest":
                                                pair.incumbent.digest, "lock_digest": pair.from_channel.digest},
        "to": {"channel": pair.to_channel.name, "profile_digest": pair.candidate.digest,
               "lock_digest": pair.to_channel.digest, "sets": list(pair.sets)},
        "qualification": qual.id if qual else None, "forced": qual is None, "budget_s": budget,
        "receipts": dict((qual.data.get("receipts") or {}) if qual else {}),
    }
    if qual is None:
        report("WARNING promoting without a qualification (--force): U4")
    write_record(folder, record)
    active = Active(pair.name, pair.to_channel.name, list(pair.sets), folder.name, utc_now(),
                    previous.to_json() if previous else None)
    if not opts.beside:
        return _switch_and_prove(sw, pair, opts, record, folder, active, previous, calibration, budget, entered,
                                 report)
    from appliance.upgrade.bridge import open_bridge

    bridge_began = time.monotonic()
    try:
        bridge = open_bridge(req, pair, serve, folder, budget, opts.procfs, report)
    except ApplianceError as exc:
        record.update(outcome="not switched", why=exc.message, finished_at=utc_now())
        write_record(folder, record)
        raise
    beside: JsonObject = {"bridge_run_dir": str(bridge.serve.run_dir), "bridge_cards": bridge.cards,
                          "bridge_s": round(time.monotonic() - bridge_began, 1)}
    record["beside"] = beside
    write_record(folder, record)
    try:
        drained_ok, took = bridge.take_traffic(budget)
        beside |= {"drained": drained_ok, "drain_s": round(took, 1)}
        if not drained_ok:
            report(f"the serve's own engine still ran requests after {took:.0f} s: its restart aborts them")
        # `prepare` stays the checks before the bridge: the bridge's own seconds are in `beside`
        checked = time.monotonic() - (bridge_began - entered)
        return _switch_and_prove(sw, pair, opts, record, folder, active, previous, calibration, budget, checked,
                                 report, canary_url=bridge.own_engine)
    finally:
        back_began = time.monotonic()
        try:
            bridge_drained, _ = bridge.hand_back(budget)
            beside |= {"back_s": round(time.monotonic() - back_began, 1), "bridge_drained": bridge_drained}
        except Exception as exc:  # recorded, never raised over the promote's own outcome
            beside |= {"back_s": round(time.monotonic() - back_began, 1), "back_failed": _said(exc)}
            report(f"routing the front back FAILED ({_said(exc)}): the bridge is stopped; point "
                   f"{opts.run_dir}/front.json at {bridge.own_engine}")
        write_record(folder, record)


def _switch_and_prove(sw: NativeSwitch, pair: Pair, opts: PromoteOptions, record: RecordJson, folder: Path,
                      active: Active, previous: Active | None, calibration: Path | None, budget: float,
                      entered: float, report: Report, canary_url: str | None = None) -> RecordJson:
    """The switch (active.json, launch.json), the restart and its proof; the switch back when the proof fails or
    the promote is interrupted."""
    prepared = time.monotonic()
    # the wait for an idle engine comes before the switch: while it lasts, active.json and launch.json still name
    # the incumbent (the exporter follows launch.json; a crash's restart reads it)
    drained = sw.drain(sw.serve, sw.drain_s)
    began = time.monotonic()
    sw.switch(active, pair.candidate.digest)
    steps = Steps(prepare_s=prepared - entered, switch_s=time.monotonic() - began)
    report(f"switched {pair.name} to channel {pair.to_channel.name} (active.json, launch.json)")
    try:
        proof = sw.restart_and_prove(pair.candidate, pair.to_channel.name, budget, opts.canary_rounds, calibration,
                                     canary_url, drained)
    except Exception as exc:  # after the switch every failure rolls back: the candidate is unproven
        proof = Proof(False, f"the engine restart failed: {_said(exc)}", seconds=time.monotonic() - began,
                      steps=Steps(drain_s=drained.seconds), drain=drained.result)
    except BaseException:  # interrupted: the files go back to the incumbent, the record says whether they did
        try:
            write_record(folder, record | {SWITCHING_BACK: utc_now()})
            sw.switch(previous, pair.incumbent.digest)
            put_back = "active.json and launch.json put back on the incumbent (its engine was not restarted)"
        except Exception as exc:
            put_back = (f"putting active.json and launch.json back FAILED ({_said(exc)}): they still name the "
                        f"candidate; run `appliance upgrade rollback {pair.name} --run-dir {opts.run_dir}`")
        record.update(outcome="interrupted", why=f"interrupted after the switch; {put_back}", finished_at=utc_now())
        write_record(folder, record)
        raise
    record["proof"] = proof.to_json()
    record["steps"] = steps.to_json() | proof.steps.to_json()
    if canary_url is not None and "out_of_service_s" in record["steps"]:  # the bridge served meanwhile
        record["steps"]["engine_down_s"] = record["steps"].pop("out_of_service_s")
    if proof.ok:
        record.update(outcome="promoted", finished_at=utc_now(), seconds=round(time.monotonic() - began, 1))
        write_record(folder, record)
        report(f"PROMOTED {pair.name} to {pair.to_channel.name}: {proof.why}; rollback target "
               f"{pair.from_channel.name}")
        return record | {"record": str(folder)}
    report(f"U4 the promoted serve failed: {proof.why}; rolling back to {pair.from_channel.name}")
    record.update(why=proof.why, **{SWITCHING_BACK: utc_now()})  # killed from here on: rollback finishes the return
    write_record(folder, record)
    back = _switch_back(sw, previous, pair.incumbent, pair.from_channel.name, budget, report)
    record.update(outcome="rolled back", rollback=back.to_json(), finished_at=utc_now(),
                  seconds=round(time.monotonic() - began, 1))
    write_record(folder, record)
    report(f"ROLLED BACK {pair.name} to {pair.from_channel.name}: {proof.why}" +
           ("" if back.ok else f"; AND THE ROLLBACK FAILED: {back.why}"))
    return record | {"record": str(folder)}


def _switch_back(sw: NativeSwitch, previous: Active | None, incumbent: LoadedProfile, channel: str, budget: float,
                 report: Report) -> Proof:
    """The previous active record (or none: the profile's own channel) put back, and the serve restarted on it."""
    try:
        drained = sw.drain(sw.serve, sw.drain_s)  # before the switch, as a promote's
    except ApplianceError:  # no serve in the run folder: the switch back still puts the files back
        drained = None
    try:
        sw.switch(previous, incumbent.digest)
    except Exception as exc:  # an OSError too (a full disk): the caller records it, never a traceback
        return Proof(False, f"could not switch back: {_said(exc)}")
    try:
        return sw.restart_and_prove(incumbent, channel, budget, 0, None, drained=drained)
    except Exception as exc:  # the files are back; the record says the engine did not
        return Proof(False, f"switched back, but the engine restart failed: {_said(exc)}",
                     steps=Steps(drain_s=drained.seconds if drained else None),
                     drain=drained.result if drained else None)


def _said(exc: BaseException) -> str:
    return exc.message if isinstance(exc, ApplianceError) else f"{type(exc).__name__}: {exc}"[:400]


def rollback(req: Request, opts: PromoteOptions, report: Report = print) -> RecordJson:
    """Back to the record the active one replaced (none: the profile's own channel), restarted and waited for."""
    from appliance.upgrade.bridge import reset_front

    sw = _native(req, opts, report)
    with contextlib.suppress(ApplianceError):  # no serve here: said below, where it matters
        reset_front(sw.serve, report)
    name = sw.name
    active = read_active(name)
    back = returning(name, active)  # a return killed part way: finish it rather than step back once more
    if back is not None and load_incumbent(req).digest == returns_to(back):
        return _finish_return(sw, req, opts, back, active, report)
    if active is None or not active.origin.startswith("upgrade:"):
        raise ApplianceError(f"profile {name} has no promoted channel to roll back from" +
                             (f" here (it comes from {active.origin})" if active else ""), field="profile", value=name,
                             fix="`appliance upgrade status` shows the history; in a container, roll back with "
                                 "--compose-env or --k8s-out")
    previous = Active.from_json(active.previous, f"upgrade:{active_path(name)}") if active.previous else None
    if previous is not None:
        vouch(previous)
    stuck = switched_and_unfinished(name, active)  # a killed promote: this rollback is what finishes it
    serve = sw.serve
    current = load_incumbent(req)
    if stuck is None or serve.launch.profile_digest not in either_side(stuck):  # killed between its two writes
        check_same_serve(current, serve.launch, opts.run_dir)
    target = load_previous(req, previous)
    folder = new_record(name, "rollback", target.profile.engine.channel or "profile")
    budget = opts.budget_s or default_budget(target.profile)
    cleared = stuck or back  # a killed promote, or a rollback killed before its first write: this one ends it
    record: RecordJson = {"kind": "rollback", "profile": name, "started_at": utc_now(), "medium": "native",
                          "run_dir": str(opts.run_dir),
                          "from": {"channel": active.channel, "decision": active.decision,
                                   "profile_digest": current.digest},
                          "to": {"channel": target.profile.engine.channel, "profile_digest": target.digest,
                                 "decision": previous.decision if previous else None}}
    if cleared is not None:
        record["cleared"] = cleared.id
    write_record(folder, record)
    began = time.monotonic()
    proof = _switch_back(sw, previous, target, str(target.profile.engine.channel), budget, report)
    record.update(outcome="rolled back" if proof.ok else "rollback failed", proof=proof.to_json(),
                  finished_at=utc_now(), seconds=round(time.monotonic() - began, 1))
    write_record(folder, record)
    close_chain(name, cleared, folder.name, proof.ok)
    report(("ROLLED BACK" if proof.ok else "ROLLBACK FAILED") + f" {name} to {target.profile.engine.channel}: "
           f"{proof.why}")
    return record | {"record": str(folder)}


def _finish_return(sw: NativeSwitch, req: Request, opts: PromoteOptions, back: Record, active: Active | None,
                   report: Report) -> RecordJson:
    """`back` (a promote switching back, or a rollback) was killed after it wrote active.json: launch.json is
    re-resolved from that record, the engine restarted on it, and `back` closed with this rollback's id."""
    if active is not None and active.origin.startswith("upgrade:"):
        vouch(active)  # the serve restarts on it: only what its promote carried
    current = load_incumbent(req)
    serve = sw.serve
    if serve.launch.profile_digest not in either_side(back):  # launch.json of neither side: another serve
        check_same_serve(current, serve.launch, opts.run_dir)
    channel = str(current.profile.engine.channel)
    folder = new_record(sw.name, "rollback", channel)
    budget = opts.budget_s or default_budget(current.profile)
    record: RecordJson = {"kind": "rollback", "profile": sw.name, "started_at": utc_now(), "medium": "native",
                          "run_dir": str(opts.run_dir), "cleared": back.id,
                          "from": {"channel": (serve.launch.profile.get("engine") or {}).get("channel"),
                                   "profile_digest": serve.launch.profile_digest},
                          "to": {"channel": channel, "profile_digest": current.digest,
                                 "decision": active.decision if active else None}}
    write_record(folder, record)
    report(f"finishing the {back.kind} {back.id}: it was stopped while it returned {sw.name} to {channel}")
    began = time.monotonic()
    proof = _switch_back(sw, active, current, channel, budget, report)
    record.update(outcome="rolled back" if proof.ok else "rollback failed", proof=proof.to_json(),
                  finished_at=utc_now(), seconds=round(time.monotonic() - began, 1))
    write_record(folder, record)
    close_chain(sw.name, back, folder.name, proof.ok)
    report(("ROLLED BACK" if proof.ok else "ROLLBACK FAILED") + f" {sw.name} to {channel}: {proof.why}")
    return record | {"record": str(folder)}


def settings_digest(channel: str | None, sets: list[str] | None) -> str:
    """What a promote switched a serve to, as one digest: its channel and its overrides, in order."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps({"channel": channel, "set": list(sets or [])}).encode()).hexdigest()


def vouch(target: Active) -> None:
    """A rollback target applies only what the promote that made it active carried: the channel and overrides
    in active.json's `previous` must match, by digest, the `to` of the record it names, which promoted."""
    from appliance.upgrade.history import records

    where = f"{active_path(target.profile)} (previous)"
    found = next((r for r in records(target.profile) if r.id == target.decision), None)  # never a path from the file
    fix = (f"put back the record `appliance upgrade status {target.profile}` shows, or remove "
           f"{active_path(target.profile)} to serve the profile's own channel")
    why = "a rollback restarts the serve on these overrides: an edited record could carry any of them " \
          "(model.trust_remote_code=true) past every qualification"
    if found is None or found.kind != "promote" or found.data.get("outcome") != "promoted":
        state = "no record of that name" if found is None else \
            f"a {found.kind} record, outcome {found.data.get('outcome')}"
        raise ApplianceError(f"{where}: the rollback target names decision {str(target.decision)[:120]!r}, {state}, "
                             "not a promote that finished", field="active.json previous.decision",
                             value=target.decision, fix=fix, reason=why)
    to = found.data.get("to") or {}
    if settings_digest(target.channel, target.sets) != settings_digest(to.get("channel"), to.get("sets")):
        carried = f"channel {to.get('channel')}, set {to.get('sets') or []}"
        raise ApplianceError(f"{where}: the rollback target (channel {target.channel}, set {target.sets}) is not what "
                             f"its promote {found.id} carried ({carried})",
                             field="active.json previous", value=f"{target.channel} {target.sets}", fix=fix,
                             reason=why)


def load_previous(req: Request, previous: Active | None) -> LoadedProfile:
    """What the profile resolves to with `previous` as its active record (None: the profile's own channel)."""
    from appliance.profile.loader import load_profile

    return load_profile(req.profile, env_overrides=list(req.env_overrides), cli_overrides=list(req.cli_overrides),
                        active=previous if previous is not None else False)
