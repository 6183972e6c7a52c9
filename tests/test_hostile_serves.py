"""Issue 22 item 5: the canary and the gate meet a hostile or broken serve with a clear error, never a traceback or
a hang: non-JSON, empty or wrong-shape replies and events, 100k-deep nesting, duplicate keys, NaN, a 64 MiB body,
an endless stream and a byte-every-0.2-s trickle; a FIFO or /dev/zero as --calibration; a --timeout that is no
duration. The serve is tests/hostile_serve.py on loopback (a double for a misbehaving serve)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile_serve import HostileServer
from tests.in_process import CliRun, run_main, time_limit

BAD = ["not-json", "empty", "wrong-shape", "deep", "huge", "status-500", "trickle", "dup-keys", "nan"]
LIMIT_S = 20.0
"""Wall time one refused run may take: --timeout 1 per request, a handful of requests."""


@pytest.fixture(scope="module")
def serve() -> Iterator[HostileServer]:
    with HostileServer() as server:
        yield server


def appliance(*args: str) -> tuple[CliRun, float]:
    """`appliance ARGS` in-process (tests/in_process.py) with a secret in the environment and a hard time limit."""
    began = time.monotonic()
    run = run_main(args, env={"VLLM_API_KEY": "SxHostileKey1234"}, limit_s=LIMIT_S)
    return run, time.monotonic() - began


def _clean_refusal(r: CliRun, code: int = 2) -> None:
    text = r.stdout + r.stderr
    assert r.returncode == code, text[-2000:]
    assert "Traceback" not in text and "SxHostileKey1234" not in text and len(r.stderr) < 4000, text[-2000:]


@pytest.mark.parametrize("mode", BAD)
def test_canary_refuses_a_model_list_that_is_no_model_list(serve: HostileServer, mode: str) -> None:
    serve.modes = {"/v1/models": mode}
    r, took = appliance("canary", "--url", serve.url, "--timeout", "1")
    _clean_refusal(r)
    assert "did not answer" in r.stderr or "answered HTTP 500" in r.stderr
    assert took < LIMIT_S


REPLY_PATHS = ["/v1/completions", "/v1/chat/completions", "/v1/completions#stream", "/v1/chat/completions#stream"]
# the event-stream modes only for the streamed requests (a plain reply has no events to get wrong)
REPLY_CASES = [(p, m) for p in REPLY_PATHS for m in BAD] + [
    (p, m) for p in REPLY_PATHS if p.endswith("#stream") for m in ("endless", "bad-events")]


@pytest.mark.parametrize(("path", "mode"), REPLY_CASES)
def test_canary_refuses_completions_and_events_that_are_none(serve: HostileServer, path: str, mode: str) -> None:
    serve.modes = {path: mode}
    r, took = appliance("canary", "--url", serve.url, "--timeout", "1", "--json")
    _clean_refusal(r)
    assert "did not answer" in r.stderr and took < LIMIT_S


def test_a_tokenize_endpoint_that_answers_nonsense_only_skips_its_check(serve: HostileServer) -> None:
    from appliance.canary.client import CanaryClient

    for mode in ("wrong-shape", "deep", "nan", "not-json", "trickle"):
        serve.modes = {"/tokenize": mode}
        client = CanaryClient(serve.url, timeout=1.0)

        async def ask(client: CanaryClient = client) -> list[int] | None:
            try:
                return await client.tokenize_chat("m", [{"role": "user", "content": "x"}])
            finally:
                await client.aclose()

        with time_limit(LIMIT_S):
            assert asyncio.run(ask()) is None, mode


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "deep", "dup-keys"])
def test_a_calibration_that_is_no_calibration_file_is_exit_2_without_reading_it_all(
        tmp_path: Path, serve: HostileServer, kind: str) -> None:
    path = tmp_path / "cal.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        path.write_text('{"model": "m", "model": "n"}')
    serve.modes = {}
    r, took = appliance("canary", "--url", serve.url, "--calibration", str(path))
    _clean_refusal(r)
    assert "--calibration" in r.stderr or "calibration file" in r.stderr
    assert took < 10


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e9", "soon"])
def test_a_timeout_that_is_no_duration_names_the_flag(serve: HostileServer, value: str) -> None:
    r, _ = appliance("canary", "--url", serve.url, f"--timeout={value}")
    _clean_refusal(r)
    assert "argument --timeout" in r.stderr


# --- the gate ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["not-json", "empty", "wrong-shape", "deep", "status-500", "dup-keys", "nan"])
def test_gate_refuses_a_serve_whose_model_list_is_broken(serve: HostileServer, tmp_path: Path, mode: str) -> None:
    serve.modes = {"/v1/models": mode}
    r, _ = appliance("gate", "--url", serve.url, "--exporter", serve.url, "--profile", "cpu-smoke", "--checks",
                     "structured", "--out", str(tmp_path / "r"))
    _clean_refusal(r)
    assert "--url" in r.stderr or "no serve answers" in r.stderr or "lists no model" in r.stderr


@pytest.mark.parametrize("mode", ["not-json", "empty", "wrong-shape", "deep", "status-500", "dup-keys", "nan"])
def test_gate_records_a_check_error_for_broken_replies_and_a_broken_exporter(serve: HostileServer, tmp_path: Path,
                                                                            mode: str) -> None:
    serve.modes = {"/v1/chat/completions": mode, "/status": mode, "/version": mode}
    r, _ = appliance("gate", "--url", serve.url, "--exporter", serve.url, "--profile", "cpu-smoke", "--checks",
                     "structured,reasoning", "--out", str(tmp_path / "r"))
    _clean_refusal(r, code=1)  # a check that errored (or got no JSON answer) fails the gate (docs/gate.md)
    assert (tmp_path / "r" / "receipt.json").is_file()
    assert "structured error" in r.stdout or "structured fail" in r.stdout


@pytest.mark.parametrize("mode", ["trickle", "huge", "endless"])
def test_the_gate_clients_end_a_trickling_endless_or_huge_reply_at_their_deadline(serve: HostileServer,
                                                                                  mode: str) -> None:
    from appliance.gate.client import ServeClient, ServeError, get_json

    serve.modes = {"/v1/chat/completions": mode, "/version": mode}
    began = time.monotonic()
    with time_limit(LIMIT_S), pytest.raises(ServeError):
        get_json(f"{serve.url}/version", timeout=1.0)
    assert time.monotonic() - began < 5  # one read timeout past the deadline at most

    async def post() -> None:
        async with ServeClient(serve.url, timeout=1.0) as client:
            await client.post("/v1/chat/completions", {"model": "m", "messages": []})

    began = time.monotonic()
    with time_limit(LIMIT_S), pytest.raises(ServeError, match=r"within 1 s|over"):
        asyncio.run(post())
    assert time.monotonic() - began < 5


def test_a_trickle_slower_than_the_read_timeout_is_the_same_bounded_failure(serve: HostileServer) -> None:
    """A byte every 0.2 s against a 0.1 s read timeout: httpx's ReadTimeout fires before the deadline check, which
    on a loaded machine is what happens at 0.5 s too (the CI failure "ReadTimeout: timed out"); one message."""
    from appliance.health.engine import EngineProbe
    from appliance.health.peers import PeerWatch

    serve.modes = {"/health": "trickle", "/status": "trickle"}
    with time_limit(LIMIT_S):
        sample = EngineProbe(serve.url, timeout=0.1).sample()
    assert not sample.healthy and "no complete reply within 0.1 s" in (sample.error or ""), sample.error
    watch = PeerWatch({1: serve.url}, {"nccl_version": "K15"}, clock=time.monotonic, timeout=0.1)
    try:
        with time_limit(LIMIT_S):
            view = watch.check({}).peers[0]
    finally:
        watch.close()
    assert view.error and "no complete reply within 0.1 s" in view.error, view.error


def test_the_exporters_engine_probe_and_peer_watch_end_a_trickle_at_their_timeout(serve: HostileServer) -> None:
    from appliance.health.engine import EngineProbe
    from appliance.health.peers import PeerWatch

    serve.modes = {"/health": "trickle", "/status": "trickle"}
    began = time.monotonic()
    with time_limit(LIMIT_S):
        sample = EngineProbe(serve.url, timeout=0.5).sample()
    assert not sample.healthy and "within" in (sample.error or "") and time.monotonic() - began < 3
    began = time.monotonic()
    watch = PeerWatch({1: serve.url}, {"nccl_version": "K15"}, clock=time.monotonic, timeout=0.5)
    try:
        with time_limit(LIMIT_S):
            view = watch.check({}).peers[0]
    finally:
        watch.close()
    assert view.error and "within" in view.error and time.monotonic() - began < 3
