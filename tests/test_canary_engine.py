"""`appliance canary` against the REAL vLLM CPU engine serving SmolLM2-135M: a healthy serve passes
(and passes its own calibration); corruption injected through a real vLLM extension point (a logits
processor the engine loads, appliance/canary/inject.py) is found and named; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BIN, Serve, http_ok, start_serve, wait_for

pytestmark = pytest.mark.engine

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
