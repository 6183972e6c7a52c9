"""The state machine (starting -> loading -> ready -> degraded -> failed) with an injected clock."""

from __future__ import annotations

from appliance.health.engine import NOT_CHECKED, EngineSample
from appliance.health.expect import Judge
from appliance.health.facts import Extractor
from appliance.health.state import ProgressWatch, StateMachine
from appliance.health.table import load_table
from appliance.profile.loader import load_profile

TABLE = load_table()
JUDGE = Judge(TABLE, load_profile("cpu-smoke").profile, "single", {})
START = "(APIServer pid=1) INFO 11-29 16:40:30 [api_utils.py:286] non-default args: {'port': 8000}\n"
LOADED = ("(EngineCore pid=2) INFO [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens, Maximum concurrency "
          "for 2,048 tokens per request: 22.75x\n")
READY = "INFO:     Application startup complete.\n"
DEAD = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def healthy(running: float = 0, progress: float = 0) -> EngineSample:
    return EngineSample(checked=True, healthy=True, running=running, progress=progress)


DOWN = EngineSample(checked=True, healthy=False, error="/health: ConnectError")


class Serve:
    """A log being written and a state machine judging it."""

    def __init__(self, window: float = 30) -> None:
        self.clock = Clock()
        self.extractor = Extractor(TABLE)
        self.machine = StateMachine(self.clock, progress_window=window)

    def log(self, text: str) -> None:
        self.extractor.feed_text(text)

    def step(self, engine: EngineSample = NOT_CHECKED, dt: float = 2.0):
        self.clock.now += dt
        facts = self.extractor.facts
        return self.machine.update(run=facts.runs, log_started=facts.lines_read > 0,
                                   evaluation=JUDGE.evaluate(facts), engine=engine,
                                   stopping="shutdown_requested" in facts)


def test_a_serve_goes_starting_loading_ready():
    s = Serve()
    assert s.step(DOWN).state == "starting"
    s.log(START)
    assert s.step(DOWN).state == "loading"
    s.log(LOADED)
    assert s.step(DOWN).state == "loading"
    s.log(READY)
    a = s.step(healthy())
    assert a.state == "ready" and not a.reasons


def test_the_log_saying_ready_is_not_enough_while_vllm_health_fails():
    s = Serve()
    s.log(START + LOADED + READY)
    a = s.step(DOWN)
    assert a.state == "degraded"
    assert any("ConnectError" in r for r in a.reasons)


def test_a_ready_serve_whose_engine_stops_answering_degrades_and_recovers():
    s = Serve()
    s.log(START + LOADED + READY)
    assert s.step(healthy()).state == "ready"
    assert s.step(DOWN).state == "degraded"
    assert s.step(healthy()).state == "ready"


def test_requests_running_without_progress_for_the_window_turn_a_live_api_not_ready():
    s = Serve(window=10)
    s.log(START + LOADED + READY)
    assert s.step(healthy(running=0, progress=100)).state == "ready"
    assert s.step(healthy(running=1, progress=120), dt=2).state == "ready"
    assert s.step(healthy(running=1, progress=120), dt=5).state == "ready"  # 5 s idle < window
    wedged = s.step(healthy(running=1, progress=120), dt=6)  # 11 s idle
    assert wedged.state == "degraded" and wedged.stalled
    assert any(r.startswith("K18") for r in wedged.reasons)
    assert s.step(healthy(running=1, progress=121), dt=2).state == "ready"


def test_an_idle_engine_is_not_a_wedged_engine():
    s = Serve(window=10)
    s.log(START + LOADED + READY)
    for _ in range(10):
        assert s.step(healthy(running=0, progress=100), dt=5).state == "ready"


def test_a_fatal_signature_fails_the_serve_at_once_and_a_new_run_starts_over():
    s = Serve()
    s.log(START + LOADED + READY)
    assert s.step(healthy()).state == "ready"
    s.log(DEAD)
    a = s.step(healthy())
    assert a.state == "failed" and a.reasons[0].startswith("K17 fatal engine-dead")
    s.log(START)  # supervisord restarted the engine: a new run in the same log
    b = s.step(DOWN)
    assert b.state == "loading" and not b.ever_ready
    s.log(LOADED + READY)
    assert s.step(healthy()).state == "ready"


def test_a_requested_shutdown_is_not_ready_but_not_failed():
    s = Serve()
    s.log(START + LOADED + READY)
    s.step(healthy())
    s.log("(APIServer pid=1) INFO [launcher.py:254] [shutdown] API server: shutdown triggered\n" + DEAD)
    a = s.step(healthy())
    assert a.state == "degraded"
    assert "the engine is shutting down" in a.reasons


def test_a_blocking_expectation_that_fails_after_ready_keeps_the_serve_not_ready():
    judge = Judge(TABLE, load_profile("cpu-smoke", cli_overrides=["engine.runner=v2"]).profile, "single", {})
    clock = Clock()
    machine = StateMachine(clock)
    extractor = Extractor(TABLE)
    fallback = "Model Runner V2 requires Triton; using the V1 model runner instead.\n"
    extractor.feed_text(START + fallback + LOADED + READY)
    a = machine.update(run=1, log_started=True, evaluation=judge.evaluate(extractor.facts), engine=healthy())
    assert a.state == "degraded"
    assert any(r.startswith("K5 runner-v2") for r in a.reasons)


def test_the_state_remembers_since_when_it_holds():
    s = Serve()
    s.log(START + LOADED + READY)
    first = s.step(healthy(), dt=1)
    later = s.step(healthy(), dt=7)
    assert later.since == first.since == 1001.0


def test_progress_watch_without_metrics_says_nothing():
    watch = ProgressWatch(window=1)
    assert not watch.observe(0, None, None)
    assert not watch.observe(100, 3, None)
