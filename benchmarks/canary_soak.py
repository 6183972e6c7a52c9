"""Canary soak: healthy serving under load for a while, with the canary running; any finding is a false alarm.

One `appliance run PROFILE` (default cpu-smoke-canary, the real vLLM CPU engine, no corruption
injected). A load generator keeps `--clients` concurrent requests going (chat and completions,
streamed and not, sampled and greedy, short and long prompts) for `--minutes`; the canary runs every
`--interval` s and, with `--max-defer` no larger than the interval, does not wait for the load to stop.
At the end: rounds by result, failures by signature, the exporter's states seen (sampled each 2 s),
load requests done and failed. Exit 0 when no round found corruption and the serve never left `ready`.

    .venv/bin/python benchmarks/canary_soak.py [--minutes 30] [--clients 2] [--interval 60] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import http_ok, start_serve, wait_for  # noqa: E402  (the tests' way to start a serve)

PROMPTS = ["Tell me about the history of bread.", "Write a poem about the sea.", "Explain how a bicycle works.",
           "List five fruits and their colours.", "What should I pack for a weekend hike?"]


async def load(url: str, model: str, stop_at: float, counts: collections.Counter[str], seed: int) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        while time.monotonic() < stop_at:
            chat = rng.random() < 0.5
            text = rng.choice(PROMPTS) + (" " + rng.choice(PROMPTS)) * rng.randint(0, 20)
            body: dict[str, object] = {"model": model, "max_tokens": rng.choice([16, 64, 128]),
                                       "temperature": rng.choice([0, 0.7, 1.0]), "stream": rng.random() < 0.5}
            if chat:
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            path = "/v1/chat/completions" if chat else "/v1/completions"
            try:
                if body["stream"]:
                    async with client.stream("POST", path, json=body) as reply:
                        async for _ in reply.aiter_lines():
                            pass
                        ok = reply.status_code == 200
                else:
                    ok = (await client.post(path, json=body)).status_code == 200
            except httpx.HTTPError:
                ok = False
            counts["ok" if ok else "failed"] += 1


async def watch_states(exporter: str, stop_at: float, states: collections.Counter[str],
                       timeline: list[tuple[float, str, str]]) -> None:
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < stop_at:
            try:
                body = (await client.get(f"{exporter}/status")).json()
                state, canary = body["state"], (body.get("canary") or {}).get("status", "-")
            except (httpx.HTTPError, ValueError):
                state, canary = "unreachable", "-"
            states[state] += 1
            if not timeline or timeline[-1][1:] != (state, canary):
                timeline.append((round(time.monotonic() - t0, 1), state, canary))
            await asyncio.sleep(2)


async def soak(url: str, exporter: str, minutes: float, clients: int) -> dict[str, object]:
    stop_at = time.monotonic() + minutes * 60
    counts: collections.Counter[str] = collections.Counter()
    states: collections.Counter[str] = collections.Counter()
    timeline: list[tuple[float, str, str]] = []
    await asyncio.gather(watch_states(exporter, stop_at, states, timeline),
                         *(load(url, "smollm2", stop_at, counts, seed) for seed in range(clients)))
    return {"load_requests": dict(counts), "exporter_states_sampled": dict(states), "timeline": timeline}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-smoke-canary")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--interval", type=float, default=60)
    parser.add_argument("--max-defer", type=float, help="canary.max_defer_s (default: the interval)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    max_defer = args.interval if args.max_defer is None else args.max_defer
    work = Path(tempfile.mkdtemp(prefix="canary-soak-"))
    serve = start_serve(work / "run", prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT)),
                        f"canary.interval_s={args.interval}", f"canary.max_defer_s={max_defer}", profile=args.profile)
    try:
        if not wait_for(lambda: http_ok(f"{serve.url}/health"), timeout=400, interval=2):
            raise SystemExit(f"serve did not start:\n{serve.output.read_text()[-3000:]}")
        if not wait_for(lambda: http_ok(f"{serve.exporter}/ready"), timeout=300, interval=2):
            raise SystemExit("the exporter never said ready")
        began = time.time()
        figures = asyncio.run(soak(serve.url, serve.exporter, args.minutes, args.clients))
        canary = httpx.get(f"{serve.exporter}/status", timeout=5).json()["canary"]
    finally:
        serve.stop()
    figures |= {"minutes": round((time.time() - began) / 60, 1), "clients": args.clients,
                "interval_s": args.interval, "max_defer_s": max_defer, "rounds_total": canary["rounds_total"],
                "failures_total": canary["failures_total"], "step_downs": canary["step_downs"],
                "last_round_seconds": (canary.get("last_round") or {}).get("seconds")}
    false_alarms = sum(canary["failures_total"].values())
    left_ready = {s: n for s, n in figures["exporter_states_sampled"].items() if s != "ready"}  # type: ignore[union-attr]
    figures["false_alarm_rounds"] = canary["rounds_total"].get("corruption", 0)
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if not false_alarms and not left_ready else 1


if __name__ == "__main__":
    sys.exit(main())
