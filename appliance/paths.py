"""Where the appliance's data lives: the repository root (or $APPLIANCE_ROOT in an image)."""

from __future__ import annotations

import os
import shutil
import sys
from functools import cache
from pathlib import Path


@cache
def data_root() -> Path:
    """The folder holding versions.json, profiles/ and healthchecks/."""
    env = os.environ.get("APPLIANCE_ROOT")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent


def versions_path() -> Path:
    return data_root() / "versions.json"


def profiles_dir() -> Path:
    return data_root() / "profiles"


def healthchecks_dir() -> Path:
    return data_root() / "healthchecks"


def appliance_home() -> Path:
    """Root of the appliance's own state: models it prepared, keyed caches, receipts."""
    return Path(os.environ.get("APPLIANCE_HOME") or Path.home() / ".cache" / "appliance").expanduser()


def venv_executable(name: str) -> str | None:
    """A console script of this environment (beside the interpreter) first, then PATH: a supervisord or a
    `vllm` elsewhere on PATH would be another install than the one the lock checked."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)
