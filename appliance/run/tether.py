"""A serve that ends with the program that started it, however that program ends.

`appliance upgrade qualify` starts the candidate's `appliance run` as a child in a session of its own (a Ctrl-C at
the terminal reaches qualify, which stops the candidate itself, in order). A qualify killed outright (SIGKILL, the
OOM killer, a timeout's kill) runs no cleanup: its candidate's supervisord went on serving on the candidate's ports
and cores, owned by nobody, until someone found it. So the starter names itself in APPLIANCE_TETHER_PID, and
`appliance run` asks Linux to send it SIGTERM when that parent dies (prctl PR_SET_PDEATHSIG). The request outlives
the exec into supervisord, which answers SIGTERM by stopping its programs.

Linux sends the signal when the *thread* that forked the child ends, so the starter forks from its main thread
(qualify does). A starter that died before the request was made is found by comparing the parent's pid after it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import MutableMapping

from appliance.errors import ApplianceError

TETHER_ENV = "APPLIANCE_TETHER_PID"
"""Set by the starter (its pid), read once by `appliance run` (settings.tether_pid) and taken out of the
environment before supervisord starts, so that no program of the serve inherits a pid that means nothing to it."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def tether_env() -> dict[str, str]:
    """What the starter adds to its child's environment."""
    return {TETHER_ENV: str(os.getpid())}


def tether_to(starter: int | None, environ: MutableMapping[str, str] = os.environ) -> None:
    """In `appliance run`, before anything is started: SIGTERM to this process (and, after the exec, to
    supervisord) when `starter` dies. None: no starter asked; nothing to do."""
    environ.pop(TETHER_ENV, None)
    if starter is None:
        return
    import ctypes  # here: only `run` needs it, while the upgrade commands import this module for tether_env

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        raise ApplianceError(f"this serve could not be tied to the process that started it (pid {starter}): "
                             f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}",
                             field=TETHER_ENV, value=str(starter), fix=f"unset {TETHER_ENV} to serve untied",
                             reason="a serve its starter cannot stop would outlive a killed starter")
    if os.getppid() != starter:
        raise ApplianceError(f"the process that started this serve (pid {starter}) is not its parent (the parent "
                             f"is pid {os.getppid()}): it has exited, or did not set the variable; nobody would "
                             "stop this serve",
                             field=TETHER_ENV, value=str(starter),
                             fix=f"start the serve again from its starter, or unset {TETHER_ENV} to serve untied",
                             reason="a serve whose starter is gone would run on, owned by nobody")
