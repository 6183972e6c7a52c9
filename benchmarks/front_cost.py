"""The front's cost (server.front, appliance/run/front.py) and its switch, on the real CPU engine, in one run.

Two bare `vllm serve` of cpu-smoke (A and B, the argv `appliance render` gives) and the front (appliance/run/front.py)
pointing at A. Then:
- latency: small completions (max_tokens 1), alternating direct to A and through the front; the medians, and the
  front's CPU per request;
- streaming: streamed completions of 256 tokens (ignore_eos), direct and through the front: time to the first token,
  and to the last;
- switch: a steady client (keep-alive, back to back) through the front; the front is switched to B, A is stopped once
  its engine runs no request. Failed requests, and the longest gap between two successes.

    .venv/bin/python benchmarks/front_cost.py [--requests 60]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.time_to_ready import free_port, stop, wait_health  # noqa: E402

BODY = {"model": "smollm2", "prompt": "Hello", "max_tokens": 1}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine(model: Path, work: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "APPLIANCE_MODEL_DIR": str(model), "HF_HUB_OFFLINE": "1", "APPLIANCE_HOME": str(work / "home"),
           "PATH": f"{BIN}:{os.environ['PATH']}", "APPLIANCE_SET": f"server.port={port}"}
    plan = json.loads(subprocess.run([str(BIN / "appliance"), "render", "cpu-smoke", "--format", "json"], env=env,
                                     capture_output=True, text=True, check=True).stdout)
    log = (work / f"engine-{name}.log").open("wb")
    proc = subprocess.Popen([str(BIN / "vllm"), *plan["argv"][1:]], env=env | plan["env"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_health(f"{url}/health", proc, 600)
    return proc, url


def point(state: Path, url: str) -> None:
    """front.json names `url`, as a promote --beside writes it."""
    from appliance.upgrade.bridge import point_front

    point_front(state.parent, url)


def latency(client: httpx.Client, url: str) -> float:
    began = time.perf_counter()
    client.post(f"{url}/v1/completions", json=BODY).raise_for_status()
    return time.perf_counter() - began


def stream(client: httpx.Client, url: str) -> tuple[float, float, int]:
    body = {"model": "smollm2", "prompt": "Count slowly:", "max_tokens": 256, "ignore_eos": True, "stream": True}
    began, first, chunks = time.perf_counter(), 0.0, 0
    with client.stream("POST", f"{url}/v1/completions", json=body) as answer:
        for line in answer.iter_lines():
            if line.startswith("data:"):
                chunks += 1
                first = first or time.perf_counter() - began
    return first, time.perf_counter() - began, chunks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--streams", type=int, default=3)
    args = ap.parse_args()
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    model = prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        a, a_url = engine(model, work, "a")
        b, b_url = engine(model, work, "b")
        state, front_port = work / "front.json", free_port()
        point(state, a_url)
        front = subprocess.Popen([sys.executable, "-m", "appliance.run.front", "--listen", f"127.0.0.1:{front_port}",
                                  "--state", str(state), "--fallback", a_url], start_new_session=True)
        front_url = f"http://127.0.0.1:{front_port}"
        try:
            wait_health(f"{front_url}/health", front, 60)
            with httpx.Client(timeout=600, trust_env=False) as client:
                for url in (a_url, front_url):  # warm both paths
                    latency(client, url)
                times: dict[str, list[float]] = {"direct": [], "front": []}
                cpu0 = cpu_s(front.pid)
                for i in range(args.requests):
                    for arm in (("direct", "front") if i % 2 == 0 else ("front", "direct")):
                        times[arm].append(latency(client, a_url if arm == "direct" else front_url))
                per_request_ms = (cpu_s(front.pid) - cpu0) / args.requests * 1000
                med = {arm: statistics.median(v) * 1000 for arm, v in times.items()}
                print(f"latency (max_tokens 1, {args.requests} each): direct {med['direct']:.2f} ms, front "
                      f"{med['front']:.2f} ms ({med['front'] / med['direct']:.3f}x, +{med['front'] - med['direct']:.2f}"
                      f" ms); the front's CPU {per_request_ms:.2f} ms a request", flush=True)
                streams: dict[str, list[tuple[float, float, int]]] = {"direct": [], "front": []}
                for i in range(args.streams):
                    for arm in (("direct", "front") if i % 2 == 0 else ("front", "direct")):
                        streams[arm].append(stream(client, a_url if arm == "direct" else front_url))
                for arm, rows in streams.items():
                    first = statistics.median(r[0] for r in rows) * 1000
                    print(f"stream 256 tokens, {arm}: first token {first:.0f} ms, all "
                          f"{statistics.median(r[1] for r in rows):.2f} s, chunks {rows[0][2]}", flush=True)
            # The switch: a steady client through the front, back to back on one keep-alive connection.
            results: list[tuple[float, float, bool]] = []
            done = threading.Event()

            def steady() -> None:
                with httpx.Client(timeout=60, trust_env=False) as client:
                    while not done.is_set():
                        began = time.monotonic()
                        try:
                            ok = client.post(f"{front_url}/v1/completions", json=BODY).status_code == 200
                        except httpx.HTTPError:
                            ok = False
                        results.append((began, time.monotonic(), ok))

            worker = threading.Thread(target=steady, daemon=True)
            worker.start()
            time.sleep(5)
            switched = time.monotonic()
            point(state, b_url)
            from appliance.upgrade.bridge import drained as until_drained

            until_drained(a_url, 600)  # what a promote --beside waits for before it restarts the engine
            drained = time.monotonic()
            stop(a)
            stopped = time.monotonic()
            time.sleep(5)
            done.set()
            worker.join(60)
            oks = [r for r in results if r[2]]
            gaps = [later[1] - earlier[1] for earlier, later in itertools.pairwise(oks)]
            failed = sum(1 for r in results if not r[2])
            print(f"switch: {len(results)} requests, {failed} failed; drained {drained - switched:.1f} s after the "
                  f"switch, A stopped in {stopped - drained:.1f} s; the longest gap between two successes "
                  f"{max(gaps) * 1000:.0f} ms (median {statistics.median(gaps) * 1000:.0f} ms)", flush=True)
        finally:
            for proc in (front, a, b):
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                        proc.wait(60)
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        os.killpg(proc.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
