"""Seconds per step of a switch (promote, rollback), written into its record as `steps`: where its time and its
out-of-service window go, step by step beside a bare `supervisorctl restart` (benchmarks/upgrade_downtime.py).

    prepare   checks, the candidate's engine obtained, the record begun        the incumbent serves
    switch    active.json and launch.json written                              the incumbent serves
    drain     until the engine runs and queues no request (bounded; before     the incumbent serves
              the switch, and one last look after it): the stop lands in
              an idle moment and aborts no request (upgrade/promote.py)
    restart   the engine program stopped and started again, at once, over      out of service from here
              supervisord's XML-RPC (the start returns after its startsecs)
    ready     from the start to the exporter's `ready` on the new channel      in service again
    canary    the first canary rounds                                          the serve takes traffic meanwhile
    out_of_service   from the stop's beginning to ready seen
    engine_down      the same, where a bridge served meanwhile (promote --beside, upgrade/bridge.py): the engine's
                     gap, not the serve's
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Literal

Step = Literal["prepare", "switch", "restart", "ready", "canary"]


@dataclass
class Steps:
    prepare_s: float | None = None
    switch_s: float | None = None
    drain_s: float | None = None
    restart_s: float | None = None
    ready_s: float | None = None
    canary_s: float | None = None
    out_of_service_s: float | None = None
    engine_down_s: float | None = None

    def to_json(self) -> dict[str, float]:
        return {f.name: round(v, 2) for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass
class StepClock:
    """Times named steps into `steps`; `clock` is a parameter so that tests pass a fake one."""

    steps: Steps
    clock: Callable[[], float] = time.monotonic

    @contextmanager
    def step(self, name: Step) -> Iterator[None]:
        began = self.clock()
        try:
            yield
        finally:
            setattr(self.steps, f"{name}_s", self.clock() - began)
