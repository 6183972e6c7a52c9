"""`appliance ARGS` in-process under a hard time limit: the CLI's `main` with argv, argparse's exit caught, stdout and
stderr captured, the environment and the working folder restored afterwards, and the product's caches
(`functools.cache`) emptied before, so a call sees its files and environment as a fresh `appliance` process would.
SIGALRM ends a call that blocks (a FIFO opened, a trickle read), so a regression fails its test instead of hanging the
suite.

What a test runs through a real process (`python -m appliance ...`) costs a Python start and the CLI's imports,
about 0.7 s of CPU each on these cores; in-process, the imports are paid once per worker. So a test runs the CLI
in-process unless what it tests is the process: an exit code through a real process, a signal, the environment it
inherits, a command that serves or execs (`run` without `--dry-run`, `exporter`), or a file descriptor (a terminal,
fd 1 closed)."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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
def environment(values: Mapping[str, str], replace: bool = False) -> Iterator[None]:
    """`values` over os.environ (`replace`: instead of it, as subprocess's `env=`); afterwards os.environ as it was,
    whatever the command set or removed."""
    saved = dict(os.environ)
    if replace:
        os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _log_warnings_to(stream: io.StringIO) -> Iterator[None]:
    """A log record of WARNING or above on `stream`, as a process with no logging set up prints it on stderr (logging's
    last resort, which never fires here: pytest's own handlers sit on the root logger)."""
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)


def fresh_caches() -> int:
    """Empties every `functools.cache` of the product's loaded modules (the data root found from $APPLIANCE_ROOT, the
    lock and facts read by path), as a new process starts without them; returns how many."""
    emptied = 0
    for name, module in list(sys.modules.items()):
        if name == "appliance" or name.startswith("appliance."):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper) and value.__module__ == name:
                    value.cache_clear()
                    emptied += 1
    return emptied


@dataclass(frozen=True)
class CliRun:
    returncode: int
    stdout: str
    stderr: str


def run_main(args: Sequence[str], *, env: Mapping[str, str] | None = None, replace_env: bool = False,
             cwd: Path | str | None = None, limit_s: float = 30.0) -> CliRun:
    """`appliance ARGS` in-process; Hang past `limit_s`, and any exception of the CLI's own, reach the caller.
    `env` goes over os.environ, or replaces it with `replace_env` (subprocess's `env=`); `cwd` is the working folder
    for the call."""
    out, err = io.StringIO(), io.StringIO()
    fresh_caches()
    try:
        with environment(env or {}, replace_env), contextlib.chdir(cwd or os.getcwd()), _log_warnings_to(err), \
                time_limit(limit_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's refusals and --help; sys.exit(TEXT) prints TEXT, as Python does
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
    finally:
        fresh_caches()  # what the call cached under its environment (its APPLIANCE_ROOT) leaves with it
    return CliRun(code, out.getvalue(), err.getvalue())
