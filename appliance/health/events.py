"""What the exporter says in the container's output (`docker logs`, `kubectl logs`): every change of the serve's
state or of its reasons, each reason with its rule id, and while the engine starts a concise progress line every so
often (and at each new phase). Text by default; `APPLIANCE_LOG_FORMAT=json` gives one JSON object per line.

The exporter writes these to its own output; the log tail `appliance run` supervises sends that to the container's
stdout beside the engine's log (render/supervisord.py)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Literal

from appliance.health.monitor import Snapshot
from appliance.jsonstrict import JsonObject

LogFormat = Literal["text", "json"]
PROGRESS_EVERY_S = 30.0
PREFIX = "appliance: "
_RULE = re.compile(r"^(?P<rule>[A-Z][0-9]{1,3})\b")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def rule_of(reason: str) -> str | None:
    """The rule a reason names first (`K18 no engine progress ...`), `canary` for the canary's; None when none."""
    m = _RULE.match(reason)
    if m:
        return m["rule"]
    return "canary" if reason.startswith("canary:") else None


def _key(reasons: list[str]) -> tuple[str, ...]:
    """Reasons without their changing figures (seconds waited, bytes free): a new figure is no new reason."""
    return tuple(_NUMBER.sub("#", r) for r in reasons)


class EventLog:
    """Called with each snapshot; writes a line when something worth a line happened."""

    def __init__(self, write: Callable[[str], None], fmt: LogFormat = "text", every: float = PROGRESS_EVERY_S,
                 wall: Callable[[], float] = time.time) -> None:
        self.write, self.fmt, self.every, self.wall = write, fmt, every, wall
        self._state: str | None = None
        self._reasons: tuple[str, ...] = ()
        self._phase: tuple[str, bool] | None = None
        """The phase last said, and whether it had a count then (a count's first sight is worth a line)."""
        self._said_at: float | None = None
        self._runs = -1

    def __call__(self, snap: Snapshot) -> None:
        if snap.state != self._state or _key(snap.reasons) != self._reasons:
            self._emit({"event": "state", "from": self._state, "state": snap.state,
                        "reasons": [{"rule": rule_of(r), "text": r} for r in snap.reasons]},
                       self._state_line(snap))
            self._state, self._reasons = snap.state, _key(snap.reasons)
        self._progress(snap)

    def _progress(self, snap: Snapshot) -> None:
        s = snap.startup
        if s is None or s.phase is None:
            return
        if snap.runs != self._runs:  # a new engine run: its phases from the start
            self._runs, self._phase, self._said_at = snap.runs, None, None
        now = (s.phase, s.total is not None)
        if s.ready and self._phase == now:
            return  # "ready after ..." is said once per run
        due = self._said_at is None or snap.at - self._said_at >= self.every
        if now != self._phase or (due and not s.ready):
            self._emit({"event": "startup", "state": snap.state, **s.to_json()}, s.line())
            self._phase, self._said_at = now, snap.at

    def _state_line(self, snap: Snapshot) -> str:
        head = f"state {self._state} -> {snap.state}" if self._state else f"state {snap.state}"
        return head + (": " + "; ".join(snap.reasons) if snap.reasons else "")

    def _emit(self, event: JsonObject, text: str) -> None:
        if self.fmt == "json":
            self.write(json.dumps({"ts": round(self.wall(), 3), "source": "appliance-exporter", **event},
                                  separators=(",", ":")))
        else:
            self.write(PREFIX + text)
