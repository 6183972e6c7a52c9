"""Supervisor event listener: reap a dead engine's process group, and stop the whole serve when
the engine cannot stay up.

When the API server dies (SIGKILL, OOM killer) its EngineCore child is orphaned and keeps the
GPU memory the restarted engine needs. A stop does not cover it either: supervisor escalates to
the group's SIGKILL only while the API server outlives its stop timeout, and the API server
exits at once on SIGTERM, while an EngineCore still being built only notes the signal and builds
on (vLLM 0.32 `run_engine_core`: "Record the request first so it survives the construction
window"); one stopped that way was found still running, orphaned, 10 minutes later. So on every
exit and every stop of the engine this listener kills what is left of its group.

Supervisor's own start-retry limit only counts deaths within `startsecs`; an engine that dies
later while loading (a bad checkpoint, an OOM at KV allocation) would be restarted forever.
This listener gives up when the engine goes FATAL or exits `limit` times within `window`
seconds, prints why (with the log's last lines) and stops supervisord, so the container exits
instead of looping.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path

from supervisor import childutils


def tail(path: Path, lines: int = 25) -> str:
    try:  # the engine log the appliance configured: a regular file supervisor writes
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            last = fh.read().splitlines()[-lines:]
    except OSError:
        return "(no engine log)"
    from appliance.redact import clip

    # The engine's lines, echoed by the appliance: through the one redaction (vLLM's `non-default args:` line carries
    # an --api-key), escaped, each cut to a screen line's worth.
    return "\n".join(clip(line.decode(errors="replace"), 1000) for line in last)


def reap_group(pgid: int) -> None:
    """Kill the remains of the exited program's process group (supervisor made it the group leader)."""
    if pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class CrashPolicy:
    def __init__(self, limit: int, window_s: float) -> None:
        self.limit, self.window_s = limit, window_s
        self.exits: deque[float] = deque()

    def record_exit(self, now: float) -> bool:
        """True when this exit makes the crash loop: `limit` exits inside the window."""
        self.exits.append(now)
        while self.exits and now - self.exits[0] > self.window_s:
            self.exits.popleft()
        return len(self.exits) >= self.limit


def give_up(reason: str, log: Path, pidfile: Path) -> None:
    print(f"appliance: the engine cannot stay up: {reason}. Stopping the serve instead of restarting it "
          f"forever.\n--- last lines of {log} ---\n{tail(log)}\n---", file=sys.stderr, flush=True)
    from appliance.errors import ApplianceError
    from appliance.paths import read_capped

    try:  # a regular file of a few bytes, opened without blocking: a FIFO there must not hold the guard
        pid = int(read_capped(pidfile, "pidfile", 64, "supervisord pidfile").decode("ascii").strip())
        os.kill(pid, signal.SIGTERM)
    except ApplianceError as exc:
        print(f"appliance: could not signal supervisord: {exc.message}", file=sys.stderr, flush=True)
    except (OSError, ValueError) as exc:
        print(f"appliance: could not signal supervisord: {exc}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", required=True)
    ap.add_argument("--limit", type=int, required=True)
    ap.add_argument("--window", type=float, required=True)
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--pidfile", type=Path, required=True)
    args = ap.parse_args(argv)
    policy = CrashPolicy(args.limit, args.window)
    while True:
        headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
        fields, _ = childutils.eventdata(payload + "\n")
        if fields.get("processname") == args.program:
            event = headers.get("eventname")
            if event in ("PROCESS_STATE_EXITED", "PROCESS_STATE_STOPPED"):
                reap_group(int(fields.get("pid", "0")))
            if event == "PROCESS_STATE_FATAL":
                give_up(f"{args.program} kept dying within seconds of starting (its start retries are spent)",
                        args.log, args.pidfile)
            elif event == "PROCESS_STATE_EXITED" and policy.record_exit(time.monotonic()):
                give_up(f"{args.program} exited {args.limit} times within {args.window:.0f} s", args.log,
                        args.pidfile)
        childutils.listener.ok(sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
