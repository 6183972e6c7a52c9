"""healthchecks/probe: exit 0 for yes, non-zero for no (curl's own status: the probe execs it; 1 from bare Python
without curl), from the exporter's answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.profile.loader import load_profile
from tests.conftest import wait_for_first_poll

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "healthchecks" / "probe"
LOGS = Path(__file__).parent / "fixtures" / "logs"


def start_exporter(log: Path) -> tuple[str, threading.Event]:
    wired = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", interval=0.1, stale_after=5,
                                          live_grace=60))
    server = wired.server
    stop = threading.Event()
    threading.Thread(target=wired.serve, args=(stop,), daemon=True).start()
    wait_for_first_poll(wired.monitor)  # the tests probe the judged state
    assert wired.monitor.snapshot.state != "starting"
    return f"http://127.0.0.1:{server.server_address[1]}", stop


@pytest.fixture
def exporters(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url of a ready serve's exporter, url of one still loading)."""
    text = (LOGS / "cpu-smoke-serve.log").read_text()
    ready_log, loading_log = tmp_path / "ready.log", tmp_path / "loading.log"
    ready_log.write_text(text[: text.index("Application startup complete.") + 40])
    loading_log.write_text(text[:2000])
    (ready, stop_a), (loading, stop_b) = start_exporter(ready_log), start_exporter(loading_log)
    yield ready, loading
    stop_a.set()
    stop_b.set()


def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROBE), *args], capture_output=True, text=True, timeout=20, check=False,
                          env=env or dict(os.environ))


def test_ready_live_and_startup_exit_zero_for_a_ready_serve(exporters):
    ready, _ = exporters
    for what in ("ready", "live", "startup"):
        assert probe(what, ready).returncode == 0, what


# curl's exit statuses, which the probe passes on (it execs curl): `man curl`, EXIT CODES
CURL_HTTP_ERROR, CURL_COULD_NOT_CONNECT, CURL_TIMED_OUT = 22, 7, 28


def test_ready_fails_and_prints_why_while_the_serve_loads(exporters):
    _, loading = exporters
    result = probe("ready", loading)
    assert result.returncode == CURL_HTTP_ERROR  # the exporter answered 503, --fail-with-body
    assert '"state": "loading"' in result.stdout
    assert probe("startup", loading).returncode == CURL_HTTP_ERROR
    assert probe("live", loading).returncode == 0


def test_no_exporter_listening_is_a_failed_probe(exporters):
    assert probe("ready", "http://127.0.0.1:9").returncode == CURL_COULD_NOT_CONNECT


def test_a_silent_listener_is_a_failed_probe_at_the_timeout():
    import socket

    with socket.socket() as silent:  # accepts into its backlog, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        result = probe("ready", url, env={**os.environ, "APPLIANCE_PROBE_TIMEOUT": "1"})
    assert result.returncode == CURL_TIMED_OUT and time.monotonic() - began < 10, result


def test_a_users_curlrc_does_not_change_the_probe(exporters, tmp_path):
    """`-q`: with a ~/.curlrc that sends curl's output elsewhere, the probe still prints the exporter's answer."""
    _, loading = exporters
    (tmp_path / ".curlrc").write_text('output = "/dev/null"\n')
    result = probe("ready", loading, env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == CURL_HTTP_ERROR and '"state": "loading"' in result.stdout, result
    plain = subprocess.run(["curl", "-sS", f"{loading}/ready"], capture_output=True, text=True, timeout=20,
                           env={**os.environ, "HOME": str(tmp_path)}, check=False)
    assert '"state"' not in plain.stdout  # the curlrc is real: a curl without -q obeys it


def test_the_base_url_comes_from_the_environment(exporters):
    ready, _ = exporters
    assert probe("ready", env={**os.environ, "APPLIANCE_HEALTH_URL": ready}).returncode == 0
    port = ready.rsplit(":", 1)[1]
    assert probe("live", env={**os.environ, "APPLIANCE_HEALTH_PORT": port}).returncode == 0


def test_an_unknown_probe_kind_is_a_failure_with_usage():
    result = probe("healthy")
    assert result.returncode == 1 and "usage" in result.stderr


def test_without_curl_the_probe_falls_back_to_isolated_standard_library_python(exporters, tmp_path):
    ready, loading = exporters
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))  # a real interpreter, not a shim
    env = {"PATH": str(bin_dir)}
    assert probe("ready", ready, env=env).returncode == 0
    slow = probe("ready", loading, env=env)
    assert slow.returncode == 1 and '"state": "loading"' in slow.stdout


def test_the_probe_never_imports_the_appliance_or_pydantic():
    text = PROBE.read_text()
    assert text.startswith("#!/bin/sh")
    assert not re.search(r"import\s+(appliance|pydantic)|from\s+(appliance|pydantic)|-m\s+appliance", text)
    assert "python3 -I -S" in text  # isolated, no site-packages: pydantic cannot even be found
