"""Render cost: `appliance render gb10-tp2` cold against `vllm serve --help` cold, same run.

Both arms start a fresh interpreter each call (a cold process: no module already imported, the OS page
cache as the other arm leaves it), in blocks that alternate their order so that neither arm always
runs on a cache the other warmed. `vllm serve --help` is what any vLLM launcher pays before it starts
anything; the appliance's render must cost a small fraction of it (it never imports vLLM or torch).

    .venv/bin/python benchmarks/render_cost.py [--calls 5] [--blocks 3]

Prints each arm's median wall time and the ratio render / vllm-help. Target: <= 0.05x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.05


def once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    run = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{argv} exited {run.returncode}: {run.stderr[-2000:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="calls per arm per block")
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args()
    bindir = Path(sys.executable).parent
    vllm = bindir / "vllm"
    if not vllm.exists():
        raise SystemExit(f"no vllm beside {sys.executable}: install the engine (scripts/install-engine.sh)")
    env = dict(os.environ) | {"PYTHONPATH": str(ROOT)}
    arms = {
        "appliance render gb10-tp2": [sys.executable, "-m", "appliance", "render", "gb10-tp2",
                                      "--master-addr", "10.0.0.1"],
        "vllm serve --help": [str(vllm), "serve", "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in arms}
    for block in range(args.blocks):
        order = list(arms) if block % 2 == 0 else list(reversed(arms))
        for name in order:
            times[name] += [once(arms[name], env) for _ in range(args.calls)]
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:<28} median {medians[name] * 1000:8.0f} ms  min {min(t) * 1000:8.0f} ms  n={len(t)}")
    ratio = medians["appliance render gb10-tp2"] / medians["vllm serve --help"]
    verdict = "meets" if ratio <= TARGET else "misses"
    print(f"ratio render / vllm-help: {ratio:.3f}x ({verdict} the target <= {TARGET}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
