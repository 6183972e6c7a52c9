"""The shared serve's guard (tests/shared_serve.py, the autouse fixture in tests/conftest.py) on a small suite: a test
that kills a program of the shared serve, rewrites its launch.json or leaves its exporter failed fails loudly, and so
does every later test that would read it, naming the first; a test that only reads, or a moment's change of the
exporter's state, passes. The serve here is a real supervisord whose program is `sleep` and whose exporter answers
from this process: the guard reads processes, files and /status, which these are, without the engine."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import shared_serve
from tests.conftest import BIN, Serve, free_port, stop_supervisord
from tests.shared_serve import SharedServe, _children

pytest_plugins = ["pytester"]

STATUS: dict[str, Any] = {}
"""What the fake exporter's /status answers (the inner suite's tests change it)."""
STOPPED: list[int] = []
"""The supervisord pids of the fake serves stopped so far."""


class _Exporter(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(STATUS).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def fake_shared_serve(base: Path) -> Iterator[SharedServe]:
    """A supervisord running `sleep` as its program, launch.json and supervisord.conf beside it, and an exporter."""
    run = base / "run"
    run.mkdir(parents=True)
    (run / "launch.json").write_text('{"programs": {"vllm": {"argv": ["sleep", "1000"]}}}\n')
    conf = run / "supervisord.conf"
    conf.write_text(f"[supervisord]\nnodaemon=true\nlogfile={run}/supervisord.log\npidfile={run}/supervisord.pid\n\n"
                    "[program:vllm]\ncommand=sleep 1000\nautorestart=true\nstartsecs=0\n")
    STATUS.clear()
    STATUS.update({"state": "ready", "log": {"runs": 1}, "profile": {"digest": "d1"}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = subprocess.Popen([str(BIN / "supervisord"), "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    serve = Serve(proc, run, 0, server.server_address[1], [], {}, run / "out")
    try:
        deadline = time.monotonic() + 30
        while not _children(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "supervisord never started its program"
            time.sleep(0.05)
        shared = SharedServe(serve, [])
        shared.check("when it turned ready")
        yield shared
    finally:
        stop_supervisord(proc, 30)
        server.shutdown()
        STOPPED.append(proc.pid)


INNER_CONFTEST = """
import pytest
from tests.conftest import _shared_serve_untouched  # noqa: F401 (the guard)
from tests.test_shared_serve import fake_shared_serve

@pytest.fixture(scope="module")  # a fresh serve for each module of this suite, each shared as a session's is
def shared_serve(tmp_path_factory):
    yield from fake_shared_serve(tmp_path_factory.mktemp("fake"))

@pytest.fixture(scope="module")
def through_a_module_fixture(shared_serve):
    return shared_serve.serve
"""

MUTATIONS = {
    "kill": """
    pid = next(iter(_children(shared_serve.serve.proc.pid)))
    os.kill(pid, signal.SIGKILL)  # supervisord starts it again: another pid
    deadline = time.monotonic() + 20
    while set(_children(shared_serve.serve.proc.pid)) in (set(), {pid}):
        assert time.monotonic() < deadline
        time.sleep(0.05)
""",
    "launch": """
    (shared_serve.serve.run_dir / "launch.json").write_text('{"programs": {}}')
""",
    "failed": """
    STATUS["state"] = "failed"
""",
    "blink": """
    STATUS["state"] = "degraded"  # for a moment: a probe that outran its timeout under load
    threading.Timer(1.0, STATUS.__setitem__, ("state", "ready")).start()
""",
}
NAMED = {"kill": "'programs'", "launch": "'launch.json'", "failed": "'state': ('ready', 'failed')"}
"""What the failure names as changed, per mutation (blink changes nothing)."""


def test_a_test_that_changes_the_shared_serve_fails_and_so_does_every_later_reader(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_serve, "SETTLE_S", 5.0)
    pytester.makeconftest(INNER_CONFTEST)
    for name, mutation in MUTATIONS.items():
        pytester.makepyfile(**{f"test_{name}": f"""
import os, signal, threading, time
from tests.shared_serve import _children
from tests.test_shared_serve import STATUS

def test_a_reads(shared_serve):
    assert shared_serve.serve.proc.poll() is None

def test_b_changes_it(through_a_module_fixture, shared_serve):
{mutation}

def test_c_reads_after(shared_serve):
    pass

def test_d_needs_no_serve():
    pass
"""})
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")
    text = result.stdout.str()
    passed = {r.nodeid for r in result.reprec.getreports("pytest_runtest_logreport") if r.passed and r.when == "call"}
    errors = {(r.nodeid, r.when) for r in result.reprec.getreports("pytest_runtest_logreport") if r.failed}
    assert passed == {f"test_{name}.py::test_{t}" for name in MUTATIONS for t in (
        "a_reads", "b_changes_it", "d_needs_no_serve")} | {"test_blink.py::test_c_reads_after"}, text
    assert errors == {e for name in NAMED for e in ((f"test_{name}.py::test_b_changes_it", "teardown"),
                                                    (f"test_{name}.py::test_c_reads_after", "setup"))}, text
    for name, named in NAMED.items():
        b, c = f"test_{name}.py::test_b_changes_it", f"test_{name}.py::test_c_reads_after"
        assert f"it changed between before {b} and after {b} (was -> is: {{{named}" in text, text
        assert f"the shared serve cannot be read before {c}: it changed between before {b}" in text
    # Counted in the reports, not the text: the -rA summary repeats each message, truncated to the terminal's width
    # unless the CI variable is set (then in full), so the text's count depends on where it runs.
    failed = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.failed]
    assert [r.longreprtext.count("never the shared one") for r in failed] == [1] * 2 * len(NAMED), text


def test_the_serve_stops_once_the_tests_in_a_row_that_read_it_are_done_and_starts_again_if_asked(
        pytester: pytest.Pytester) -> None:
    """Not at the session's end: idle, it would hold its memory through every later test of the worker."""
    pytester.makeconftest("""
import pytest
from tests.conftest import pytest_runtest_teardown  # noqa: F401 (the early stop)
from tests.test_shared_serve import fake_shared_serve

@pytest.fixture(scope="session")
def shared_serve(tmp_path_factory):
    yield from fake_shared_serve(tmp_path_factory.mktemp("fake"))
""")
    pytester.makepyfile(test_inner="""
from tests.test_shared_serve import STOPPED
SEEN = []

def test_a_reads(shared_serve):
    SEEN.append(shared_serve.serve.proc.pid)

def test_b_reads_too(shared_serve):
    assert shared_serve.serve.proc.pid == SEEN[0] and STOPPED == []  # the same serve, still up

def test_c_needs_none():
    assert STOPPED == SEEN  # stopped before this test

def test_d_reads_again(shared_serve):
    assert shared_serve.serve.proc.pid not in SEEN and shared_serve.serve.proc.poll() is None
""")
    STOPPED.clear()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert len(STOPPED) == 2  # and the second one at the end
