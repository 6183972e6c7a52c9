"""Probe cost: healthchecks/probe vs a bare `curl -fsS` against the same running endpoint, same run.

A real `appliance exporter` serves a ready cpu-smoke log (its /ready is 200). Arms, run in blocks
that alternate their order: bare `curl -fsS -o /dev/null URL/ready`, the shipped probe (POSIX sh that
execs curl) on its default path (the exporter's reserved probe socket) and with a URL (TCP), and two
options the probe could have been (`python3 -I -S` with http.client; `python3` with
the appliance package importable, i.e. paying for site-packages). Cost = wall time per call and the
children's CPU time (user + sys), what a kubelet or Docker pays every period.

    .venv/bin/python benchmarks/probe_cost.py [--calls 40] [--blocks 5] [--vllm-url http://127.0.0.1:8000]

With --vllm-url, bare `curl -fsS URL/health` against the running engine is measured in the same run
as the literal baseline. Goal (issue 38, P1): probe <= 1.05 x bare curl, CPU and wall.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from appliance.health.server import probe_socket_name

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "logs" / "cpu-smoke-serve.log"
GOAL = 1.05  # issue 38, P1
PY_PROBE = ("import http.client,sys; c=http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]), timeout=3); "
            "c.request('GET', '/ready'); sys.exit(c.getresponse().status != 200)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(argv: list[str], calls: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall ms per call, child CPU ms per call); every call must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for _ in range(calls):
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                            env=env).returncode
        if rc != 0:
            raise SystemExit(f"{argv} exited {rc}")
    wall = (time.perf_counter() - start) / calls * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / calls * 1000
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="calls per arm per block")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--vllm-url", help="also time bare curl against this engine's /health")
    args = parser.parse_args()

    text = LOG.read_text()
    tmp = Path(tempfile.mkdtemp(prefix="probe-bench-"))
    log = tmp / "vllm.log"
    log.write_text(text[: text.index("Application startup complete.") + len("Application startup complete.\n")])
    port = free_port()
    exporter = subprocess.Popen([sys.executable, "-m", "appliance", "exporter", "--profile", "cpu-smoke", "--log",
                                 str(log), "--no-engine", "--host", "127.0.0.1", "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("the exporter did not get ready")
        probe = str(ROOT / "healthchecks" / "probe")
        arms = {
            "bare curl -fsS /ready": ["curl", "-fsS", "-o", "/dev/null", f"{base}/ready"],
            # As shipped: Docker's HEALTHCHECK and the Kubernetes probes ask the reserved probe socket.
            "healthchecks/probe ready": [probe, "ready"],
            "healthchecks/probe ready URL": [probe, "ready", base],
            # the probe's transport without its script: which part of the probe's cost is the socket, which the sh
            "bare curl, probe socket": ["curl", "-fsS", "-o", "/dev/null", "--abstract-unix-socket",
                                        probe_socket_name(port), "http://localhost/ready"],
            "python3 -I -S http.client": [os.path.realpath(sys.executable), "-I", "-S", "-c", PY_PROBE, str(port)],
            "python3 (site-packages)": [sys.executable, "-c", PY_PROBE, str(port)],
        }
        if args.vllm_url:
            arms["bare curl -fsS vLLM /health"] = ["curl", "-fsS", "-o", "/dev/null", f"{args.vllm_url}/health"]
        names = list(arms)
        env = {**os.environ, "APPLIANCE_HEALTH_PORT": str(port)}  # the probe socket's name follows the port
        for name in names:  # warm caches once
            measure(arms[name], 3, env)
        results: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for block in range(args.blocks):
            order = names if block % 2 == 0 else names[::-1]
            for name in order:
                results[name].append(measure(arms[name], args.calls, env))
        print(f"{args.blocks} blocks x {args.calls} calls per arm, order alternating; median of block means")
        bare_wall = statistics.median(w for w, _ in results[names[0]])
        bare_cpu = statistics.median(c for _, c in results[names[0]])
        for name in names:
            wall = statistics.median(w for w, _ in results[name])
            cpu = statistics.median(c for _, c in results[name])
            print(f"  {name:<30} wall {wall:6.2f} ms ({wall / bare_wall:4.2f}x)   cpu {cpu:6.2f} ms "
                  f"({cpu / bare_cpu:4.2f}x)")
        probe_wall = statistics.median(w for w, _ in results[names[1]])
        probe_cpu = statistics.median(c for _, c in results[names[1]])
        ratio = max(probe_wall / bare_wall, probe_cpu / bare_cpu)
        print(f"probe / bare curl: {ratio:.2f}x (goal <= {GOAL:.2f}x)")
        return 0 if ratio <= GOAL else 1
    finally:
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(10)
        log.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    raise SystemExit(main())
