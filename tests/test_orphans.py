"""The session reaper (tests/orphans.py): what a killed test session left running is stopped; what a live
session runs is not."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from tests import orphans


def _sleeper(token: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, orphans.TOKEN_ENV: token}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)


def _wait_listed(pid: int) -> None:
    # /proc/PID/environ shows the exec'd environment once the child has started
    for _ in range(100):
        if orphans._token_of(pid) is not None:
            return
        time.sleep(0.05)


def test_a_process_whose_session_is_gone_is_stopped_and_one_of_a_live_session_is_kept() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead_token = orphans.session_token(gone.pid)  # taken while it runs, so the start time is its own
    gone.kill()
    gone.wait()
    live_token = orphans.session_token()  # this process stands for a session still running
    orphan, kept = _sleeper(dead_token), _sleeper(live_token)
    try:
        _wait_listed(orphan.pid)
        _wait_listed(kept.pid)
        reaped = orphans.reap("own", grace_s=5)
        assert orphan.pid in reaped and kept.pid not in reaped
        assert orphan.wait(timeout=10) == -15  # SIGTERM was enough
        assert kept.poll() is None
    finally:
        for p in (orphan, kept):
            p.kill()
            p.wait()


def test_a_reused_pid_is_not_taken_for_the_session_that_once_had_it() -> None:
    pid, _, start = orphans.session_token().partition("-")
    assert orphans._alive(f"{pid}-{start}")
    assert not orphans._alive(f"{pid}-{int(start) + 1}")
    assert not orphans._alive("not-a-token")


def test_a_process_of_this_session_whose_starter_died_is_stranded_and_one_still_parented_is_not() -> None:
    """`appliance upgrade qualify` SIGKILLed by a test's timeout leaves its candidate's supervisord reparented to
    init; a serve a test still holds is its child. Only the first is a leak at the module's end."""
    token = f"test-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, orphans.TOKEN_ENV: token}
    # The starter forks a grandchild that outlives it (as supervisord outlives the killed qualify), then exits.
    fork = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)")
    starter = subprocess.run([sys.executable, "-c", fork],
                             env=env, capture_output=True, text=True, timeout=60, check=True)
    left = int(starter.stdout.strip())
    held = _sleeper(token)
    try:
        _wait_listed(held.pid)
        for _ in range(100):
            if orphans._parent(left) == 1:
                break
            time.sleep(0.05)
        assert orphans.stranded(token) == [left]  # the reparented one only; never the held child
        assert orphans.reap(token, grace_s=5, found=[left]) == [left]
        for _ in range(200):
            if not os.path.exists(f"/proc/{left}") or orphans._zombie(left):
                break
            time.sleep(0.05)
        assert orphans.stranded(token) == [] and held.poll() is None
    finally:
        held.kill()
        held.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, 9)
