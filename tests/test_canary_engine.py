"""`appliance canary` against the REAL vLLM CPU engine serving SmolLM2-135M: a healthy serve passes
(and passes its own calibration); corruption injected through a real vLLM extension point (a logits
processor the engine loads, appliance/canary/inject.py) is found and named; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.canary.checks import RoundResult
from appliance.canary.ladder import RungPlan
from appliance.canary.traffic import QUIET_LOOK_S
from appliance.canary.watch import Ladder, Watch
from appliance.health.engine import EngineProbe
from appliance.profile.canary import Canary
from tests.conftest import BIN, Serve, UntilStopped, http_ok, start_serve, wait_for

INJECTOR = "engine.logits_processors=[appliance.canary.inject:RepeatLastToken]"


@pytest.fixture(scope="module")
def flagged_serve(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Path]]:
    """cpu-smoke with the corruption injector loaded and switched off (its flag file absent)."""
    base = tmp_path_factory.mktemp("canary")
    flag = base / "corrupt.flag"
    serve = start_serve(base / "run", smoke_model_dir, INJECTOR, env={"APPLIANCE_CANARY_INJECT_FLAG": str(flag)})
    if not wait_for(lambda: http_ok(f"{serve.url}/health"), timeout=600, interval=2):  # a loaded 2-core box
        serve.stop()
        pytest.fail(f"appliance run did not become healthy:\n{serve.output.read_text()[-4000:]}")
    yield serve, flag
    serve.stop()


def canary(*args: str) -> tuple[int, dict | None, str]:
    done = subprocess.run([str(BIN / "appliance"), "canary", *args], capture_output=True, text=True, timeout=600,
                          check=False)
    body = json.loads(done.stdout) if "--json" in args and done.stdout.strip().startswith("{") else None
    return done.returncode, body, done.stdout + done.stderr


def test_a_healthy_serve_passes_and_the_calibrated_checks_are_named_as_skipped(flagged_serve) -> None:
    serve, _ = flagged_serve
    code, body, out = canary("--url", serve.url, "--json")
    assert code == 0, out
    assert body["verdict"] == "healthy" and body["findings"] == []
    assert {"needle", "endpoint-consistency", "long-decode", "shared-prefix"} <= set(body["checks"])
    assert set(body["skipped"]) == {"known-answers", "golden"}
    assert "no calibration" in body["skipped"]["golden"]


def test_with_a_reasoning_effort_chat_probes_carry_it_and_endpoint_consistency_is_skipped(flagged_serve) -> None:
    serve, _ = flagged_serve
    code, body, out = canary("--url", serve.url, "--reasoning-effort", "none", "--json")
    assert code == 0, out  # vLLM takes `none` (and tells the chat template enable_thinking=false)
    assert "reasoning_effort=none" in body["skipped"]["endpoint-consistency"]
    code, _, out = canary("--url", serve.url, "--reasoning-effort", "none; rm", "--json")
    assert code == 2 and "--reasoning-effort" in out and "Traceback" not in out


def test_the_tiny_model_passes_its_own_calibration(flagged_serve, tmp_path: Path) -> None:
    serve, _ = flagged_serve
    cal = tmp_path / "smollm2.json"
    code, _, out = canary("--url", serve.url, "--record-calibration", str(cal))
    assert code == 0, out
    recorded = json.loads(cal.read_text())
    assert recorded["model"] == "smollm2" and recorded["known_answers_right"] and recorded["greedy"]
    code, body, out = canary("--url", serve.url, "--calibration", str(cal), "--json")
    assert code == 0, out
    assert {"known-answers", "golden"} <= set(body["checks"]) and body["skipped"] == {}


def test_injected_degenerate_tokens_are_found_and_named(flagged_serve) -> None:
    serve, flag = flagged_serve
    flag.write_text("")
    try:
        code, body, out = canary("--url", serve.url, "--model", "smollm2", "--json")
    finally:
        flag.unlink()
    assert code == 1, out
    assert body["verdict"] == "corruption"
    assert {"repetition-loop", "needle-missing"} <= set(body["signatures"])
    assert all(f["signature"] and f["check"] and f["evidence"] for f in body["findings"])
    loop = next(f for f in body["findings"] if f["signature"] == "repetition-loop")
    assert "repeated" in loop["evidence"]


def test_bad_input_and_an_unreachable_serve_exit_2(flagged_serve, tmp_path: Path) -> None:
    serve, _ = flagged_serve
    code, _, out = canary("--url", serve.url, "--model", "no-such-model")
    assert code == 2 and "use one of: smollm2" in out
    code, _, out = canary("--url", "http://127.0.0.1:9")
    assert code == 2 and "did not answer" in out and "Traceback" not in out
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": 1, "model": "another-model", "recorded_at": "x",
                                 "known_answers_right": [], "greedy": {}}))
    code, _, out = canary("--url", serve.url, "--calibration", str(other))
    assert code == 2 and "recorded for 'another-model'" in out
    code, _, out = canary("--url", "127.0.0.1:8000")
    assert code == 2 and "not an http(s) URL" in out


class BackToBack(UntilStopped):
    """A real client sending short completions one after another (gaps of milliseconds), until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(self._one)
        self.client, self.sent = httpx.Client(base_url=url, timeout=60, trust_env=False), 0

    def _one(self) -> None:
        self.client.post("/v1/completions", json={"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 8,
                                                  "temperature": 0})
        self.sent += 1

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.client.close()


def test_the_watch_yields_to_a_back_to_back_client_and_a_round_pauses_between_its_steps(flagged_serve,
                                                                                         tmp_path: Path) -> None:
    serve, _ = flagged_serve
    pauses: list[float] = []

    class Watching(Watch):
        async def pause_for_traffic(self, began: float) -> float:
            if not pauses:  # the client leaves a few seconds into the first pause
                threading.Timer(4.0, client.stopped.set).start()
            waited = await super().pause_for_traffic(began)
            pauses.append(waited)
            return waited

    def refuse(plan: RungPlan) -> str:
        raise AssertionError(f"no step-down expected on a healthy serve ({plan.name})")

    engine = EngineProbe(serve.url)
    log: list[str] = []
    watch = Watching(Canary(interval_s=60, max_defer_s=600), url=serve.url, model="smollm2",
                     state_path=tmp_path / "canary.json", ladder=Ladder(refuse, refuse), probe=engine.sample,
                     calibration=None, log=log.append)
    try:
        with BackToBack(serve.url) as client:
            assert wait_for(lambda: client.sent >= 3, timeout=120, interval=0.2)
            for _ in range(4):  # looks, never a round, while the client runs
                time.sleep(min(watch.step(), QUIET_LOOK_S))
            assert watch.state.note.startswith("yielding to traffic"), watch.state.note
            assert watch.state.rounds_total["deferred"] == 1 and watch.state.last_round is None
            # A round already under way when traffic comes: its first step overlaps, then it waits between steps.
            result = watch.round()
        assert isinstance(result, RoundResult) and result.healthy, result
        assert pauses[0] >= QUIET_LOOK_S, pauses  # the first pause waited for the client to leave
        # One pause before each later step, and one before a disagreeing pair is asked again (checks.py).
        assert result.paused_s == sum(pauses) and len(pauses) == 3 + len(result.retried), (pauses, result.to_json())
        time.sleep(QUIET_LOOK_S)
        for _ in range(4):  # traffic gone: the next due round runs
            time.sleep(min(watch.step(), QUIET_LOOK_S))
            if watch.state.last_round:
                break
        assert watch.state.rounds_total["healthy"] == 1, (watch.state.note, log)
    finally:
        engine.close()
