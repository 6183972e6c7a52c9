"""A stopped engine leaves nothing of its process group behind (appliance/run/crashguard.py), with the real
supervisord and the real crash guard from the rendered supervisord.conf.

The engine program is a two-process stand-in with the shape a stop during vLLM's start showed (a test double for
the timing, which the real engine gives only now and then): a leader that exits at once on SIGTERM without
stopping its child, as an API server does before its own handler is set, and a child in its group that outlives
the SIGTERM, as an EngineCore being built does (it only notes the signal; one was found still running, orphaned,
10 minutes after its serve stopped). supervisord counts the program stopped when the leader is gone."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.render.plan import ServePlan
from appliance.render.supervisord import RunFiles, render_conf
from tests.conftest import BIN, wait_for
from tests.orphans import running

LEADER = """
import os, signal, subprocess, sys, time
core = subprocess.Popen([sys.executable, "-c",
                         "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(core.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
time.sleep(600)
"""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """supervisord's unix socket path must fit sun_path (108 bytes); pytest's tmp_path may not."""
    folder = Path(tempfile.mkdtemp(prefix="cg-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_stopped_engine_whose_child_outlives_the_sigterm_has_its_group_reaped(tmp_path: Path,
                                                                                  short_dir: Path) -> None:
    core_pid_file = tmp_path / "core.pid"
    leader = tmp_path / "leader.py"  # a file: supervisord.conf's command is one line
    leader.write_text(LEADER)
    plan = ServePlan([sys.executable, str(leader), str(core_pid_file)], {}, "single")
    files = RunFiles(tmp_path, short_dir / "s.sock")
    conf = tmp_path / "supervisord.conf"
    conf.write_text(render_conf(plan, files, {}, [sys.executable, "-c", "import time; time.sleep(600)"]))
    sup = subprocess.Popen([str(BIN / "supervisord"), "-n", "-c", str(conf)], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    core = 0
    try:
        assert wait_for(core_pid_file.exists, 30, 0.2), "the engine stand-in never started"
        core = int(core_pid_file.read_text())
        ctl = [str(BIN / "supervisorctl"), "-c", str(conf)]
        assert wait_for(lambda: "RUNNING" in subprocess.run([*ctl, "status", "crashguard"], capture_output=True,
                                                            text=True, timeout=30).stdout, 30, 0.5)
        stop = subprocess.run([*ctl, "stop", "vllm"], capture_output=True, text=True, timeout=90)
        assert "stopped" in stop.stdout, stop.stdout + stop.stderr
        # Far inside supervisord's 60 s stop timeout, which no longer applies: the leader is gone.
        assert wait_for(lambda: not running(core), 10, 0.2), \
            "the engine's child outlived the stop: nothing reaped the stopped program's group"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sup.pid, signal.SIGTERM)
        sup.wait(90)
        if core and running(core):
            os.kill(core, signal.SIGKILL)
