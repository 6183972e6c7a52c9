"""How the suite spreads over pytest-xdist workers (scripts/test.sh: `-n 2 --dist loadfile --no-loadscope-reorder`).

Why in parallel at all: nearly all of a full run is the real CPU engine starting (three Python processes importing
vLLM one after another, single-threaded) and then waiting on a serve. Two workers keep both cores busy; one left
the second core idle and the run past CI's 90 minutes.

- A test file is one work unit, so a module's serve starts once, as in a serial run, and a file's tests keep their
  order (xdist's loadfile).
- The Docker test files are one unit (DOCKER_FILES, held to the `docker` marker at collection): they build the CPU
  image in a session fixture and share one daemon. Not xdist_group: pytest 9 keeps a node's id where xdist 3.8's
  loadgroup no longer writes the group, so its groups are silently ignored.
- The files whose tests read the session's shared cpu-smoke serve (tests/shared_serve.py) are one unit too
  (SHARED_SERVE_FILES, held to the tests that ask for `shared_serve`): a session fixture is one per worker, so split
  over two workers they would start it twice.
- The longest files go first (SECONDS, then the slow kinds by RANKS), so a long engine file never starts last
  while the other worker idles; the unit tests, many and short, come last and fill in. Both are hints: a wrong one
  costs balance, never a test.
- A test marked `serial` runs alone: it measures the host (MemAvailable), and another worker's serve starting
  beside it would move what it measures. Not the Docker tests: the other worker's module serves (and the upgrade
  story's steady client) keep running while its test waits, so a Docker test gains nothing and the run loses a
  worker for the Docker unit's length (tried 2026-12-03: 20 minutes of one worker waiting). A serial test holds
  an exclusive flock that every other test holds shared for its setup, call and teardown; a turnstile lock taken
  first makes the serial test wait only for the test in flight, never for a stream of them.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

RANKS = ("gpu_stack_install", "rehearsal", "docker", "engine")
"""Markers by how long their files run, slowest first; a file with none of them ranks after all of these."""
SECONDS = {
    "tests/test_upgrade_engine.py": 1053, "tests/test_canary_ladder_engine.py": 551, "docker": 578,
    "tests/test_canary_engine.py": 491, "tooling/tests/test_rehearsal.py": 488, "shared-serve": 589,
    "tests/test_health_engine_e2e.py": 393, "tests/test_run_engine.py": 262, "tests/test_warm_start_engine.py": 200,
    "tests/test_gemma_tp2_engine.py": 183, "tests/test_memory_watchdog_engine.py": 176,
    "tests/test_multinode_appliance_run.py": 146,
    "tests/test_promote_beside_engine.py": 240,  # two engine starts and a bridge's; 120 s alone (2026-12-06)
    "tests/test_gate_protocol_engine.py": 400,  # three gate runs on its serve; unlisted, it started last (2026-12-05)
    "tests/test_fuzz.py": 127, "tooling/tests/test_engine_facts.py": 111, "tests/test_multinode_engine.py": 103,
    # Not its warm time (seconds) but its cold one: on a fresh machine it installs every GPU channel's stack (about
    # half an hour, mostly downloads and unpacking), so it starts first, beside the upgrade story; warm, going first
    # costs nothing.
    "tooling/tests/test_channel_rehearsal.py": 1800,
}
"""Seconds per work unit in a serial run of the whole suite (a clean clone of f2e8e8a, 2026-12-03, these 2 cores;
shared-serve: its two files' sum then, each with its own serve)."""
DOCKER_FILES = ("tests/test_bundle_offline.py", "tests/test_container_engine.py")
"""The files of `docker` tests, from the root: one work unit."""
SHARED_SERVE_FILES = ("tests/test_gate_engine.py", "tests/test_monitoring_engine.py",
                      "tests/test_surge_drain_engine.py")
"""The files of the tests that read the session's shared serve (fixture `shared_serve`), from the root: one unit."""
SHARED_SERVE = "shared_serve"
LOCK_KEY = "appliance_serial_lock"
"""The workerinput key the controller hands every worker: the folder of this run's two lock files."""


def runs_alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("serial") is not None


def _rank(item: pytest.Item) -> int:
    return next((i for i, name in enumerate(RANKS) if item.get_closest_marker(name)), len(RANKS))


def _file(item: pytest.Item) -> str:
    return _file_of(item.nodeid)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def group_and_order(items: list[pytest.Item]) -> None:
    """Sorts the files slowest kind first, each file kept whole and in order; fails the collection when the files of
    `docker` tests are not DOCKER_FILES (a new one would run beside the others and rebuild the image), or those of
    the tests that read the shared serve are not SHARED_SERVE_FILES (a new one would start a second serve)."""
    rank: dict[str, int] = {}
    docker, shared = set(), set()
    for item in items:
        rank[_file(item)] = min(rank.get(_file(item), len(RANKS)), _rank(item))
        if item.get_closest_marker("docker"):
            docker.add(_file(item))
        if SHARED_SERVE in getattr(item, "fixturenames", ()):
            shared.add(_file(item))
    if docker - set(DOCKER_FILES):
        raise pytest.UsageError(f"tests/scheduling.py: {sorted(docker - set(DOCKER_FILES))} hold docker tests and are "
                                "not in DOCKER_FILES; add them, so that all Docker tests run in one xdist work unit")
    if shared - set(SHARED_SERVE_FILES):
        raise pytest.UsageError(f"tests/scheduling.py: {sorted(shared - set(SHARED_SERVE_FILES))} hold tests that "
                                "read the shared serve and are not in SHARED_SERVE_FILES; add them, so that one "
                                "xdist worker runs them all and the serve starts once")
    first_seen = {name: i for i, name in reversed(list(enumerate(_file(item) for item in items)))}
    items.sort(key=lambda item: (-SECONDS.get(_unit(_file(item)), 0), rank[_file(item)], first_seen[_file(item)]))
    _readers_in_a_row([item for item in items if _unit(_file(item)) == "shared-serve"])


def _readers_in_a_row(unit: list[pytest.Item]) -> None:
    """Fails the collection when a test that does not read the shared serve sits between two that do: the serve
    stops after the last reader of a row (tests/conftest.py), so the next reader would start it again (a 255 s start
    in a run of 2026-12-06)."""
    reads = [SHARED_SERVE in getattr(item, "fixturenames", ()) for item in unit]
    if True in reads:
        first, last = reads.index(True), len(reads) - 1 - reads[::-1].index(True)
        between = [item.nodeid for item, r in zip(unit[first:last], reads[first:last], strict=True) if not r]
        if between:
            raise pytest.UsageError(f"tests/scheduling.py: {between} do not read the shared serve and run between "
                                    "tests that do; move them before the first reader of their file, so that the "
                                    "serve starts once")


def _unit(file: str) -> str:
    return "docker" if file in DOCKER_FILES else "shared-serve" if file in SHARED_SERVE_FILES else file


class FileUnits(LoadFileScheduling):
    """loadfile, with the Docker files one unit and the shared serve's files another."""

    def _split_scope(self, nodeid: str) -> str:
        return _unit(_file_of(nodeid))


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, mode)  # blocks; closing the file drops the lock
        yield


@contextlib.contextmanager
def turn(folder: Path | None, serial: bool) -> Iterator[None]:
    """Held around one test's setup, call and teardown. `folder` is None outside xdist: one process, nothing
    beside it, no lock."""
    if folder is None:
        yield
        return
    turnstile, room = folder / "turnstile.lock", folder / "room.lock"
    if serial:
        with _flock(turnstile, fcntl.LOCK_EX), _flock(room, fcntl.LOCK_EX):
            yield
        return
    with _flock(turnstile, fcntl.LOCK_EX):
        pass  # waits while a serial test holds it, or waits for the room
    with _flock(room, fcntl.LOCK_SH):
        yield
