"""The fuzz suite's figures: every generated input and how it ended, per area (`bundle:apply`, `kill:promote`, ...)
and per defect class of the hardening passes (issue 35: archives, special files, deep or wrong-typed records,
transaction kills; the earlier passes' areas together). A generator counts each input and each bad outcome here
before it fails the example (hypothesis then shrinks, so a failing run counts the shrinking too), so a run can
print how many inputs each class tried and what came of them: tracebacks, hangs, leaks (a secret in the output)
and writes outside (a file outside the command's targets created, changed or removed, or a special file destroyed).

Each fuzz module prints the table at its end and merges its figures into $APPLIANCE_FUZZ_REPORT (a JSON object
keyed by module; a file lock keeps two xdist workers from losing each other's part). Under xdist's `--dist load` a
module's tests run on several workers, each with its own figures: the file keeps each worker's part (`parts`) and
the module's entry is their sum, so no worker's figures replace another's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPORT_ENV = "APPLIANCE_FUZZ_REPORT"
OUTCOMES = ("inputs", "tracebacks", "hangs", "leaks", "writes_outside")
CLASSES = {  # area prefix -> class, first match wins
    "bundle:": "archives",
    "files:": "special files",
    "special:": "special files",
    "records:": "deep or wrong-typed records",
    "safetensors": "deep or wrong-typed records",
    "readers:": "deep or wrong-typed records",
    "kill:": "transaction kills",
}
EARLIER = "earlier classes (issues 11, 22)"


def class_of(area: str) -> str:
    return next((name for prefix, name in CLASSES.items() if area.startswith(prefix)), EARLIER)


@dataclass
class Outcomes:
    inputs: int = 0
    tracebacks: int = 0
    hangs: int = 0
    leaks: int = 0
    writes_outside: int = 0


@dataclass
class Figures:
    per_area: dict[str, Outcomes] = field(default_factory=dict)
    slowest_s: float = 0.0
    slowest: str = ""
    exits: dict[str, int] = field(default_factory=dict)
    """How the CLI examples ended, per area ("render:0"): the generators must reach the accepting paths too."""

    def _area(self, area: str) -> Outcomes:
        return self.per_area.setdefault(area, Outcomes())

    def count(self, area: str) -> None:
        """One input tried in `area`."""
        self._area(area).inputs += 1

    def exited(self, area: str, code: int) -> None:
        self.exits[f"{area}:{code}"] = self.exits.get(f"{area}:{code}", 0) + 1

    def took(self, seconds: float, what: str) -> None:
        if seconds > self.slowest_s:
            self.slowest_s, self.slowest = seconds, what

    def traceback(self, area: str, what: str) -> NoReturn:
        self._area(area).tracebacks += 1
        pytest.fail(f"traceback: {what}")

    def hang(self, area: str, what: str) -> NoReturn:
        self._area(area).hangs += 1
        pytest.fail(f"hang: {what}")

    def leak(self, area: str, what: str) -> NoReturn:
        self._area(area).leaks += 1
        pytest.fail(f"leak: {what}")

    def outside(self, area: str, what: str) -> NoReturn:
        self._area(area).writes_outside += 1
        pytest.fail(f"write outside: {what}")

    def total(self, name: str) -> int:
        return sum(getattr(o, name) for o in self.per_area.values())

    def per_class(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for area, o in sorted(self.per_area.items()):
            row = out.setdefault(class_of(area), dict.fromkeys(OUTCOMES, 0))
            for name in OUTCOMES:
                row[name] += getattr(o, name)
        return out

    def to_json(self) -> dict[str, Any]:
        return {**{name: self.total(name) for name in OUTCOMES}, "slowest_s": round(self.slowest_s, 3),
                "slowest": self.slowest, "per_class": self.per_class(),
                "per_area": {a: asdict(o) for a, o in sorted(self.per_area.items())}, "exits": self.exits}

    def table(self) -> str:
        head = f"{'class':<32}" + "".join(f"{name:>15}" for name in OUTCOMES)
        rows = [f"{cls:<32}" + "".join(f"{row[name]:>15,}" for name in OUTCOMES)
                for cls, row in sorted(self.per_class().items())]
        return "\n".join([head, *rows])


def report(figures: Figures, module: str, request: pytest.FixtureRequest) -> None:
    """The table on the terminal (past pytest's capture) and the figures merged into $APPLIANCE_FUZZ_REPORT."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(f"\nfuzz figures of {module}:\n{figures.table()}\n{json.dumps(figures.to_json())}")
    target = os.environ.get(REPORT_ENV)
    if target:
        merge(Path(target), module, figures.to_json())


def this_part() -> str:
    """This process's part of a run: xdist's run id (one per `pytest` call) and worker; one process's own pid."""
    return f"{os.environ.get('PYTEST_XDIST_TESTRUNUID', f'pid{os.getpid()}')}/" \
           f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def combined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one module from its workers' parts: every count added, the slowest input of them all."""
    total = Figures()
    for part in parts:
        for area, row in part["per_area"].items():
            outcomes = total._area(area)
            for name in OUTCOMES:
                setattr(outcomes, name, getattr(outcomes, name) + row[name])
        for key, n in part["exits"].items():
            total.exits[key] = total.exits.get(key, 0) + n
        if part["slowest_s"] > total.slowest_s:
            total.slowest_s, total.slowest = part["slowest_s"], part["slowest"]
    return total.to_json()


def merge(path: Path, module: str, figures: dict[str, Any], part: str | None = None) -> None:
    """`figures` as this worker's part of `module`: parts of the same run add up, a later run's replace them."""
    part = part or this_part()
    run = part.split("/")[0]
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            known = json.loads(path.read_text()) if path.is_file() else {}
        except ValueError:
            known = {}
        known = known if isinstance(known, dict) else {}
        parts = known.get("parts") if isinstance(known.get("parts"), dict) else {}
        mine = {k: v for k, v in (parts.get(module) or {}).items() if k.split("/")[0] == run}
        mine[part] = figures
        parts[module] = mine
        known["parts"], known[module] = parts, combined(list(mine.values()))
        path.write_text(json.dumps(known, indent=1) + "\n")
