"""supervisord, without its idle first second: what `appliance run` execs (`python -m appliance.run.supervisord_boot
-n -c CONF`, the arguments supervisord takes).

supervisor's main loop (supervisord.py, `Supervisor.runforever`, supervisor 4.2-4.3) polls its sockets with a 1 s
timeout and only then lets each process group start its programs, so every serve's engine began ~1 s after
supervisord did, with nothing to wait for (issue 38, P4: most of what `appliance run` cost over a bare `vllm serve`
that its own steps did not). Here the first poll of each poller returns at once; every later poll, and everything
else supervisord does, is supervisor's own. The process is named `supervisord`, as `ps` and operators know it.
tests/test_supervisord_boot.py holds the installed supervisor's loop to the shape this relies on.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from typing import Any

PR_SET_NAME = 15
"""prctl(2): the calling thread's name, what `ps -o comm` and /proc/PID/comm show (16 bytes with the NUL)."""


def first_poll_at_once(poller_class: type) -> None:
    """Each poller's first `poll(timeout)` does not wait; later ones wait as supervisor asks."""
    original = poller_class.poll

    def poll(self: Any, timeout: float) -> Any:
        if not getattr(self, "_appliance_polled", False):
            self._appliance_polled = True
            timeout = 0
        return original(self, timeout)

    poller_class.poll = poll


def _name_process(name: bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the name is cosmetic
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def main(argv: list[str] | None = None) -> None:
    from supervisor import poller, supervisord

    first_poll_at_once(poller.Poller)
    _name_process(b"supervisord")
    sys.argv[0] = "supervisord"  # its messages name the program as supervisord's own do
    supervisord.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
