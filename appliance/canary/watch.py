"""Canary rounds while serving: a supervisord program next to the engine and the exporter.

Every `interval_s` (sooner while a failure awaits confirmation) it runs one round against the
engine, unless the engine is down (nothing to judge) or busy with real traffic (traffic.py): then it
yields, for at most `max_defer_s`, and a round under way pauses between its steps while traffic
runs. `confirm_after` consecutive failing rounds confirm corruption: the state turns `corrupt` and
the ladder takes the next valid rung (appliance/canary/ladder.py), then `rechecking` until a round
passes on it. Past the last rung: `failed`, and no more rounds. The state file
(appliance/health/canary_state.py) is what the exporter shows; it also lets this program resume after
a restart, re-applying the rung it had reached.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.canary.calibration import Calibration
from appliance.canary.checks import RoundPlan, RoundResult, run_round
from appliance.canary.client import CanaryClient, Unreachable
from appliance.canary.golden import load_golden
from appliance.canary.ladder import RungPlan, last_index, rung
from appliance.canary.session import pick_model, plan_for
from appliance.canary.traffic import QUIET_LOOK_S, Traffic
from appliance.errors import ApplianceError
from appliance.health.canary_state import STATE_FILE, CanaryState, StepDown, read_state, write_state
from appliance.health.engine import EngineProbe, EngineSample
from appliance.profile.canary import Canary
from appliance.redact import clip, redact

CONFIRM_DELAY_S = 5.0
"""A failing round is re-run this soon (not a whole interval later): detection within two rounds."""
POLL_S = 5.0


@dataclass
class Ladder:
    """How to take a rung: validate it, then restart the engine with it (ladder.py; a fake in unit tests)."""

    validate: Callable[[RungPlan], dict[str, str]]
    restart: Callable[[RungPlan], str]


class Watch:
    def __init__(self, canary: Canary, *, url: str, model: str | None, state_path: Path, ladder: Ladder,
                 plan: RoundPlan | None = None,
                 probe: Callable[[], EngineSample], calibration: Calibration | None,
                 log: Callable[[str], None], clock: Callable[[], float] = time.time) -> None:
        self.canary, self.url, self.model, self.path = canary, url, model, state_path
        self.ladder, self.probe, self.calibration, self.log, self.clock = ladder, probe, calibration, log, clock
        self.plan = plan or plan_for(canary, None)
        self.state = read_state(state_path) or CanaryState()
        self.state.interval_s, self.state.confirm_after = canary.interval_s, canary.confirm_after
        self.state.calibration = canary.calibration
        self.state.rungs = last_index(canary)
        self.next_round = 0.0
        self.busy_since: float | None = None
        self.traffic = Traffic(probe, canary.busy_requests)

    def save(self) -> None:
        write_state(self.path, self.state)

    # -- one step of the loop -------------------------------------------------------------------------------
    def step(self) -> float:
        """Do what is due now; seconds until the next step."""
        now = self.clock()
        if self.state.status == "failed":
            return POLL_S * 12
        if now < self.next_round:
            return min(POLL_S, self.next_round - now)
        look = self.traffic.look()
        if not look.sample.healthy:
            note = f"waiting for the engine: {look.sample.error or 'not healthy'}"
            if note != self.state.note:  # the state file changes only when what it says does
                self.state.note = note
                self.save()
            return POLL_S
        if not look.busy and not look.compared:
            return QUIET_LOOK_S  # a second look tells a quiet engine from a client between two requests
        forced = False
        if look.busy:
            self.busy_since = self.busy_since or now
            if now - self.busy_since < self.canary.max_defer_s:
                if not self.state.note.startswith("yielding to traffic"):
                    self.state.rounds_total["deferred"] += 1
                    self.state.note = f"yielding to traffic ({look.busy})"
                    self.save()
                return POLL_S
            forced = True  # corruption that shows only under load must still be seen
        self.busy_since = None
        self.state.note = ""
        result = self.round(forced=forced)
        self.traffic.forget()
        self.judge(result)
        self.save()
        delay = CONFIRM_DELAY_S if self.state.status == "suspect" else self.canary.interval_s
        self.next_round = self.clock() + delay
        return min(POLL_S, delay)

    async def pause_for_traffic(self, began: float) -> float:
        """Between a round's steps: wait while real traffic runs, until half the round's budget is spent;
        seconds waited."""
        waited = 0.0
        self.traffic.forget()  # the step just done moved the counters
        while self.clock() - began < self.canary.budget_s / 2:
            look = await asyncio.to_thread(self.traffic.look)
            if not look.busy and look.compared:
                break
            await asyncio.sleep(QUIET_LOOK_S)
            waited += QUIET_LOOK_S if look.busy else 0.0  # a first look (nothing to compare yet) is no pause
        self.traffic.forget()
        return waited

    def round(self, *, forced: bool = False) -> RoundResult | str:
        """One round. Unless `forced` (deferred for max_defer_s already), it pauses between its steps while real
        traffic runs: only the step in flight when traffic arrives overlaps it."""
        began = self.clock()

        async def go() -> RoundResult:
            client = CanaryClient(self.url, timeout=self.canary.budget_s)
            try:
                model = await pick_model(client, self.model)
                return await asyncio.wait_for(
                    run_round(client, model, load_golden(), self.plan, self.calibration, rng=random.Random(),
                              pause=None if forced else lambda: self.pause_for_traffic(began)),
                    self.canary.budget_s)
            finally:
                await client.aclose()

        try:
            return asyncio.run(go())
        except (Unreachable, ApplianceError) as exc:
            return f"{type(exc).__name__}: {exc}"
        except TimeoutError:
            return f"the round took longer than budget_s={self.canary.budget_s:g}"

    def judge(self, result: RoundResult | str) -> None:
        s = self.state
        now = self.clock()
        if isinstance(result, str):
            s.rounds_total["error"] += 1
            s.last_round = {"verdict": "error", "error": result}
            self.log(f"round error (not counted as corruption): {result}")
            return
        s.last_round, s.last_round_unix = result.to_json(), now
        if result.healthy:
            s.rounds_total["healthy"] += 1
            s.last_success_unix = now
            last = s.step_downs[-1] if s.step_downs else None
            # The rung's first passing round is its recovery, also after one failing round on it (a suspect one
            # that did not confirm): the event must not stay open because the first round after a restart missed.
            if last and last.get("outcome") == "taken" and "recovered_unix" not in last:
                last["recovered_unix"] = now
                self.log(f"rung {s.rung['name']} passes: recovered")
            s.consecutive_failures, s.status = 0, "ok"
            self.log(f"round healthy ({len(result.checks)} checks, {result.seconds:.1f} s)")
            return
        s.rounds_total["corruption"] += 1
        s.consecutive_failures += 1
        for sig in result.signatures:
            s.failures_total[sig] = s.failures_total.get(sig, 0) + 1
        self.log(f"round FAILED {s.consecutive_failures}/{self.canary.confirm_after}: " +
                 "; ".join(f.render() for f in result.findings[:5]))
        if s.consecutive_failures < self.canary.confirm_after:
            s.status = "suspect"
            return
        s.status = "corrupt"
        self.save()  # /status shows `corrupt` while the ladder works
        self.step_down(result)

    def step_down(self, result: RoundResult) -> None:
        s = self.state
        index = int(s.rung["index"]) + 1
        while index <= last_index(self.canary):
            plan = rung(self.canary, index)
            event: StepDown = {"at_unix": self.clock(), "from": s.rung["name"], "to": plan.name, "set": plan.sets,
                               "signatures": result.signatures, "evidence": result.findings[0].render()}
            try:
                effective = self.ladder.validate(plan)
                event["supervisorctl"] = self.ladder.restart(plan)
            except ApplianceError as exc:
                event["outcome"] = f"not taken: {exc.message}"
                s.step_downs.append(event)
                self.log(f"step-down to rung {plan.name} NOT taken: {exc.message}")
                index += 1
                continue
            event["outcome"] = "taken"
            s.step_downs.append(event)
            s.rung, s.effective = plan.to_json(), effective
            s.status, s.consecutive_failures = "rechecking", 0
            self.log(f"corruption confirmed ({', '.join(result.signatures)}): stepped down to rung {index} "
                     f"{plan.name} ({'; '.join(plan.sets)}); engine restarting")
            return
        s.status = "failed"
        s.step_downs.append({"at_unix": self.clock(), "from": s.rung["name"], "to": None,
                             "signatures": result.signatures, "outcome": "past the last rung: serve failed"})
        self.log(f"corruption confirmed ({', '.join(result.signatures)}) on the last rung {s.rung['name']}: "
                 "the serve is failed")

    def resume(self) -> None:
        """After a restart of this program or the serve: put the engine back on the rung the state names."""
        index = int(self.state.rung.get("index", 0))
        if index == 0 or index > last_index(self.canary):
            return
        plan = rung(self.canary, index)
        try:
            self.ladder.validate(plan)
            self.ladder.restart(plan)
            self.log(f"resumed on rung {index} {plan.name}")
        except ApplianceError as exc:
            self.log(f"could not resume on rung {plan.name}: {exc.message}")

    def run(self, stop: threading.Event) -> None:
        self.resume()
        self.save()
        while not stop.is_set():
            stop.wait(self.step())


def main(argv: list[str] | None = None) -> int:
    from appliance.canary.calibration import load_calibration
    from appliance.canary.ladder import restart_with, validate_rung
    from appliance.run.launch import LAUNCH_FILE
    from appliance.run.launch_profile import read_serve

    parser = argparse.ArgumentParser(prog="python -m appliance.canary.watch", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True,
                        help="the serve's run folder: its launch.json names the profile, its origins and the engine")
    args = parser.parse_args(argv)
    launch_path = args.run_dir / LAUNCH_FILE

    def log(line: str) -> None:  # lines quote the serve (errors, evidence): through the one redaction
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} appliance canary: {clip(line, 4000)}", flush=True)

    try:
        serve = read_serve(launch_path)
        loaded, url = serve.loaded, serve.place.engine_url
        canary = loaded.profile.canary
        if canary is None or not canary.enabled:
            log("no enabled canary section in the profile; nothing to do")
            return 0
        if url is None:
            raise ApplianceError(f"{launch_path}: this node serves no API (no engine URL): there is nothing to watch",
                                 field="--run-dir", value=str(args.run_dir),
                                 fix="run the canary on the head or single node")
        calibration = None
        if canary.calibration:
            calibration = load_calibration(loaded.source.parent / canary.calibration)  # an absolute path stays itself
    except ApplianceError as exc:
        print(f"appliance canary: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    # Each rung goes on top of the profile the serve runs when it is taken (launch.json as it is then: a promote may
    # have switched the channel since this watch started).
    ladder = Ladder(
        validate=lambda plan: validate_rung(read_serve(launch_path).loaded, plan),
        restart=lambda plan: restart_with(plan, base=read_serve(launch_path).loaded, run_dir=args.run_dir,
                                          report=log))
    engine = EngineProbe(url, timeout=3.0)
    watch = Watch(canary, url=url, model=loaded.profile.server.served_model_name,
                  state_path=args.run_dir / STATE_FILE, ladder=ladder, probe=engine.sample,
                  plan=plan_for(canary, loaded.profile.server.reasoning_parser),
                  calibration=calibration, log=log)
    stop = threading.Event()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log(f"watching {url} every {canary.interval_s:g} s; confirm after {canary.confirm_after}; "
        f"ladder: {', '.join(r.name for r in canary.step_down) or '(none)'}; "
        f"calibration: {canary.calibration or 'none (model-agnostic checks)'}")
    try:
        watch.run(stop)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
