"""`appliance drain --url ENGINE`: before a pod stops, wait until its engine runs no request (Kubernetes preStop).

A rolling update (`appliance k8s --rollout surge`) stops the old pod once the new one is ready. The kubelet runs
this first, then sends SIGTERM. The pod leaves the Service's endpoints as it starts terminating, but the proxies learn
that only after a moment (`--settle-s`), so the engine keeps serving what still reaches it. Then the command waits
until vLLM's `num_requests_running` is 0, at most `--max-s`. A stop that came first would abort those requests: vLLM
stops in `abort` mode (its `--shutdown-timeout` is 0 by default, vllm/entrypoints/launchers/launcher.py).

Exit 0 when the engine was idle, or no longer answers (nothing left to wait for); 1 when requests still ran at the
bound (the kubelet records a FailedPreStopHook event naming it, and stops the pod anyway)."""

from __future__ import annotations

import argparse
import math
import sys
import time

from appliance.bounds import MAX_DRAIN_S
from appliance.health.exporter_args import http_url

POLL_S = 0.5


def duration(text: str) -> float:
    """Seconds: 0 up to an hour."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_DRAIN_S:
        raise argparse.ArgumentTypeError(f"{value:g} is outside 0-{MAX_DRAIN_S:g} seconds: a stop waits at most an "
                                         f"hour (the pod's termination grace period must cover it)")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", type=http_url, required=True,
                        help="the engine's base URL inside the pod, e.g. http://127.0.0.1:8000")
    parser.add_argument("--settle-s", type=duration, default=5.0,
                        help="first, keep serving this long while the Service's proxies drop the pod "
                             "(default %(default)s)")
    parser.add_argument("--max-s", type=duration, default=60.0,
                        help="then wait at most this long for the running requests to finish (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    from appliance.health.engine import wait_idle

    time.sleep(args.settle_s)
    result, _, sample = wait_idle(args.url, args.max_s, POLL_S)
    if result == "gone":
        print(f"appliance drain: the engine at {args.url} does not answer ({sample.error}): nothing to wait for",
              flush=True)
        return 0
    if result == "idle":
        print(f"appliance drain: the engine at {args.url} runs no request", flush=True)
        return 0
    running = "?" if sample.running is None else f"{sample.running:g}"
    print(f"appliance drain: {running} request(s) still running after {args.max_s:g} s; the stop aborts them (raise "
          f"--drain-s of `appliance k8s`)", file=sys.stderr, flush=True)
    return 1
