"""A live line per check on stderr: rewritten in place on a terminal, one line per event in a log."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from appliance.gate.result import CheckResult
from appliance.redact import clip

_MARK = {"pass": "ok", "fail": "FAIL", "error": "ERROR", "not_applicable": "n/a", "unavailable": "unavailable",
         "interrupted": "interrupted"}


class Progress:
    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self._began = 0.0
        self._prefix = ""

    def begin(self, check: str, index: int, total: int) -> None:
        self._began = self.clock()
        self._prefix = f"[gate {index}/{total}] {check}"
        self._emit(f"{self._prefix} ...", final=not self.live)

    def step(self, text: str) -> None:
        self._emit(f"{self._prefix} ({self.clock() - self._began:.0f} s) {text}", final=not self.live)

    def end(self, result: CheckResult) -> None:
        mark = _MARK.get(result.status, result.status)
        self._emit(f"{self._prefix}: {mark} in {result.seconds:.0f} s: {result.summary}", final=True)

    def note(self, text: str) -> None:
        self._emit(f"[gate] {text}", final=True)

    def _emit(self, line: str, *, final: bool) -> None:
        line = clip(line, 2000)  # summaries carry a serve's text: masked, escaped, one line
        if self.live:
            self.stream.write("\r\x1b[2K" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class Quiet(Progress):
    """For library callers and tests that want no output."""

    def _emit(self, line: str, *, final: bool) -> None:
        return None
