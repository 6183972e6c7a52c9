"""Time to ready: `appliance run cpu-smoke` vs bare `vllm serve` with the same argv and env.

Blocked and paired: each repetition runs both arms back to back, alternating which goes first,
so machine drift hits both. "Ready" = the engine's /health answers 200 (the same event for both
arms). One unrecorded warm-up start per arm first, so both meet warm caches (vLLM keeps its
model-inspection results in its cache root; the appliance's is keyed, the bare arm's the default).
Target: appliance overhead <= 5 % of the median.

`--engine-default` adds a third arm: the bare arm without VLLM_ENABLE_V1_MULTIPROCESSING, vLLM's own default, whose
CPU platform then spawns a worker process beside the engine core (W6): what the appliance's plan saves a start.

    .venv/bin/python benchmarks/time_to_ready.py --reps 3 [--engine-default]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.channels.capabilities import ENV_V1_MULTIPROCESSING  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_health(url: str, proc: subprocess.Popen[bytes], timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before ready")
        time.sleep(0.25)
    raise TimeoutError(url)


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(90)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    time.sleep(2)  # let the engine's children finish exiting before the next arm


def one(arm: str, model_dir: Path, work: Path, timeout: float) -> float:
    port, health = free_port(), free_port()
    env = {**os.environ, "APPLIANCE_MODEL_DIR": str(model_dir), "HF_HUB_OFFLINE": "1",
           "APPLIANCE_HOME": str(work / "home"), "PATH": f"{BIN}:{os.environ['PATH']}",
           "APPLIANCE_SET": f"server.port={port};server.health_port={health}"}
    if arm == "appliance":
        cmd = [str(BIN / "appliance"), "run", "cpu-smoke", "--run-dir", str(work / f"run-{port}")]
    else:
        plan = json.loads(subprocess.run([str(BIN / "appliance"), "render", "cpu-smoke", "--format", "json"],
                                         env=env, capture_output=True, text=True, check=True).stdout)
        cmd, env = [str(BIN / "vllm"), *plan["argv"][1:]], env | plan["env"]
        if arm == "engine-default":  # W6's baseline: vLLM's CPU platform chooses the processes
            env.pop(ENV_V1_MULTIPROCESSING, None)
    log = (work / f"{arm}-{port}.log").open("wb")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_health(f"http://127.0.0.1:{port}/health", proc, timeout)
        return time.monotonic() - start
    finally:
        stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--engine-default", action="store_true",
                    help="a third arm: bare vllm serve under vLLM's own process layout (W6's baseline)")
    args = ap.parse_args()
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    model = prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT))
    arms = ["bare", "appliance", *(["engine-default"] if args.engine_default else [])]
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            print(f"warm-up {arm:<9} ready in {one(arm, model, Path(tmp), args.timeout):6.1f} s (not counted)",
                  flush=True)
        for rep in range(args.reps):
            order = arms if rep % 2 == 0 else arms[::-1]
            for arm in order:
                t = one(arm, model, Path(tmp), args.timeout)
                times[arm].append(t)
                print(f"rep {rep + 1} {arm:<9} ready in {t:6.1f} s", flush=True)
    med = {arm: statistics.median(v) for arm, v in times.items()}
    paired = [a - b for a, b in zip(times["appliance"], times["bare"], strict=True)]
    overhead = (med["appliance"] - med["bare"]) / med["bare"] * 100
    print(f"\nmedian bare {med['bare']:.1f} s, appliance {med['appliance']:.1f} s; "
          f"paired differences {', '.join(f'{d:+.1f}' for d in paired)} s")
    print(f"appliance overhead {overhead:+.1f} % (target <= 5 %): {'PASS' if overhead <= 5 else 'FAIL'}")
    if args.engine_default:
        saved = [d - b for d, b in zip(times["engine-default"], times["bare"], strict=True)]
        print(f"W6: vLLM's default layout median {med['engine-default']:.1f} s; the plan's saves "
              f"{med['engine-default'] - med['bare']:.1f} s a start (paired {', '.join(f'{d:+.1f}' for d in saved)} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
