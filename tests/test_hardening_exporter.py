"""Issue 11, class 4: the exporter refuses arguments it could not live with, drops slow clients, caps its
threads, logs a client that hung up in one line, never blocks on a FIFO, honours SIGTERM, and /status carries no
secret. The exporter runs for real (a subprocess, or its server in-process); no engine is needed (--no-engine)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.cli import main
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.health.server import HealthServer
from appliance.health.tail import LogTailer
from appliance.profile.loader import load_profile
from tests.conftest import free_port

SECRET = "exporter-test-secret-4711"


@pytest.mark.parametrize("flag,value", [
    ("--port", "0"), ("--port", "65536"), ("--port", "http"), ("--port", "9" * 5000),
    ("--interval", "0"), ("--interval", "-1"), ("--interval", "nan"), ("--interval", "inf"), ("--interval", "1e300"),
    ("--engine-timeout", "nan"), ("--progress-window", "-5"), ("--live-grace", "inf"), ("--peer-interval", "0"),
    ("--engine-url", "ftp://127.0.0.1:8000"), ("--engine-url", "http://"), ("--engine-url", "http://a b:1"),
    ("--engine-url", "http://127.0.0.1:99999"), ("--engine-url", "http://u:p@127.0.0.1"),
    ("--peer", "x"), ("--peer", "0=http://127.0.0.1:8470"), ("--peer", "1=file:///etc/passwd"),
    ("--host", "not a host"), ("--node-rank", "-1"), ("--node-rank", "99"),
])
def test_an_argument_the_exporter_could_not_live_with_exits_2_naming_the_flag(
        capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["exporter", "cpu-smoke", "--no-engine", "--log", "/nonexistent/vllm.log", f"{flag}={value}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {flag}" in err and "Traceback" not in err and len(err) < 2000


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_log_that_is_not_a_regular_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     kind: str) -> None:
    log = tmp_path / "log"
    os.mkfifo(log) if kind == "fifo" else log.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["exporter", "cpu-smoke", "--no-engine", "--log", str(log)])
    assert exc.value.code == 2 and "is not a regular file" in capsys.readouterr().err


def test_the_exporter_port_may_not_be_the_api_port(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["exporter", "cpu-smoke", "--no-engine", "--log", str(tmp_path / "log"), "--port", "8000"]) == 2
    assert "--port=8000: the API port too" in capsys.readouterr().err


def test_a_fifo_in_place_of_the_log_never_blocks_the_tailer(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    os.mkfifo(log)
    done = threading.Event()
    threading.Thread(target=lambda: (list(LogTailer(log).poll()), done.set()), daemon=True).start()
    assert done.wait(5), "polling a FIFO blocked"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HealthServer]:
    """The exporter's real server and poll loop, in-process, with a short connection timeout and a small cap."""
    log = tmp_path / "vllm.log"
    log.write_text("")
    exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", interval=0.1, stale_after=5,
                                             live_grace=60, connection_timeout=0.5, max_connections=8))
    stop = threading.Event()
    thread = threading.Thread(target=exporter.serve, args=(stop,), daemon=True)
    thread.start()
    yield exporter.server
    stop.set()
    thread.join(10)


def _idle_clients(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /live HTTP/1.1\r\n")  # never finishes its headers
        socks.append(s)
    return socks


def test_a_slow_client_is_dropped_after_the_connection_timeout(server: HealthServer) -> None:
    (sock,) = _idle_clients(server.server_address[1], 1)
    began = time.monotonic()
    assert sock.recv(1024) == b""  # the server closed it
    assert time.monotonic() - began < 3
    sock.close()


def test_many_slow_clients_cannot_grow_threads_and_probes_still_answer(server: HealthServer) -> None:
    port = server.server_address[1]
    socks = _idle_clients(port, 100)
    try:
        time.sleep(0.2)
        assert server.open_connections <= 8  # the cap, not one connection (and thread) per client
        # threads of connections evicted at the cap end right after their hang-up: the count settles at the cap
        deadline = time.monotonic() + 2
        while True:
            handlers = [t for t in threading.enumerate() if "process_request_thread" in t.name]
            if len(handlers) <= 8 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(handlers) <= 8
    finally:
        for s in socks:
            s.close()
    time.sleep(0.8)  # the held slots time out
    assert httpx.get(f"http://127.0.0.1:{port}/live", timeout=5).status_code == 200


def test_a_client_that_hung_up_is_logged_in_one_line(server: HealthServer) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            server.handle_error(None, ("127.0.0.1", 40000))
    assert err.getvalue() == "appliance exporter: client 127.0.0.1:40000: ConnectionResetError: " \
                             "[Errno 104] Connection reset by peer\n"


def _start(tmp_path: Path, log: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "appliance", "exporter", "cpu-smoke", "--log", str(log),
                             "--no-engine", "--host", "127.0.0.1", "--port", str(port), "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **env})


def test_sigterm_stops_the_exporter_with_a_fifo_log_and_a_stuck_client(tmp_path: Path) -> None:
    log, port = tmp_path / "vllm.log", free_port()
    proc = _start(tmp_path, log, port)
    try:
        assert proc.stdout is not None and "appliance exporter" in proc.stdout.readline().decode()
        os.mkfifo(log)  # the log turns into a FIFO under the running exporter
        (sock,) = _idle_clients(port, 1)
        time.sleep(0.6)
        assert httpx.get(f"http://127.0.0.1:{port}/live", timeout=5).status_code == 200  # the poll loop is fresh
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_during_start_ends_the_exporter(tmp_path: Path) -> None:
    proc = _start(tmp_path, tmp_path / "vllm.log", free_port())
    time.sleep(0.05)  # still importing / loading the profile
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) in (0, -signal.SIGTERM)


def test_status_carries_no_secret_from_a_fatal_log_line(tmp_path: Path) -> None:
    log, port = tmp_path / "vllm.log", free_port()
    log.write_text(f"ERROR EngineDeadError: client sent Authorization: Bearer {SECRET}; key {SECRET}x\n")
    proc = _start(tmp_path, log, port, VLLM_API_KEY=SECRET)
    try:
        assert proc.stdout is not None and "appliance exporter" in proc.stdout.readline().decode()
        deadline = time.monotonic() + 10
        while not (status := httpx.get(f"http://127.0.0.1:{port}/status", timeout=5).json())["fatal"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        text = httpx.get(f"http://127.0.0.1:{port}/status", timeout=5).text
        assert SECRET not in text and "***" in text and status["state"] == "failed"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
