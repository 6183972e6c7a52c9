"""appliance/run/supervisord_boot.py: supervisord whose first poll does not wait. The installed supervisor's loop must
still have the shape that makes the first poll a wasted second, the wrapper must pass every later timeout through,
and a real supervisord started through it must run its programs and carry its usual name."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from supervisor import supervisord

from appliance.run.supervisord_boot import first_poll_at_once

BIN = Path(sys.executable).parent


def test_supervisors_loop_polls_with_a_one_second_timeout_before_its_groups_start() -> None:
    """The fact the wrapper rests on (supervisor's supervisord.py, Supervisor.runforever): a 1 s poll, then each
    group's transition, which starts its programs. If a new supervisor changes this, the wrapper is moot: look again."""
    source = inspect.getsource(supervisord.Supervisor.runforever)
    assert "timeout = 1" in source
    poll = source.index("self.options.poller.poll(timeout)")
    transition = source.index("group.transition()")
    assert poll < transition


def test_only_each_pollers_first_poll_is_made_not_to_wait() -> None:
    class Recording:
        def __init__(self) -> None:
            self.timeouts: list[float] = []

        def poll(self, timeout: float) -> tuple[list[int], list[int]]:
            self.timeouts.append(timeout)
            return [], []

    first_poll_at_once(Recording)
    one, two = Recording(), Recording()
    for _ in range(3):
        one.poll(1)
    two.poll(1)
    assert one.timeouts == [0, 1, 1]
    assert two.timeouts == [0]  # supervisord's reload (SIGHUP) builds a new poller: its first poll again


def test_a_real_supervisord_through_it_runs_its_program_under_its_own_name(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    conf = tmp_path / "supervisord.conf"
    conf.write_text(f"""[supervisord]
nodaemon=true
logfile=/dev/null
logfile_maxbytes=0
pidfile={tmp_path / "s.pid"}

[unix_http_server]
file={sock}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{sock}

[program:sleeper]
command=sleep 60
startsecs=0
stdout_logfile={tmp_path / "sleeper.log"}
""")
    proc = subprocess.Popen([sys.executable, "-m", "appliance.run.supervisord_boot", "-n", "-c", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        status = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "RUNNING" not in status:
            status = subprocess.run([str(BIN / "supervisorctl"), "-c", str(conf), "status", "sleeper"],
                                    capture_output=True, text=True).stdout
            time.sleep(0.1)
        assert "RUNNING" in status, status
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "supervisord"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
