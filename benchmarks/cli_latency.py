"""CLI latency: each command's CPU time (user + system of the whole process) against the interpreter floor,
`python -c 'import pydantic, yaml'`, in one run; and the wall time of what TAB completion asks
(`appliance profiles --names`).

Every call is a fresh interpreter (nothing already imported) that reads the appliance's bytecode, compiled first,
as an installed wheel's is. The arms run in blocks whose order turns each
block, so no arm always runs on a page cache another arm warmed. CPU time is read from the child's own rusage
(os.wait4), so time spent waiting for the other core does not count against a command.

    .venv/bin/python benchmarks/cli_latency.py [--calls 5] [--blocks 3]

Prints each arm's median CPU and wall, and its ratio to the floor. Goals (issue 38, P10): render and validate
<= 2x the floor; `profiles --names` <= 0.15 s wall. A second floor, one pydantic model defined and validated, says
what pydantic's deferred internals cost before any command's own work (docs/performance.md).

The pure commands (validate, render, rules, profiles) replay their last answer while nothing they read has changed
(appliance/replay.py). The plain arms share one home, as a user's calls do: their first call records, the rest
replay. Each `(first run)` arm gets an empty home per call, so it runs the command and records it: what the first
call after an edit costs. Both are printed against the goal. The home is set through HOME, not APPLIANCE_HOME: any
APPLIANCE_ variable makes the settings go through pydantic-settings (appliance/settings.py), a cost of its own.
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = "python -c 'import pydantic, yaml'"
MODEL_FLOOR = "python: one pydantic model, validated"
GOAL_RATIO = 2.0
GOAL_TAB_S = 0.15
ARMS: dict[str, list[str]] = {
    FLOOR: ["-c", "import pydantic, yaml"],
    # `import pydantic` defers its internals (pydantic-core, the schema builder, the plugin scan) to the first
    # model: this arm is what any command that validates with pydantic pays before its own work
    MODEL_FLOOR: ["-c", "import pydantic, yaml\nclass A(pydantic.BaseModel):\n    x: int = 0\nA(x=1)"],
    "appliance --help": ["-m", "appliance", "--help"],
    "appliance profiles --names": ["-m", "appliance", "profiles", "--names"],
    "appliance profiles": ["-m", "appliance", "profiles"],
    "appliance rules": ["-m", "appliance", "rules"],
    "appliance validate gb10-tp2": ["-m", "appliance", "validate", "gb10-tp2"],
    # a string in the rendered command only: nothing connects to it
    "appliance render gb10-tp2": ["-m", "appliance", "render", "gb10-tp2", "--master-addr", "10.0.0.1"],
    "appliance config gb10-tp2": ["-m", "appliance", "config", "gb10-tp2"],
}
FIRST_RUN = " (first run)"
for _name in ("appliance validate gb10-tp2", "appliance render gb10-tp2"):
    ARMS[_name + FIRST_RUN] = ARMS[_name]


def once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # validate of a profile with warnings is 0; a refused one would be 2
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="calls per arm per block")
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args()
    # An installed wheel carries its bytecode (pip compiles it); a checkout run with PYTHONDONTWRITEBYTECODE (as
    # scripts/test.sh unsets it for) would compile ~50 modules from source on every call, ~100 ms that no user pays.
    compileall.compile_dir(ROOT / "appliance", quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(ROOT)}
    scratch = Path(tempfile.mkdtemp(prefix="cli-latency-"))
    env["HOME"] = str(scratch / "shared")
    fresh = itertools.count()
    cpu: dict[str, list[float]] = {name: [] for name in ARMS}
    wall: dict[str, list[float]] = {name: [] for name in ARMS}
    for block in range(args.blocks):
        order = list(ARMS) if block % 2 == 0 else list(reversed(ARMS))
        for name in order:
            for _ in range(args.calls):
                home = scratch / f"fresh-{next(fresh)}" if name.endswith(FIRST_RUN) else None
                c, w = once(ARMS[name], env if home is None else env | {"HOME": str(home)})
                cpu[name].append(c)
                wall[name].append(w)
    shutil.rmtree(scratch)
    floor = statistics.median(cpu[FLOOR])
    print(f"{'arm':<50} {'cpu ms':>8} {'wall ms':>8} {'cpu/floor':>10}")
    for name in ARMS:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        print(f"{name:<50} {c * 1000:8.0f} {w * 1000:8.0f} {c / floor:9.2f}x")
    model_floor = statistics.median(cpu[MODEL_FLOOR])
    for name in ("appliance render gb10-tp2", "appliance validate gb10-tp2",
                 "appliance render gb10-tp2" + FIRST_RUN, "appliance validate gb10-tp2" + FIRST_RUN):
        ratio = statistics.median(cpu[name]) / floor
        print(f"{name}: {ratio:.2f}x the floor ({'meets' if ratio <= GOAL_RATIO else 'misses'} <= {GOAL_RATIO}x); "
              f"{statistics.median(cpu[name]) / model_floor:.2f}x one pydantic model")
    tab = statistics.median(wall["appliance profiles --names"])
    print(f"TAB (profiles --names) wall: {tab:.3f} s ({'meets' if tab <= GOAL_TAB_S else 'misses'} <= {GOAL_TAB_S} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
