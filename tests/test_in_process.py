"""The in-process runner the hostile-input tests share (tests/in_process.py): its time limit ends a call that
blocks, where no `except Exception` in the product can swallow it, and each run leaves the environment as it was."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.in_process import Hang, run_main, time_limit


def test_the_time_limit_ends_a_blocking_open_and_no_broad_handler_takes_it(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    began = time.monotonic()
    with pytest.raises(Hang, match=r"within 0\.2 s"):
        try:
            with time_limit(0.2):
                fifo.read_text()  # no writer: open blocks until the alarm
        except Exception:  # as the gate's runner and the exporter's probes catch a check's failure
            pytest.fail("the hang was taken for an ordinary error")
    assert time.monotonic() - began < 5


def test_a_run_captures_both_streams_and_restores_the_environment() -> None:
    os.environ.pop("APPLIANCE_IN_PROCESS_PROBE", None)
    run = run_main(["render", "no-such-profile"], env={"APPLIANCE_IN_PROCESS_PROBE": "1"}, limit_s=30)
    assert run.returncode == 2 and "no-such-profile" in run.stderr and "Traceback" not in run.stderr
    assert "APPLIANCE_IN_PROCESS_PROBE" not in os.environ
    assert run_main(["--no-such-flag"], limit_s=30).returncode == 2  # argparse's own exit, caught
