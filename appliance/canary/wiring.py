"""How `appliance run` starts the canary: the watch program's command line (a supervisord program).

Its command carries no rung: a step-down re-renders the config with the rung in APPLIANCE_SET, and
supervisord then restarts only the engine, never this watch (appliance/canary/ladder.py)."""

from __future__ import annotations

import sys
from pathlib import Path


def watch_argv(profile_source: Path, run_dir: Path, engine_url: str, cli_overrides: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "appliance.canary.watch", "--profile", profile_source.as_posix(),
            "--run-dir", str(run_dir), "--url", engine_url]
    for item in cli_overrides:
        argv += ["--set", item]
    return argv
