"""Ports for tests that start servers: below the kernel's ephemeral range, reserved across processes.

Why not bind(0)-and-close: that port lies in the ephemeral range, where the kernel also picks the source
port of every outgoing connection (and every other test's bind(0)); between the test closing it and the
engine binding it, either can take it. And a serve listens on more than the port it is given: the
rendezvous on master port + 1, the fabric qualification on + 2 and the model sync on + 3 (appliance/bounds.py),
which nothing reserved. Seen from a fresh clone: rank 0 "cannot listen on rendezvous port 39788: Address already
in use".

So a test port
- comes from FLOOR..CEILING, below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), where the
  kernel never puts a connection's source port, and below torch's default master port 29500;
- is reserved with all the ports derived from it by an flock on one file per port in LOCK_DIR, which every
  test process on the machine shares (other worktrees, CI); the lock dies with its process, so a killed
  run leaves nothing held;
- is handed out only if nothing is bound to it now, and never twice in one process (a rank of an earlier
  test still retrying must not meet a later test's ranks);
- stays reserved until the fixture or test that asked for it ends (conftest.py ties each reservation to
  it), so it is still held when the engine binds.
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from appliance.bounds import MODEL_SYNC_PORT_OFFSET, QUALIFY_PORT_OFFSET, RENDEZVOUS_PORT_OFFSET

LOCK_DIR = Path("/tmp/appliance-test-ports")
FLOOR, CEILING = 20000, 29000
MASTER_SPAN = 1 + max(RENDEZVOUS_PORT_OFFSET, QUALIFY_PORT_OFFSET, MODEL_SYNC_PORT_OFFSET)
"""A master port and the ports a serve derives from it."""
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL) -> tuple[int, int]:
    low, high = path.read_text().split()
    return int(low), int(high)


def candidate_range(path: Path = EPHEMERAL) -> range:
    top = min(CEILING, ephemeral_range(path)[0])
    if top - FLOOR < 256:
        raise RuntimeError(f"the kernel's ephemeral ports start at {top} ({path}): no room below them for test "
                           f"ports ({FLOOR}-{CEILING}); raise the range's start "
                           f"(sysctl net.ipv4.ip_local_port_range='32768 60999')")
    return range(FLOOR, top)


class Reservation:
    def __init__(self, ports: list[int], files: list[IO[str]]) -> None:
        self.ports, self._files = ports, files

    def release(self) -> None:
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()  # closing the file drops its flock
        self._files = []


_owners: list[list[Reservation]] = [[]]
"""A stack of frames, one per fixture setup or test call in progress; the bottom one lives as long as the
process (ports taken outside any fixture or test)."""
_handed: set[int] = set()


def _lock(port: int) -> IO[str] | None:
    LOCK_DIR.mkdir(exist_ok=True)
    f = (LOCK_DIR / str(port)).open("a")  # never deleted: unlinking a locked file would let two holders in
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def handed_out(port: int) -> bool:
    """Whether this process has handed the port out already (it never will again, even once released)."""
    return port in _handed


def bindable(port: int) -> bool:
    """Nothing bound to the port on any IPv4 address (no SO_REUSEADDR: a TIME_WAIT remnant counts too)."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def reserve(span: int = 1, candidates: Iterable[int] | None = None) -> int:
    """The first of `span` consecutive free ports, all reserved until the current fixture or test ends."""
    pool = list(candidates if candidates is not None else candidate_range())
    start = random.randrange(len(pool)) if pool else 0  # processes that start together rarely contend
    for base in pool[start:] + pool[:start]:
        block = list(range(base, base + span))
        if _handed.intersection(block) or block[-1] > 65535:
            continue
        files: list[IO[str]] = []
        for port in block:
            f = _lock(port)
            if f is None or not bindable(port):
                if f is not None:
                    f.close()
                break
            files.append(f)
        else:
            _handed.update(block)
            _owners[-1].append(Reservation(block, files))
            return base
        for f in files:
            f.close()
    raise RuntimeError(f"no {span} free consecutive port(s) in {pool[0] if pool else '-'}-"
                       f"{pool[-1] if pool else '-'} that no other test process holds")


def push_owner() -> list[Reservation]:
    """A new frame for the reservations made until `pop_owner`; returned to release them later."""
    _owners.append([])
    return _owners[-1]


def pop_owner() -> list[Reservation]:
    return _owners.pop() if len(_owners) > 1 else []


def release(reservations: list[Reservation]) -> None:
    for r in reservations:
        r.release()
