"""One switch at a time per profile: `upgrade promote` and `upgrade rollback` hold an exclusive lock on
`APPLIANCE_HOME/locks/upgrade-<profile>.lock` for their whole run (outside `upgrades/`, where every folder is a
profile's history). Two switches at once would each stop and start the engine and write `active.json` over the
other, so the serve would end on whichever wrote last, with a record that says otherwise.

The lock is the kernel's (flock on an open descriptor): it ends with the process that holds it, however that process
ends, so a killed promote never leaves a stale lock behind. The file itself only says who holds it, for the refusal.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.jsonstrict import loads

MAX_HOLDER_BYTES = 1024
"""The holder's note is one short JSON line; more is never read."""


def _holder(fd: int) -> str:
    """Who holds the lock, from the note it wrote: `promote (pid 123, since …)`; `another switch` when the note is
    unreadable or not ours (nothing from the file reaches the terminal unchecked)."""
    import re

    try:
        note = loads(os.pread(fd, MAX_HOLDER_BYTES, 0), "the switch lock's note")
        action, pid, since = note["action"], int(note["pid"]), str(note["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another switch"
    if action not in ("promote", "rollback") or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", since):
        return "another switch"
    return f"{action} (pid {pid}, since {since})"


def lock_path(profile: str, home: Path | None = None) -> Path:
    from appliance.paths import appliance_home

    return (home or appliance_home()) / "locks" / f"upgrade-{profile}.lock"


def holder_now(profile: str, home: Path | None = None) -> str | None:
    """Who is switching the profile's serve now (`promote (pid 123, since …)`), or None: nobody holds its lock.
    Creates nothing; the shared lock it tries is dropped at once (a switch starting in that instant is refused
    and says to run again)."""
    try:
        fd = os.open(lock_path(profile, home), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:  # no lock file (never switched), or something we never made there: no switch holds it
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


@contextlib.contextmanager
def one_switch(profile: str, action: str, home: Path | None = None) -> Iterator[None]:
    """Hold the profile's switch lock while the body runs; a second holder is exit 2 naming the first."""
    from appliance.paths import make_dir
    from appliance.upgrade.history import utc_now

    path = lock_path(profile, home)
    make_dir(path.parent, "APPLIANCE_HOME")  # a file in the way, a read-only home: exit 2 naming it
    try:  # O_NOFOLLOW: a link planted at the lock's name is refused, never followed to truncate its target
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise ApplianceError(f"upgrade {action} {profile}: cannot open its switch lock {path}: {exc.strerror}",
                             field=f"upgrade {action}", value=str(path),
                             fix=f"remove whatever stands at {path} (the lock is a plain file the appliance makes)",
                             reason="promote and rollback take this lock so that two never switch one serve at once"
                             ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ApplianceError(
                f"upgrade {action} {profile}: {_holder(fd)} is switching this serve now", field=f"upgrade {action}",
                value=profile, fix="wait until it has finished (`appliance upgrade status` shows its outcome), then "
                "run this again",
                reason="two switches at once would each restart the engine and write active.json over the other"
                ) from None
        note = json.dumps({"action": action, "pid": os.getpid(), "since": utc_now()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
