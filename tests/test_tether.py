"""A serve started by a program ends when that program is killed outright (appliance/run/tether.py).

Real processes throughout: a starter, its child, a SIGKILL. The engine test starts the candidate's serve the way
`appliance upgrade qualify` does (`upgrade.serve.start_serve`: `appliance run` -> supervisord -> the CPU engine) and
kills its starter, as a test timeout or the OOM killer would kill a qualify."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.run.tether import TETHER_ENV
from tests.conftest import BIN, free_port, wait_for
from tests.orphans import of_session, running

CHILD = f"""
import os, sys
from appliance.run.tether import tether_to
tether_to(int(os.environ["{TETHER_ENV}"]) if "{TETHER_ENV}" in os.environ else None)
assert "{TETHER_ENV}" not in os.environ  # what the exec'd program inherits
os.execvp("sleep", ["sleep", "600"])  # the request outlives the exec, as it does into supervisord
"""
STARTER = """
import os, subprocess, sys, time
env = dict(os.environ)
if sys.argv[1] == "tethered":
    from appliance.run.tether import tether_env
    env |= tether_env()
child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], env=env, start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""
SERVE_STARTER = """
import os, sys, time
from pathlib import Path
from appliance.upgrade.serve import start_serve
serve = start_serve("cpu-smoke", Path(sys.argv[1]), sys.argv[2:], dict(os.environ), lambda line: None)
print(serve.proc.pid, flush=True)
time.sleep(600)
"""


def start(script: str, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    starter = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    line = starter.stdout.readline()
    assert line.strip().isdigit(), f"the starter printed no child pid: {line!r}"
    return starter, int(line)


def kill_group(pid: int) -> None:
    if running(pid):
        os.killpg(pid, signal.SIGKILL)


def kill_session(sid: int) -> None:
    for pid in of_session(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("tethered", [True, False])
def test_a_tethered_child_ends_with_its_killed_starter_and_an_untethered_one_does_not(tethered: bool) -> None:
    starter, child = start(STARTER, "tethered" if tethered else "untethered", CHILD)
    try:
        assert running(child)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        if tethered:
            assert wait_for(lambda: not running(child), 10, 0.1), "the tethered child outlived its killed starter"
        else:
            time.sleep(2)  # the control: the same child without the tether runs on, orphaned
            assert running(child)
    finally:
        kill_group(child)
        if starter.poll() is None:  # a failure before the kill: the starter would sleep on for 10 minutes
            starter.kill()
            starter.wait(10)


def test_a_serve_whose_starter_is_not_its_parent_is_refused_before_anything_starts(tmp_path: Path) -> None:
    other = os.getppid()  # alive, and not the parent of the `appliance run` below (this process is)
    proc = subprocess.run([sys.executable, "-m", "appliance", "run", "cpu-smoke", "--run-dir", str(tmp_path / "run"),
                           "--dry-run"], env=os.environ | {TETHER_ENV: str(other)}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{TETHER_ENV}" in proc.stderr and f"(pid {other}) is not its parent" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists(), "a refused serve wrote its run folder"


@pytest.mark.parametrize("value", ["0", "-3", "abc", "12 34"])
def test_a_malformed_tether_pid_is_named(value: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "appliance", "run", "cpu-smoke", "--run-dir", str(tmp_path / "run"),
                           "--dry-run"], env=os.environ | {TETHER_ENV: value}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and f"{TETHER_ENV}=" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_candidate_serve_of_a_killed_starter_stops_with_its_engine(smoke_model_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "candidate-serve"
    port, health_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")} | {
        "APPLIANCE_MODEL_DIR": str(smoke_model_dir), "APPLIANCE_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1",
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    starter, supervisord = start(SERVE_STARTER, str(run_dir), f"server.port={port}",
                                 f"server.health_port={health_port}", env=env)
    try:
        conf = run_dir / "supervisord.conf"
        assert wait_for(lambda: "RUNNING" in subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(conf), "status", "vllm"], capture_output=True, text=True,
            timeout=30).stdout, 120), "the candidate's engine program never ran"
        engine = int(subprocess.run([str(BIN / "supervisorctl"), "-c", str(conf), "pid", "vllm"], capture_output=True,
                                    text=True, timeout=30).stdout.strip())
        # Killed while the EngineCore is being built: its handler is armed (vllm 0.32.0 v1/engine/core.py
        # run_engine_core, line 1469) before EngineCore.__init__ logs this (line 133), and from then on a SIGTERM
        # is only noted while the build goes on (a minute here, many on a GPU), so only the crash guard's reap
        # of the engine's group stops it in time.
        log = run_dir / "vllm.log"
        assert wait_for(lambda: "Initializing a V1 LLM engine" in log.read_text(errors="replace"), 180, 0.2), \
            "the candidate's EngineCore never started"
        assert running(supervisord) and running(engine)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        assert wait_for(lambda: not running(supervisord), 120, 0.5), "the candidate's supervisord outlived its starter"
        assert not running(engine), "supervisord ended and left the candidate's engine running"
        wait_for(lambda: not of_session(supervisord), 5, 0.2)  # killed, not a build that ends on its own later
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:60] for pid in of_session(supervisord)}
        assert not left, f"the candidate's serve left processes behind: {left}"
    finally:
        kill_session(supervisord)
        if starter.poll() is None:
            starter.kill()
            starter.wait(10)
