"""Processes a killed test session left running (supervisord, vLLM, exporters): found by the session token
every child inherits in its environment, and stopped when the next session starts.

A run stopped with SIGKILL (a CI timeout, a helper's Ctrl-C twice) never reaches a fixture's teardown, and its
serves then hold memory and ports that make the next run's engine tests time out. Only processes whose own
session is gone are touched: a session still running on this machine keeps its serves."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

TOKEN_ENV = "PYTEST_APPLIANCE_SESSION"  # not APPLIANCE_*: tests strip those from a child's environment
PROC = Path("/proc")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (field 3, the state, first), or None when it is gone."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): a pid and this
    together name one process, where a pid alone may have been reused."""
    fields = _stat(pid)
    return fields[19] if fields else None


def session_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_time(pid)}"


def _alive(token: str) -> bool:
    pid, _, start = token.partition("-")
    return pid.isdigit() and _start_time(int(pid)) == start


def _token_of(pid: int) -> str | None:
    try:
        env = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for entry in env.split(b"\0"):
        if entry.startswith(TOKEN_ENV.encode() + b"="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def orphans(own: str) -> list[int]:
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        token = _token_of(int(entry.name))
        if token and token != own and not _alive(token):
            found.append(int(entry.name))
    return found


def _parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def stranded(own: str) -> list[int]:
    """This session's processes whose starter is gone (reparented to init): a serve that a killed command had
    started (a test's subprocess timeout SIGKILLs `appliance upgrade qualify`, and its candidate's supervisord runs
    on). A module's serves are all stopped by its teardown, so at a module's end any of these is a leak; left, it
    takes a core from every later test (2026-12-03: one ran 50 minutes)."""
    return [pid for pid in _tokened(own) if _parent(pid) == 1 and not _zombie(pid)]


def command(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return f"pid {pid}"


def _tokened(own: str) -> list[int]:
    return [int(e.name) for e in PROC.iterdir()
            if e.name.isdigit() and int(e.name) != os.getpid() and _token_of(int(e.name)) == own]


def reap(own: str, grace_s: float = 10.0, found: list[int] | None = None) -> list[int]:
    """SIGTERM every orphan (or the pids `found`), SIGKILL what is left after `grace_s`; the pids."""
    found = orphans(own) if found is None else found
    for pid in found:
        with _quiet():
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any((PROC / str(p)).exists() and not _zombie(p) for p in found):
        time.sleep(0.2)
    for pid in found:
        with _quiet():
            os.kill(pid, signal.SIGKILL)
    return found


def _zombie(pid: int) -> bool:
    fields = _stat(pid)
    return bool(fields) and fields[0] == "Z"


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead child of an init that does not reap stays in /proc as state Z)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def of_session(sid: int) -> list[int]:
    """Every running process of session `sid` (a serve: supervisord makes each program a group of its own there)."""
    return [int(e.name) for e in PROC.iterdir()
            if e.name.isdigit() and (f := _stat(int(e.name))) and int(f[3]) == sid and f[0] not in ("Z", "X")]


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, ProcessLookupError | PermissionError)
