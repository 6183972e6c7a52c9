"""SIGTERM ends a command the way Ctrl-C does, so that its cleanup runs.

Python's default SIGTERM ends the process at once: no `finally`, no context exit. `docker stop`, `kill`, systemd
and a timeout all send SIGTERM first; a gate would lose its partial receipt, a qualify its candidate serve and the
incumbent's window restart."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside: SIGTERM raises KeyboardInterrupt (the CLI's exit 130). Outside: the handler there before."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
