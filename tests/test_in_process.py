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


def test_each_run_sees_its_environment_and_folder_as_a_fresh_process_would(tmp_path: Path) -> None:
    # data_root() is cached per process: without fresh caches the second run would name the first run's root
    from appliance.paths import data_root

    home = data_root()
    for root in (tmp_path / "a", tmp_path / "b"):
        assert run_main(["profiles", "path"], env={"APPLIANCE_ROOT": str(root)}).stdout == f"{root}/profiles\n"
    assert data_root() == home  # and the root a call found under its environment does not outlive it
    (tmp_path / "mine.yaml").write_text("extends: [cpu-smoke]\n")
    here = run_main(["validate", "mine.yaml"], cwd=tmp_path)  # a relative path, read from `cwd`
    assert here.returncode == 0 and here.stdout.startswith("mine: ok"), here.stderr
    assert Path.cwd() != tmp_path
    os.environ["APPLIANCE_PROFILE"], saved = "cpu-smoke", os.environ.get("APPLIANCE_PROFILE")
    try:
        assert run_main(["config"]).returncode == 0  # the profile from the environment
        alone = run_main(["config"], env={"PATH": os.environ["PATH"]}, replace_env=True)  # as subprocess's env=
        assert alone.returncode == 2 and "no profile given" in alone.stderr
        assert os.environ["APPLIANCE_PROFILE"] == "cpu-smoke"
    finally:
        if saved is None:
            del os.environ["APPLIANCE_PROFILE"]
        else:
            os.environ["APPLIANCE_PROFILE"] = saved


def test_a_warning_the_command_logs_is_on_its_stderr_as_a_fresh_process_prints_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from appliance.commands import profiles

    def run(args: object) -> int:
        logging.getLogger("appliance.probe").warning("rendezvous: waiting for the head")
        logging.getLogger("appliance.probe").info("not shown: below WARNING")
        return 0

    monkeypatch.setattr(profiles, "run", run)
    before = list(logging.getLogger().handlers)
    done = run_main(["profiles"])
    assert (done.returncode, done.stderr) == (0, "rendezvous: waiting for the head\n")
    assert logging.getLogger().handlers == before  # and the handler leaves with the call
