"""Exporter floods: how long /live keeps answering under 1,000 paced idle connections and under slowloris, for the
exporter as shipped and for the unprotected baseline (a plain stdlib server's rules: a per-read timeout, refusing at
the cap), in the same run.

Each exporter is a real `appliance exporter` process (the attacker's threads never share its interpreter); the
baseline is the same exporter with ConnectionPolicy(deadline="read", evict_at_cap=False), i.e. before issue 22.
Floods, each against a fresh exporter:
- idle: a new TCP connection every 20 ms that never sends a byte, up to 1,000 held at once (the server closing one
  makes room for the next);
- slowloris: a new connection every 20 ms that sends a request line and then one header line every 3 s, never
  finishing its headers, up to 1,000 held.
During a flood a prober asks /live every 100 ms (a new connection, 1 s timeout) on the TCP port and, for the shipped
exporter, on its reserved probe socket (@appliance-probe-PORT, what healthchecks/probe asks).

    .venv/bin/python benchmarks/exporter_floods.py [--seconds 25] [--json]

Reported per arm: answered / asked, seconds until the first unanswered probe ("-" = none), the longest gap, p50/p99
latency of the answered ones.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACE_S = 0.02
MAX_HELD = 1000
PROBE_EVERY_S = 0.1
TRICKLE_EVERY_S = 3.0

BASELINE = """
import signal, sys, threading
from pathlib import Path
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.health.server import ConnectionPolicy
from appliance.profile.loader import load_profile
policy = ConnectionPolicy(deadline="read", evict_at_cap=False)  # before issue 22: per-read timeout, refuse at cap
exp = build_exporter(ExporterConfig(load_profile("cpu-smoke"), Path(sys.argv[1]), "single", host="127.0.0.1",
                                    port=int(sys.argv[2]), interval=0.5, probe_socket=False))
exp.server.policy = policy
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
print("ready", flush=True)
exp.serve(stop)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str, log: Path, port: int) -> subprocess.Popen[str]:
    if kind == "shipped":
        argv = [sys.executable, "-m", "appliance", "exporter", "cpu-smoke", "--no-engine", "--log", str(log),
                "--host", "127.0.0.1", "--port", str(port), "--interval", "0.5"]
    else:
        argv = [sys.executable, "-c", BASELINE, str(log), str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    assert proc.stdout is not None
    proc.stdout.readline()
    deadline = time.monotonic() + 30
    while not tcp_live(port, 1.0)[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"{kind} exporter did not answer on {port}")
        time.sleep(0.1)
    return proc


def _ask(connect: socket.socket, timeout: float) -> bool:
    connect.settimeout(timeout)
    connect.sendall(b"GET /live HTTP/1.0\r\n\r\n")
    reply = b""
    while chunk := connect.recv(65536):
        reply += chunk
    return reply.startswith(b"HTTP/1.0 200") or reply.startswith(b"HTTP/1.1 200")


def tcp_live(port: int, timeout: float) -> tuple[bool, float]:
    began = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            ok = _ask(s, max(0.01, timeout - (time.monotonic() - began)))
    except OSError:
        ok = False
    return ok, time.monotonic() - began


def socket_live(name: str, timeout: float) -> tuple[bool, float]:
    began = time.monotonic()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect("\0" + name)
            ok = _ask(s, timeout)
    except OSError:
        ok = False
    return ok, time.monotonic() - began


@dataclass
class Series:
    asked: list[tuple[float, bool, float]] = field(default_factory=list)
    """(seconds since the flood began, answered, latency)."""

    def summary(self, seconds: float) -> dict[str, object]:
        answered = [lat for _, ok, lat in self.asked if ok]
        first_miss = next((t for t, ok, _ in self.asked if not ok), None)
        gap, last_ok = 0.0, 0.0
        for t, ok, _ in self.asked:
            if ok:
                gap, last_ok = max(gap, t - last_ok), t
        gap = max(gap, seconds - last_ok) if self.asked else seconds
        lat = sorted(answered)
        return {"asked": len(self.asked), "answered": len(answered),
                "kept_answering_s": round(first_miss, 1) if first_miss is not None else None,
                "longest_gap_s": round(gap, 2),
                "p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
                "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1) if lat else None}


def flood(kind: str, port: int, stop: threading.Event, held: list[socket.socket], opened: list[int]) -> None:
    lock = threading.Lock()

    def trickle() -> None:
        while not stop.wait(TRICKLE_EVERY_S):
            with lock:
                alive = list(held)
            for s in alive:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    with lock:
                        if s in held:
                            held.remove(s)
                    s.close()

    if kind == "slowloris":
        threading.Thread(target=trickle, daemon=True).start()
    while not stop.is_set():
        began = time.monotonic()
        with lock:
            room = len(held) < MAX_HELD
        if room:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.setblocking(False)
                if kind == "slowloris":
                    s.sendall(b"GET /live HTTP/1.1\r\nHost: x\r\n")
                with lock:
                    held.append(s)
                opened[0] += 1
            except OSError:
                pass
        if kind == "idle":  # a connection the server closed is dropped, making room for the next
            with lock:
                for s in list(held[: 64]):
                    try:
                        if s.recv(1) == b"":
                            held.remove(s)
                            s.close()
                    except BlockingIOError:
                        pass
                    except OSError:
                        held.remove(s)
                        s.close()
        stop.wait(max(0.0, PACE_S - (time.monotonic() - began)))


def run_arm(server: str, kind: str, seconds: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "vllm.log"
        log.write_text("")
        port = free_port()
        proc = start(server, log, port)
        stop, held, opened = threading.Event(), [], [0]
        tcp, sock = Series(), Series()
        attacker = threading.Thread(target=flood, args=(kind, port, stop, held, opened), daemon=True)
        began = time.monotonic()
        attacker.start()
        try:
            while (now := time.monotonic() - began) < seconds:
                ok, lat = tcp_live(port, 1.0)
                tcp.asked.append((now, ok, lat))
                if server == "shipped":
                    ok, lat = socket_live(f"appliance-probe-{port}", 1.0)
                    sock.asked.append((now, ok, lat))
                time.sleep(PROBE_EVERY_S)
        finally:
            stop.set()
            attacker.join(10)
            peak = len(held)
            for s in held:
                s.close()
            proc.terminate()
            proc.wait(20)
        out: dict[str, object] = {"server": server, "flood": kind, "seconds": seconds, "opened": opened[0],
                                  "held_at_end": peak, "tcp": tcp.summary(seconds)}
        if server == "shipped":
            out["probe_socket"] = sock.summary(seconds)
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="length of each flood (default 25)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    results = [run_arm(server, kind, args.seconds) for kind in ("idle", "slowloris")
               for server in ("baseline", "shipped")]
    if args.json:
        print(json.dumps({"machine": f"{os.cpu_count()} CPUs", "results": results}, indent=1))
        return 0
    print(f"{'flood':<10} {'server':<9} {'path':<13} {'answered':>9} {'kept answering':>15} {'longest gap':>12} "
          f"{'p50 ms':>7} {'p99 ms':>7}  connections opened")
    for r in results:
        for path in ("tcp", "probe_socket"):
            if path not in r:
                continue
            s = r[path]
            kept = "whole run" if s["kept_answering_s"] is None else f"{s['kept_answering_s']} s"  # type: ignore[index]
            print(f"{r['flood']:<10} {r['server']:<9} {path:<13} {s['answered']:>4}/{s['asked']:<4} "  # type: ignore[index]
                  f"{kept:>15} {s['longest_gap_s']:>10} s {s['p50_ms']!s:>7} {s['p99_ms']!s:>7}  "  # type: ignore[index]
                  f"{r['opened']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
