"""What /live, /ready and /startup answer, from the monitor's latest snapshot and its age: one function, read by
the HTTP handlers and by the `appliance_ready` metric alike, so a scrape and a probe never disagree (a poll loop
that stopped is neither live nor ready, whatever its last snapshot said)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.health.monitor import Monitor
from appliance.jsonstrict import JsonObject

Verdict = tuple[bool, JsonObject]


@dataclass(frozen=True)
class Verdicts:
    monitor: Monitor
    clock: Callable[[], float]
    stale_after: float
    """A snapshot older than this means the poll loop is stuck: not live, not ready."""
    live_grace: float
    """How long `failed` may last before /live fails (time for supervisord to restart the engine)."""

    def all(self) -> dict[str, Verdict]:
        snap, now = self.monitor.snapshot, self.clock()
        fresh = now - snap.at <= self.stale_after
        stale = [] if fresh else [f"exporter poll loop stale for {now - snap.at:.0f} s"]
        failed_long = snap.state == "failed" and now - snap.since > self.live_grace
        live_reasons = stale + ([f"failed for {now - snap.since:.0f} s: {snap.reasons[0]}"] if failed_long else [])
        ready_reasons = stale + (snap.reasons if not snap.ready else [])
        return {
            "live": (not live_reasons, {"live": not live_reasons, "state": snap.state, "reasons": live_reasons}),
            "ready": (not ready_reasons,
                      {"ready": not ready_reasons, "state": snap.state, "reasons": ready_reasons}),
            "startup": (snap.started and fresh, {"started": snap.started, "state": snap.state, "reasons": stale}),
        }

    def ready(self) -> bool:
        return self.all()["ready"][0]
