"""Canary cost: serving throughput with the canary on vs off, in the same serve, through the gate's bench.

One `appliance run PROFILE` (default cpu-smoke-canary, the real vLLM CPU engine) serves throughout. Each
block runs three arms, in an order that rotates from block to block; each arm is one `appliance gate
--checks bench` (llama-benchy, which sends its requests back to back):

- `off`:   the canary's supervisord program stopped (`supervisorctl stop canary`);
- `watch`: the program running: started, it runs one round at once; the arm begins when that round ends and
           the watch is asleep until its next (the profile's interval). The watch's own CPU time over the arm
           is read from /proc. What the bench loses here is what follows a round, not the watch's steady cost;
- `round`: canary rounds (the watch's own `run_round`, same size) back to back from this script for the
           whole arm, never pausing. This is what a round costs while it overlaps traffic.

Each cost is paired within its block ((off - arm) / off), then averaged over the blocks, with a 95 %
confidence interval (Student's t): arms on one 2-core machine drift by several per cent between blocks.

Under traffic that never stops, the watch defers a due round for `max_defer_s`, looking at the engine
(/health + /metrics) every POLL_S s, and then runs it through (corruption that shows only under load must
still be seen): one round overlaps traffic, and one arm's worth of time follows it, per cycle of
`interval_s + max_defer_s + round_s`. The cost at the schedule, per bench test, is then

    look_s / POLL_S  +  (overlap * round_s + after * arm_s) / cycle

with every term measured in this run (look_s: the median wall time of one look, counted as if all of it were
taken from serving; round_s: the median round under load; arm_s: the median `watch` arm). The pessimistic
reading, printed beside it, counts `after` as if it lasted the whole cycle. Traffic with gaps costs less: rounds
run in the gaps and pause between their steps when traffic comes back (appliance/canary/watch.py).
Target: <= 2 % at the default schedule.

    .venv/bin/python benchmarks/canary_cost.py [--blocks 10] [--bench-runs 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import BIN, Serve, UntilStopped, http_ok, start_serve, wait_for  # noqa: E402  (the tests' way to start a serve)

ARMS = ("off", "watch", "round")
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20, 12: 2.18,
       13: 2.16, 14: 2.14, 15: 2.13}
"""Student's t at 97.5 % by degrees of freedom (blocks - 1)."""


def bench(serve_url: str, exporter: str, profile: str, out: Path, runs: int, env: dict[str, str]) -> dict[str, float]:
    cmd = [str(BIN / "appliance"), "gate", "--url", serve_url, "--exporter", exporter, "--profile", profile,
           "--checks", "bench", "--bench-runs", str(runs), "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    receipt = json.loads((out / "receipt.json").read_text())
    rows = next(c for c in receipt["checks"] if c["name"] == "bench")["metrics"]["rows"]
    if done.returncode != 0 or not rows:
        raise SystemExit(f"gate bench failed ({done.returncode}): {done.stderr[-2000:]}")
    return {row["test"]: float(row["t_s"]) for row in rows if row["t_s"]}


def canary_counts(exporter: str) -> dict[str, int]:
    return httpx.get(f"{exporter}/status", timeout=5).json()["canary"]["rounds_total"]


class RoundsBackToBack(UntilStopped):
    """Canary rounds, one after another, from this process until stopped: the `round` arm's load."""

    def __init__(self, url: str, plan: object) -> None:
        super().__init__(self._one, join_s=600)
        self.url, self.plan = url, plan
        self.seconds: list[float] = []
        self.verdicts: list[bool] = []

    def _one(self) -> None:
        from appliance.canary.session import one_round

        result = asyncio.run(one_round(self.url, model=None, plan=self.plan, calibration_path=None,  # type: ignore[arg-type]
                                       timeout=300))
        self.seconds.append(result.seconds)
        self.verdicts.append(result.healthy)


def look_seconds(url: str, looks: int = 40) -> float:
    """The median wall time of one of the watch's looks at the engine (appliance/canary/traffic.py)."""
    from appliance.health.engine import EngineProbe

    probe = EngineProbe(url, timeout=5)
    times = []
    try:
        for _ in range(looks):
            began = time.perf_counter()
            probe.sample()
            times.append(time.perf_counter() - began)
            time.sleep(0.05)
    finally:
        probe.close()
    return statistics.median(times)


def watch_cpu(serve: Serve) -> float:
    """CPU seconds (user + system) the canary's watch process has used so far."""
    fields = Path(f"/proc/{serve.program_pid('canary')}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def paired(arms: dict[str, list[dict[str, float]]], arm: str, test: str) -> tuple[float, float]:
    """Mean over blocks of (off - arm) / off, and the half-width of its 95 % confidence interval."""
    costs = [(off[test] - other[test]) / off[test] for off, other in zip(arms["off"], arms[arm], strict=True)]
    t = T95.get(len(costs) - 1, 2.0)  # past 15 degrees of freedom t is within 2.13..1.96
    half = t * statistics.stdev(costs) / math.sqrt(len(costs)) if len(costs) > 1 else math.inf
    return statistics.mean(costs), half


def settle(exporter: str) -> None:
    """A (re)started watch runs its first round at once: wait for it, so the arm sees the schedule."""
    def judged() -> int:
        counts = canary_counts(exporter)
        return sum(counts[k] for k in ("healthy", "corruption", "error"))

    before = judged()
    wait_for(lambda: judged() > before, 300, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-smoke-canary")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--bench-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from appliance.canary.session import plan_for
    from appliance.profile.loader import load_profile
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    profile = load_profile(args.profile).profile
    canary = profile.canary
    if canary is None:
        raise SystemExit(f"profile {args.profile} has no canary section")
    plan = plan_for(canary, profile.server.reasoning_parser)
    work = Path(tempfile.mkdtemp(prefix="canary-cost-"))
    serve = start_serve(work / "run", prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT)), profile=args.profile)
    arms: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    watch_rounds = {"healthy": 0, "corruption": 0, "error": 0, "deferred": 0}
    round_seconds: list[float] = []
    round_healthy: list[bool] = []
    arm_seconds: list[float] = []
    watch_cpu_s = 0.0
    began = time.monotonic()
    try:
        if not wait_for(lambda: http_ok(f"{serve.url}/health"), timeout=400, interval=2):
            raise SystemExit(f"serve did not start:\n{serve.output.read_text()[-3000:]}")
        wait_for(lambda: http_ok(f"{serve.exporter}/ready"), timeout=300, interval=2)
        serve.ctl("stop", "canary")
        look_s = look_seconds(serve.url)
        for block in range(args.blocks):
            order = ARMS[block % 3:] + ARMS[:block % 3]
            for arm in order:
                serve.ctl("start" if arm == "watch" else "stop", "canary")
                time.sleep(2)
                out = work / f"b{block}-{arm}"
                if arm == "watch":
                    settle(serve.exporter)
                    before, cpu_before, wall = canary_counts(serve.exporter), watch_cpu(serve), time.monotonic()
                    result = bench(serve.url, serve.exporter, args.profile, out, args.bench_runs, serve.env)
                    arm_seconds.append(time.monotonic() - wall)
                    watch_cpu_s += watch_cpu(serve) - cpu_before
                    after = canary_counts(serve.exporter)
                    for k in watch_rounds:
                        watch_rounds[k] += after.get(k, 0) - before.get(k, 0)
                elif arm == "round":
                    with RoundsBackToBack(serve.url, plan) as rounds:
                        result = bench(serve.url, serve.exporter, args.profile, out, args.bench_runs, serve.env)
                    round_seconds += rounds.seconds
                    round_healthy += rounds.verdicts
                else:
                    result = bench(serve.url, serve.exporter, args.profile, out, args.bench_runs, serve.env)
                arms[arm].append(result)
                print(f"block {block} {arm:5s}: " + ", ".join(f"{k} {v:.1f} t/s" for k, v in result.items()),
                      flush=True)
    finally:
        serve.stop()
    from appliance.canary.watch import POLL_S

    round_s, arm_s = statistics.median(round_seconds), statistics.median(arm_seconds)
    cycle = canary.interval_s + canary.max_defer_s + round_s
    looking = look_s / POLL_S
    figures: dict[str, object] = {
        "profile": args.profile, "blocks": args.blocks, "bench_runs": args.bench_runs,
        "minutes": round((time.monotonic() - began) / 60, 1),
        "schedule": {"interval_s": canary.interval_s, "max_defer_s": canary.max_defer_s},
        "watch_arms": {"rounds": watch_rounds, "median_s": round(arm_s, 1), "watch_cpu_s": round(watch_cpu_s, 3),
                       "watch_cpu_percent_of_arms": round(watch_cpu_s / sum(arm_seconds) * 100, 3)},
        "rounds_under_load": {"count": len(round_seconds), "healthy": sum(round_healthy),
                              "median_s": round(round_s, 1), "max_s": round(max(round_seconds), 1)},
        "cycle_s": round(cycle, 1),
        "look_ms": round(look_s * 1000, 2), "poll_s": POLL_S, "looking_percent": round(looking * 100, 3),
    }
    print(f"rounds under load: {len(round_seconds)} ({sum(round_healthy)} healthy), median {round_s:.1f} s; one per "
          f"{cycle:.0f} s under traffic that never stops; a look {look_s * 1000:.1f} ms every {POLL_S:g} s; the watch "
          f"used {watch_cpu_s:.2f} CPU-s over {sum(arm_seconds):.0f} s of watch arms ({watch_rounds})")
    for test in sorted(arms["off"][0]):
        after, after_ci = paired(arms, "watch", test)
        overlap, overlap_ci = paired(arms, "round", test)
        at_schedule = looking + (overlap * round_s + after * arm_s) / cycle
        pessimistic = looking + after + overlap * round_s / cycle
        figures[test] = {"off_median_t_s": round(statistics.median(r[test] for r in arms["off"]), 2),
                         "after_round_percent": [round(after * 100, 2), round(after_ci * 100, 2)],
                         "overlap_percent": [round(overlap * 100, 2), round(overlap_ci * 100, 2)],
                         "cost_at_schedule_percent": round(at_schedule * 100, 2),
                         "pessimistic_percent": round(pessimistic * 100, 2)}
        print(f"{test}: after a round {after * 100:+.2f} ± {after_ci * 100:.2f} %, overlapping {overlap * 100:+.2f} ± "
              f"{overlap_ci * 100:.2f} %, looking {looking * 100:+.2f} %: at the schedule {at_schedule * 100:+.2f} % "
              f"(pessimistic {pessimistic * 100:+.2f} %)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
