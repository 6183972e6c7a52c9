"""One cpu-smoke serve for the engine tests that only read from it (tests/conftest.py `shared_serve`), and the guard
that keeps them honest.

A start of the real CPU engine costs 30-170 s on these 2 cores; the gate's and the monitoring bundle's tests only
send requests and read the exporter, so they share one serve a session. A test that kills, wedges, restarts,
upgrades or reconfigures a serve, or watches host memory, starts its own (`smoke_serve`, `start_serve`).

The guard: before and after every test whose fixtures lead to `shared_serve`, the serve's fingerprint is taken
(supervisord alive, the pid and start time of each program it runs, launch.json and supervisord.conf by digest, the
exporter's state, the engine runs it read in the log and the profile digest it judges). A test that changed it fails
loudly, and so does every later test that would read the changed serve, naming the first. A change between two tests
(a module fixture's teardown) is caught by the next test, as the fingerprint is compared with the last one taken.

With pytest-xdist a session fixture is per worker: tests/scheduling.py keeps the files that share it in one work unit,
so the serve starts once a run."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.orphans import PROC, _stat

if TYPE_CHECKING:
    from tests.conftest import Serve


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is `pid`, each with its start time (a pid and it name one process)."""
    found = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and int(fields[1]) == pid:
            found[int(entry.name)] = fields[19]
    return found


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def fingerprint(serve: Serve) -> dict[str, Any]:
    """What a test that only reads leaves as it was (the module docstring)."""
    alive = serve.proc.poll() is None
    try:  # urllib: loopback HTTP needs no TLS context, which httpx builds for every call
        with urllib.request.urlopen(f"{serve.exporter}/status", timeout=10) as answer:
            status = json.load(answer)
        exporter = {"state": status["state"], "engine runs": status["log"]["runs"],
                    "profile": status["profile"]["digest"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        exporter = {"unreadable": type(exc).__name__}
    return {"supervisord": serve.proc.pid if alive else "gone",
            "programs": _children(serve.proc.pid) if alive else {},
            "launch.json": _digest(serve.run_dir / "launch.json"),
            "supervisord.conf": _digest(serve.run_dir / "supervisord.conf"), **exporter}


@dataclass
class SharedServe:
    serve: Serve
    statuses: list[dict[str, Any]]
    """/status as polled every half second from the start until ready (tests/test_monitoring_engine.py reads it)."""
    last: dict[str, Any] = field(default_factory=dict)
    last_seen: str = "when it turned ready"
    changed: str | None = None
    """Why the serve may no longer be shared: the first change seen, and where."""

    def check(self, moment: str) -> None:
        """Fails the test (pytest.fail) when the serve is not as last seen; `moment` says where this check stands."""
        if self.changed:
            pytest.fail(f"the shared serve cannot be read {moment}: {self.changed}", pytrace=False)
        now = fingerprint(self.serve)
        if not self.last:
            self.last = now
        deadline = time.monotonic() + SETTLE_S
        while _settling(self.last, now) and time.monotonic() < deadline:
            time.sleep(1)
            now = fingerprint(self.serve)
        if diff := {k: (self.last.get(k), now.get(k)) for k in sorted(_differ(self.last, now))}:
            self.changed = (f"it changed between {self.last_seen} and {moment} (was -> is: {diff}). A test that kills, "
                            "wedges, restarts or reconfigures a serve starts its own (smoke_serve, start_serve), "
                            "never the shared one (tests/shared_serve.py)")
            pytest.fail(self.changed, pytrace=False)
        self.last_seen = moment


SETTLE_S = 60.0


def _differ(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    return {k for k in {*a, *b} if a.get(k) != b.get(k)}


def _settling(last: dict[str, Any], now: dict[str, Any]) -> bool:
    """Only the exporter's state differs, or it did not answer: under load a probe that outran its timeout turns
    back within seconds, where a changed serve stays changed."""
    diff = _differ(last, now)
    return bool(diff) and (diff <= {"state"} or "unreadable" in now)
