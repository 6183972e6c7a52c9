"""Canary cost: serving throughput with the canary on vs off, in the same serve, through the gate's bench.

One `appliance run PROFILE` (default cpu-smoke-canary, the real vLLM CPU engine) serves throughout.
Blocks alternate their order of two arms: `on` (the canary's supervisord program running) and `off`
(`supervisorctl stop canary`); each arm is one `appliance gate --checks bench` (llama-benchy). Cost =
(off - on) / off of the median tg and pp t/s. The canary's own counts over the `on` arms show what
it did: rounds run, rounds deferred to traffic.

    .venv/bin/python benchmarks/canary_cost.py [--blocks 3] [--bench-runs 3] [--interval 300] [--max-defer 900]

A (re)started watch runs its first round at once, so each `on` arm first waits for that round to end
and then measures the schedule (interval 300 s, yielding to traffic). `--no-settle` starts the arm at
once instead: the bench then overlaps a round, which measures what one round costs under load; the
cost at a schedule is that times round duration / interval. Target: <= 2 % at the default schedule.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import BIN, http_ok, start_serve, wait_for  # noqa: E402  (the tests' way to start a serve)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-smoke-canary")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--bench-runs", type=int, default=3)
    parser.add_argument("--interval", type=float, help="canary.interval_s (default: the profile's)")
    parser.add_argument("--max-defer", type=float, help="canary.max_defer_s (default: the profile's)")
    parser.add_argument("--no-settle", dest="settle", action="store_false",
                        help="start each `on` arm right after starting the watch, i.e. overlapping its first round "
                             "(the cost of a round under load)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    sets = [f"canary.interval_s={args.interval}"] if args.interval else []
    sets += [f"canary.max_defer_s={args.max_defer}"] if args.max_defer is not None else []
    work = Path(tempfile.mkdtemp(prefix="canary-cost-"))
    serve = start_serve(work / "run", prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT)), *sets,
                        profile=args.profile)
    arms: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    rounds_on = {"healthy": 0, "corruption": 0, "error": 0, "deferred": 0}
    try:
        if not wait_for(lambda: http_ok(f"{serve.url}/health"), timeout=400, interval=2):
            raise SystemExit(f"serve did not start:\n{serve.output.read_text()[-3000:]}")
        wait_for(lambda: http_ok(f"{serve.exporter}/ready"), timeout=300, interval=2)
        for block in range(args.blocks):
            order = ("on", "off") if block % 2 == 0 else ("off", "on")
            for arm in order:
                serve.ctl("start" if arm == "on" else "stop", "canary")
                time.sleep(2)
                if arm == "on" and args.settle:  # a (re)started watch runs its first round at once: let it finish,
                    judged = sum(canary_counts(serve.exporter)[k] for k in ("healthy", "corruption", "error"))
                    wait_for(lambda j=judged: sum(canary_counts(serve.exporter)[k]  # so the arm sees the schedule
                                                  for k in ("healthy", "corruption", "error")) > j, 300, 1)
                before = canary_counts(serve.exporter) if arm == "on" else None
                result = bench(serve.url, serve.exporter, args.profile, work / f"b{block}-{arm}", args.bench_runs,
                               serve.env)
                arms[arm].append(result)
                if before is not None:
                    after = canary_counts(serve.exporter)
                    for k in rounds_on:
                        rounds_on[k] += after.get(k, 0) - before.get(k, 0)
                print(f"block {block} {arm:3s}: " + ", ".join(f"{k} {v:.1f} t/s" for k, v in result.items()),
                      flush=True)
    finally:
        serve.stop()
    figures: dict[str, object] = {"blocks": args.blocks, "bench_runs": args.bench_runs, "sets": sets,
                                  "settle": args.settle,
                                  "canary_rounds_during_on_arms": rounds_on}
    for test in sorted(arms["on"][0]):
        on = statistics.median(r[test] for r in arms["on"])
        off = statistics.median(r[test] for r in arms["off"])
        spread = max(r[test] for r in arms["off"]) - min(r[test] for r in arms["off"])
        figures[test] = {"on_t_s": round(on, 2), "off_t_s": round(off, 2),
                         "cost_percent": round((off - on) / off * 100, 2), "off_spread_t_s": round(spread, 2)}
        print(f"{test}: on {on:.2f} t/s, off {off:.2f} t/s, cost {(off - on) / off * 100:+.2f} % "
              f"(off arms spread {spread:.2f} t/s)")
    print(f"canary rounds during the on arms: {rounds_on}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
