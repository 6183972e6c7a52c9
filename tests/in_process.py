"""`appliance ARGS` in-process under a hard time limit, for the tests that feed the CLI hostile input (test_fuzz,
test_hostile_serves, test_hardening_pass2): the CLI's `main` with argv, argparse's exit caught, stdout and stderr
captured, the environment restored afterwards. SIGALRM ends a call that blocks (a FIFO opened, a trickle read), so
a regression fails its test instead of hanging the suite. In-process keeps the fuzz budget affordable."""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from appliance.cli import main


class Hang(BaseException):
    """Raised by the time limit; a BaseException so no handler in the product (the gate runs each check under
    `except Exception`, the exporter's probes report what they catch) can take it for an error it reports."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread once `seconds` have passed (one limit at a time: SIGALRM's timer is one)."""
    def _alarm(_signum: int, _frame: object) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """`values` over os.environ; afterwards os.environ as it was, whatever the command set or removed."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@dataclass(frozen=True)
class CliRun:
    returncode: int
    stdout: str
    stderr: str


def run_main(args: Sequence[str], *, env: Mapping[str, str] | None = None, limit_s: float = 30.0) -> CliRun:
    """`appliance ARGS` in-process; Hang past `limit_s`, and any exception of the CLI's own, reach the caller."""
    out, err = io.StringIO(), io.StringIO()
    with environment(env or {}), time_limit(limit_s), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code if isinstance(exc.code, int) else 2
    return CliRun(code, out.getvalue(), err.getvalue())
