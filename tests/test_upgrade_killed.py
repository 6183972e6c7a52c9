"""A promote killed at each of its steps (issue 35 item 3). The promote runs for real in its own process, on a
serve's real run folder (`appliance run --dry-run`: no engine starts); the one stand-in is the kill, a SIGKILL the
process sends itself right after the step (fault injection: nothing else is replaced). After each kill, what is on
disk must lead back to the incumbent: before the switch nothing changed; after it `upgrade status` says a rollback
is needed, a new promote refuses to stack on the unproven candidate, and `upgrade rollback` puts both files back
and closes the killed record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.profile.active import read_active
from appliance.run.launchfile import read_launch
from appliance.upgrade.exclusive import one_switch
from appliance.upgrade.history import records
from appliance.upgrade.status import status
from appliance.upgrade.unfinished import KILLED
from tests import test_upgrade
from tests.test_upgrade import OLD, cli, fake_engine_venv

PROFILE = "cpu-smoke"
home = test_upgrade.home  # the same APPLIANCE_HOME and engine store, as a fixture of this module too

KILL_AFTER = r"""
import os, signal, sys

from appliance.run import launch
from appliance.upgrade import promote

STEPS = {"record": (promote, "write_record"), "active": (promote, "write_active"), "launch": (launch, "write_launch")}


def kill(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def kill_at(owner, name, nth, after):
    real, calls = getattr(owner, name), []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == nth and not after:
            kill()
        out = real(*args, **kwargs)
        if len(calls) == nth and after:
            kill()
        return out

    setattr(owner, name, step)


where = sys.argv[1]
nth, step = (2, where[5:]) if where.startswith("back-") else (1, where)
if step == "restart":  # killed as the engine restart begins (the files switched, or switched back)
    kill_at(promote.NativeSwitch, "restart_and_prove", nth, after=False)
else:
    kill_at(*STEPS[step], nth, after=True)
from appliance.cli import main

raise SystemExit(main(sys.argv[2:]))
"""
SWITCHED = ("active", "launch", "restart", "back-record")
"""The steps after which active.json names the candidate (and launch.json too, from `launch` on): the second
write_record is the switch-back's note, written before anything goes back."""
RETURNING = ("back-active", "back-launch", "back-restart")
"""Killed while switching back from the failed candidate (no supervisord runs here, so its restart fails): active.json
is back on the incumbent, launch.json and the engine may not be."""


@pytest.fixture
def run_dir(home: Path, tmp_path: Path, vllm_engine: Path) -> Path:
    """The incumbent's run folder as `appliance run` leaves it (0.32.0, this environment's engine), and the
    candidate channel's engine venv (0.31.0) where the store looks for it."""
    fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    folder = tmp_path / "run"
    out = cli("run", PROFILE, "--dry-run", "--skip-doctor", "--run-dir", str(folder))
    assert out.returncode == 0, out.stderr
    return folder


def killed(where: str, run_dir: Path, *argv: str) -> None:
    out = subprocess.run([sys.executable, "-c", KILL_AFTER, where, *argv], capture_output=True, text=True,
                         timeout=300, check=False, env=dict(os.environ))
    assert out.returncode == -signal.SIGKILL, f"not killed after {where}: rc {out.returncode}\n{out.stderr[-2000:]}"


def killed_promote(where: str, run_dir: Path) -> None:
    killed(where, run_dir, "upgrade", "promote", PROFILE, "--to", OLD, "--run-dir", str(run_dir), "--force")


def history() -> list[dict]:
    (row,) = status(PROFILE)
    return row["history"]


@pytest.mark.parametrize("where", ["record", *SWITCHED, *RETURNING])
def test_a_promote_killed_after_each_step_leads_back_to_the_incumbent(where: str, run_dir: Path) -> None:
    incumbent = read_launch(run_dir / "launch.json").profile_digest
    killed_promote(where, run_dir)
    (promoted,) = [r for r in records(PROFILE) if r.kind == "promote"]
    assert "outcome" not in promoted.data  # the kill left it unfinished
    active = read_active(PROFILE)
    if where == "record":  # killed before the switch: the serve's files are the incumbent's
        assert active is None and read_launch(run_dir / "launch.json").profile_digest == incumbent
        assert history()[-1]["result"] == "unfinished: stopped without an outcome (no process is finishing it)"
        return
    said = history()[-1]["result"]
    if where in RETURNING:
        assert active is None and promoted.data["switching_back"]
        if where == "back-active":  # the next engine start would read the candidate's launch.json
            assert read_launch(run_dir / "launch.json").profile_digest != incumbent
        assert said.startswith("unfinished: stopped while returning the serve") and \
            f"appliance upgrade rollback {PROFILE} --run-dir {run_dir}" in said, said
    else:
        assert active is not None and active.channel == OLD and active.decision == promoted.id
        if where != "active":
            assert read_launch(run_dir / "launch.json").profile_digest != incumbent  # relaunched on the candidate
        assert said.startswith("unfinished: stopped after switching to its candidate") and \
            f"appliance upgrade rollback {PROFILE} --run-dir {run_dir}" in said, said

    again = cli("upgrade", "promote", PROFILE, "--to", OLD, "--run-dir", str(run_dir), "--force")
    assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr
    assert f"the promote {promoted.id}" in again.stderr and ("never finished" in again.stderr if where in SWITCHED
                                                              else "stopped while it returned" in again.stderr)
    assert [r.id for r in records(PROFILE) if r.kind == "promote"] == [promoted.id]  # refused before a record

    back = cli("upgrade", "rollback", PROFILE, "--run-dir", str(run_dir), "--budget-s", "5", "--json")
    assert "Traceback" not in back.stderr, back.stderr
    assert read_active(PROFILE) is None  # the profile's own channel again ...
    assert read_launch(run_dir / "launch.json").profile_digest == incumbent  # ... in the serve's launch too
    closed = next(r for r in records(PROFILE) if r.id == promoted.id)
    (rolled,) = [r for r in records(PROFILE) if r.kind == "rollback"]
    assert closed.data["outcome"] == KILLED and rolled.id in closed.data["why"], closed.data
    assert rolled.data["cleared"] == promoted.id
    # No engine runs here, so the restart on the incumbent fails, and the rollback's record says so.
    assert rolled.data["outcome"] == "rollback failed" and "restart failed" in rolled.data["proof"]["why"]


@pytest.mark.parametrize("where", ["active", "launch"])
def test_a_rollback_killed_part_way_is_finished_by_the_next_not_stepped_past(where: str, run_dir: Path) -> None:
    """The rollback of a killed promote, itself killed after it put active.json back: a second rollback must finish
    that return (launch.json back on the incumbent, both records closed), not step back from the incumbent."""
    incumbent = read_launch(run_dir / "launch.json").profile_digest
    killed_promote("launch", run_dir)
    (promoted,) = [r for r in records(PROFILE) if r.kind == "promote"]
    killed(where, run_dir, "upgrade", "rollback", PROFILE, "--run-dir", str(run_dir), "--budget-s", "5")
    (first,) = [r for r in records(PROFILE) if r.kind == "rollback"]
    assert read_active(PROFILE) is None and "outcome" not in first.data and first.data["cleared"] == promoted.id
    said = history()[-1]["result"]
    assert said.startswith("unfinished: stopped while returning the serve"), said

    back = cli("upgrade", "rollback", PROFILE, "--run-dir", str(run_dir), "--budget-s", "5", "--json")
    assert "Traceback" not in back.stderr and "no promoted channel" not in back.stderr, back.stderr
    assert read_active(PROFILE) is None and read_launch(run_dir / "launch.json").profile_digest == incumbent
    by_id = {r.id: r for r in records(PROFILE)}
    (finisher,) = [r for r in by_id.values() if r.kind == "rollback" and r.id != first.id]
    assert finisher.data["cleared"] == first.id and finisher.data["to"]["profile_digest"] == incumbent
    for closed in (by_id[first.id], by_id[promoted.id]):  # the killed rollback and the promote it was clearing
        assert closed.data["outcome"] == KILLED and finisher.id in closed.data["why"], closed.data
    assert not [h["result"] for h in history() if str(h["result"]).startswith("unfinished")]


def test_status_tells_a_promote_in_progress_from_a_killed_one(run_dir: Path) -> None:
    killed_promote("restart", run_dir)
    assert history()[-1]["result"].startswith("unfinished: stopped after switching")
    with one_switch(PROFILE, "promote"):
        said = history()[-1]["result"]
    assert said.startswith(f"unfinished: promote (pid {os.getpid()}, since ") and said.endswith("is running now")
    text = cli("upgrade", "status", PROFILE)
    assert text.returncode == 0 and "returns to the incumbent" in text.stdout, text.stdout
    assert json.loads(cli("upgrade", "status", PROFILE, "--json").stdout)[0]["history"][-1]["result"] == \
        history()[-1]["result"]
