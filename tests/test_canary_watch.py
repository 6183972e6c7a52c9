"""The canary while serving, without an engine: the watch's judgement and ladder (rounds fed in as
results, the ladder's restart recorded instead of run), rung validation by the rules, and how the
exporter shows the state (status, readiness, metrics). The real engine runs in test_canary_engine.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.canary.checks import Finding, RoundResult
from appliance.canary.ladder import RungPlan, last_index, rung, validate_rung
from appliance.canary.traffic import QUIET_LOOK_S, Look, Traffic
from appliance.canary.watch import Ladder, Watch
from appliance.errors import ApplianceError
from appliance.health.canary_metrics import CanaryCollector
from appliance.health.canary_state import CanaryState, read_state, write_state
from appliance.health.context import HealthContext, lock_versions
from appliance.health.engine import EngineSample
from appliance.health.monitor import ExporterIdentity, Monitor
from appliance.health.tail import LogTailer
from appliance.profile.canary import Canary, Rung
from appliance.profile.loader import load_profile

LADDER = [Rung(name="no-prefix-caching", set=["cache.prefix_caching=false"]),
          Rung(name="smaller-batches", set=["limits.max_num_seqs=2"])]
HEALTHY = RoundResult("smollm2", checks=["needle"], seconds=1.0)
IDLE = EngineSample(True, healthy=True, running=0.0, progress=1.0)


def corrupt() -> RoundResult:
    return RoundResult("smollm2", findings=[Finding("repetition-loop", "long-decode:chat", "' had' repeated 190x")],
                       checks=["long-decode"], seconds=1.0)


class Recorder:
    """Stands in for the supervisord restart (no supervisord here); validation is the real rules'."""

    def __init__(self, invalid: set[str] = frozenset()) -> None:
        self.restarts: list[RungPlan] = []
        self.invalid = invalid

    def validate(self, plan: RungPlan) -> dict[str, str]:
        if plan.name in self.invalid:
            raise ApplianceError(f"rung {plan.name} breaks a rule", field="canary.step_down")
        return {s.partition("=")[0]: s.partition("=")[2] for s in plan.sets}

    def restart(self, plan: RungPlan) -> str:
        self.restarts.append(plan)
        return "vllm: updated process group"


def watch(tmp_path: Path, recorder: Recorder, *, confirm_after: int = 2, sample: EngineSample = IDLE,
          log: list[str] | None = None) -> Watch:
    canary = Canary(interval_s=60, confirm_after=confirm_after, step_down=LADDER)
    lines = log if log is not None else []
    return Watch(canary, url="http://127.0.0.1:9", model="smollm2", state_path=tmp_path / "canary.json",
                 ladder=Ladder(recorder.validate, recorder.restart), probe=lambda: sample, calibration=None,
                 log=lines.append)


def test_one_failing_round_is_suspect_and_the_second_confirms_and_steps_down(tmp_path: Path) -> None:
    rec = Recorder()
    w = watch(tmp_path, rec)
    w.judge(HEALTHY)
    w.judge(corrupt())
    assert w.state.status == "suspect" and rec.restarts == []
    w.judge(corrupt())
    assert w.state.status == "rechecking"
    assert [p.name for p in rec.restarts] == ["no-prefix-caching"]
    assert w.state.rung == {"index": 1, "name": "no-prefix-caching", "set": ["cache.prefix_caching=false"]}
    assert w.state.effective == {"cache.prefix_caching": "false"}
    event = w.state.step_downs[-1]
    assert event["from"] == "profile" and event["to"] == "no-prefix-caching" and event["outcome"] == "taken"
    assert event["signatures"] == ["repetition-loop"]
    assert w.state.failures_total == {"repetition-loop": 2}


def test_a_passing_round_on_the_new_rung_recovers(tmp_path: Path) -> None:
    w = watch(tmp_path, Recorder(), confirm_after=1)
    w.judge(corrupt())
    w.judge(HEALTHY)
    assert w.state.status == "ok" and "recovered_unix" in w.state.step_downs[-1]
    assert w.state.readiness() == ([], False)


def test_a_passing_round_after_one_unconfirmed_miss_on_the_new_rung_still_recovers(tmp_path: Path) -> None:
    """Seen on the real CPU serve: the first round after the restart missed a needle (one round, not confirmed), the
    next passed; the step-down must read recovered then. Mutant this kills: recovery recorded only from
    `rechecking`, the state the unconfirmed miss leaves."""
    log: list[str] = []
    w = watch(tmp_path, Recorder(), log=log)
    w.judge(corrupt())
    w.judge(corrupt())
    assert w.state.status == "rechecking"
    w.judge(corrupt())
    assert w.state.status == "suspect" and "recovered_unix" not in w.state.step_downs[-1]
    w.judge(HEALTHY)
    assert w.state.status == "ok" and "recovered_unix" in w.state.step_downs[-1]
    assert "rung no-prefix-caching passes: recovered" in log
    w.judge(HEALTHY)
    assert sum("recovered" in line for line in log) == 1  # recorded once per step-down


def test_the_ladder_never_loops_past_the_last_rung_the_serve_is_failed(tmp_path: Path) -> None:
    rec = Recorder()
    w = watch(tmp_path, rec, confirm_after=1)
    for _ in range(6):
        w.judge(corrupt())
    assert [p.index for p in rec.restarts] == [1, 2]
    assert w.state.status == "failed"
    assert w.state.step_downs[-1]["outcome"] == "past the last rung: serve failed"
    reasons, failed = w.state.readiness()
    assert failed and "past the last step-down rung (smaller-batches)" in reasons[0]
    assert w.step() > 0 and len(rec.restarts) == 2  # failed: no more rounds, no more restarts


def test_rungs_are_cumulative(tmp_path: Path) -> None:
    assert rung(Canary(step_down=LADDER), 2).sets == ["cache.prefix_caching=false", "limits.max_num_seqs=2"]
    assert rung(Canary(step_down=LADDER), 0) == RungPlan(0, "profile", [])


def test_a_rung_the_rules_reject_is_skipped_and_recorded(tmp_path: Path) -> None:
    rec = Recorder(invalid={"no-prefix-caching"})
    w = watch(tmp_path, rec, confirm_after=1)
    w.judge(corrupt())
    assert [p.name for p in rec.restarts] == ["smaller-batches"]
    assert w.state.step_downs[0]["outcome"].startswith("not taken: rung no-prefix-caching breaks a rule")


def test_an_error_round_is_neither_corruption_nor_success(tmp_path: Path) -> None:
    w = watch(tmp_path, Recorder())
    w.judge(corrupt())
    w.judge("Unreachable: connection refused")
    assert w.state.consecutive_failures == 1 and w.state.status == "suspect"
    assert w.state.rounds_total["error"] == 1


def test_a_round_yields_to_real_traffic(tmp_path: Path) -> None:
    busy = EngineSample(True, healthy=True, running=3.0, progress=1.0)
    w = watch(tmp_path, Recorder(), sample=busy)
    w.step()
    w.step()
    state = read_state(tmp_path / "canary.json")
    assert state is not None and state.note == "yielding to traffic (3 requests running)"
    assert state.rounds_total["deferred"] == 1 and state.last_round is None


def test_no_round_while_the_engine_is_down(tmp_path: Path) -> None:
    down = EngineSample(True, healthy=False, error="connection refused")
    w = watch(tmp_path, Recorder(), sample=down)
    w.step()
    assert w.state.note == "waiting for the engine: connection refused" and w.state.last_round is None


def test_the_state_survives_a_restart_of_the_watch(tmp_path: Path) -> None:
    rec = Recorder()
    w = watch(tmp_path, rec, confirm_after=1)
    w.judge(corrupt())
    w.save()
    again = watch(tmp_path, rec)
    again.resume()
    assert again.state.rung["name"] == "no-prefix-caching"
    assert [p.name for p in rec.restarts] == ["no-prefix-caching", "no-prefix-caching"]  # re-applied, idempotent


def test_a_rung_is_validated_by_the_profile_model_and_the_rules() -> None:
    base = load_profile("cpu-smoke-canary")
    ok = validate_rung(base, RungPlan(1, "no-prefix-caching", ["cache.prefix_caching=false"]))
    assert ok == {"cache.prefix_caching": "false"}
    with pytest.raises(ApplianceError, match="max_num_seqs"):
        validate_rung(base, RungPlan(1, "bad", ["limits.max_num_seqs=0"]))


def test_a_rung_outweighed_by_a_command_line_set_is_not_taken() -> None:
    with pytest.raises(ApplianceError, match="pinned by --set on the command line"):
        validate_rung(load_profile("cpu-smoke-canary", cli_overrides=["cache.prefix_caching=true"]),
                      RungPlan(1, "no-prefix-caching", ["cache.prefix_caching=false"]))


def test_a_rung_goes_on_the_profile_the_serve_runs_and_comes_out_the_same_on_an_earlier_rung() -> None:
    """The ladder loads no YAML: the rung's sets go on top of launch.json's profile (here, as loaded). They are
    cumulative assignments, so rung 2 on rung 1's profile is rung 2 on rung 0's, origins and digest alike."""
    from appliance.canary.ladder import load_rung

    base = load_profile("cpu-smoke-canary", env_overrides=["limits.max_num_seqs=3"])
    canary = base.profile.canary
    assert canary is not None and last_index(canary) >= 1
    first = load_rung(base, rung(canary, 1))
    assert first.profile != base.profile and first.profile.limits.max_num_seqs == 3
    assert first.origin("limits.max_num_seqs") == "env:APPLIANCE_SET"
    key = rung(canary, 1).sets[0].partition("=")[0]
    assert first.origin(key) == f"canary:step_down.{rung(canary, 1).name}"
    top = last_index(canary)
    assert load_rung(first, rung(canary, top)).digest == load_rung(base, rung(canary, top)).digest


def test_a_rung_may_only_change_engine_safety_sections() -> None:
    with pytest.raises(ValueError, match=r"server\.port=1"):
        Rung(name="moved", set=["server.port=1"])


def test_every_shipped_ladder_rung_passes_the_rules() -> None:
    from appliance.canary.ladder import last_index
    from appliance.profile.loader import list_profiles

    checked = 0
    for name in list_profiles():
        canary = load_profile(name).profile.canary
        for index in range(1, last_index(canary) + 1 if canary else 1):
            validate_rung(load_profile(name), rung(canary, index))
            checked += 1
    assert checked >= 1


# -- the exporter's view ----------------------------------------------------------------------------------

def _monitor(tmp_path: Path, state_file: Path) -> Monitor:
    serve_log = (Path(__file__).parent / "fixtures" / "logs" / "cpu-smoke-serve.log").read_text()
    log = tmp_path / "vllm.log"
    log.write_text(serve_log[: serve_log.index("Application startup complete.") + 40])
    loaded = load_profile("cpu-smoke")
    ctx = HealthContext.load(loaded)
    identity = ExporterIdentity(profile="cpu-smoke", profile_digest=loaded.digest, lock_digest=ctx.lock_digest,
                        channel=ctx.lock.name, role="single", log=str(log), engine_url=None,
                        lock_versions=lock_versions(ctx.lock))
    return Monitor(judge=ctx.judge("single"), tailer=LogTailer(log), identity=identity, clock=time.monotonic,
                   canary=lambda: read_state(state_file))


@pytest.mark.parametrize(("status", "state"), [("ok", "ready"), ("suspect", "ready"), ("corrupt", "degraded"),
                                               ("rechecking", "degraded"), ("failed", "failed")])
def test_the_exporter_state_follows_the_canary(tmp_path: Path, status: str, state: str) -> None:
    path = tmp_path / "canary.json"
    monitor = _monitor(tmp_path, path)
    write_state(path, CanaryState(status="ok"))
    assert monitor.poll().state == "ready"
    write_state(path, CanaryState(status=status, last_round={"signatures": ["repetition-loop"]}))  # type: ignore[arg-type]
    snap = monitor.poll()
    assert snap.state == state
    body = snap.to_json(monitor.identity, time.monotonic())
    assert body["canary"]["status"] == status
    if state != "ready":
        assert any(r.startswith("canary: ") and ("repetition-loop" in r or "re-checking" in r) for r in snap.reasons)


def test_canary_metrics_follow_prometheus_conventions() -> None:
    state = CanaryState(status="rechecking", consecutive_failures=0, last_success_unix=1_700_000_000.0,
                        failures_total={"repetition-loop": 2, "needle-missing": 2},
                        rung={"index": 1, "name": "no-prefix-caching", "set": ["cache.prefix_caching=false"]},
                        rungs=1, step_downs=[{"outcome": "taken"}])
    state.rounds_total.update(healthy=5, corruption=2)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CanaryCollector(lambda: state))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(generate_latest(registry).decode()) for s in fam.samples}
    assert samples[("appliance_canary_rounds_total", (("result", "healthy"),))] == 5
    assert samples[("appliance_canary_failures_total", (("signature", "repetition-loop"),))] == 2
    assert samples[("appliance_canary_step_downs_total", ())] == 1
    assert samples[("appliance_canary_status", (("status", "rechecking"),))] == 1
    assert samples[("appliance_canary_rung", (("name", "no-prefix-caching"),))] == 1
    assert samples[("appliance_canary_last_success_timestamp_seconds", ())] == 1_700_000_000.0


def test_config_with_the_run_dir_shows_the_rung_the_canary_took_as_the_effective_setting(tmp_path: Path) -> None:
    import json

    from tests.in_process import run_main

    write_state(tmp_path / "canary.json", CanaryState(
        status="ok", rung={"index": 1, "name": "no-prefix-caching", "set": ["cache.prefix_caching=false"]}))
    done = run_main(["config", "cpu-smoke-canary", "--json", "--run-dir", str(tmp_path)])  # tests/in_process.py
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["values"]["cache.prefix_caching"]
    assert row == {"value": False, "origin": "canary:rung 1 no-prefix-caching"}


def samples(*progress_running: tuple[float, float]) -> Callable[[], EngineSample]:
    """The engine's /metrics as successive looks read them: (progress counter, requests running)."""
    seq = iter(progress_running)
    return lambda: (lambda p, r: EngineSample(True, healthy=True, running=r, progress=p))(*next(seq))


def test_a_back_to_back_client_is_seen_between_its_requests_and_a_first_look_is_not_trusted() -> None:
    traffic = Traffic(samples((10, 0), (18, 0), (18, 0), (18, 2)), busy_requests=0)
    first = traffic.look()
    assert first.busy is None and not first.compared  # nothing to compare with yet
    assert traffic.look().busy == "requests served since the last look"  # 0 running, yet the counters moved
    assert traffic.look() == Look(EngineSample(True, healthy=True, running=0, progress=18), None, True)
    assert traffic.look().busy == "2 requests running"


def test_with_busy_requests_set_only_running_requests_above_it_count() -> None:
    traffic = Traffic(samples((10, 0), (30, 2), (40, 3)), busy_requests=2)
    traffic.look()
    assert traffic.look().busy is None
    assert traffic.look().busy == "3 requests running"


def test_the_canary_forgets_its_own_requests() -> None:
    traffic = Traffic(samples((10, 0), (50, 0)), busy_requests=0)
    traffic.look()
    traffic.forget()  # its own round moved the counters from 10 to 50
    assert traffic.look().busy is None


def test_a_round_comes_only_after_a_second_quiet_look(tmp_path: Path) -> None:
    w = watch(tmp_path, Recorder())
    assert w.step() == QUIET_LOOK_S and w.state.last_round is None  # one look: not yet known to be quiet
    w.step()  # quiet twice: the round runs (no engine at this URL: an error round, not corruption)
    assert w.state.rounds_total["error"] == 1 and w.state.rounds_total["deferred"] == 0


def test_past_max_defer_a_round_runs_under_traffic_without_pausing(tmp_path: Path) -> None:
    busy = EngineSample(True, healthy=True, running=3.0, progress=1.0)
    now = [1000.0]
    rounds: list[bool] = []  # each round's `forced`

    class Recording(Watch):
        def round(self, *, forced: bool = False) -> RoundResult | str:
            rounds.append(forced)
            return super().round(forced=forced)

    w = Recording(Canary(interval_s=60, max_defer_s=120), url="http://127.0.0.1:9", model="smollm2",
              state_path=tmp_path / "canary.json", ladder=Ladder(Recorder().validate, Recorder().restart),
              probe=lambda: busy, calibration=None, log=[].append, clock=lambda: now[0])
    w.step()
    now[0] += 119
    w.step()
    assert rounds == [] and w.state.rounds_total["deferred"] == 1
    now[0] += 2
    w.step()
    assert rounds == [True] and w.state.rounds_total["error"] == 1


def test_a_step_down_ladder_on_a_multi_node_profile_is_refused_the_canary_alone_is_not() -> None:
    from appliance.rules import context_for, evaluate

    ladder = "canary.step_down=[{name: no-prefix-caching, set: ['cache.prefix_caching=false']}]"
    two_nodes = load_profile("cpu-smoke-2node", cli_overrides=[ladder]).profile
    q1 = [f for f in evaluate(context_for(two_nodes)) if f.rule == "Q1"]
    assert [(f.severity, f.path, f.value) for f in q1] == [("error", "canary.step_down", ["no-prefix-caching"])]
    assert "drop canary.step_down" in q1[0].fix
    watch_only = load_profile("cpu-smoke-2node", cli_overrides=["canary.interval_s=60"]).profile
    assert watch_only.canary is not None
    assert not [f for f in evaluate(context_for(watch_only)) if f.rule == "Q1"]
    one_node = load_profile("cpu-smoke", cli_overrides=[ladder]).profile
    assert not [f for f in evaluate(context_for(one_node)) if f.rule == "Q1"]
