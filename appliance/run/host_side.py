"""What the host adds to the exporter: the memory watchdog's holds and state (K24), and the fabric
qualification this node passed before launch (K25), as /status sections and metrics."""

from __future__ import annotations

import threading
from pathlib import Path

from prometheus_client import CollectorRegistry

from appliance.errors import ApplianceError
from appliance.hostmem.watchdog import Watchdog
from appliance.jsonstrict import JsonObject
from appliance.multinode.fabric_report import FabricReport
from appliance.profile.model import Profile
from appliance.settings import ApplianceSettings

MAX_REPORT_BYTES = 1 << 20


class HostSide:
    def __init__(self, watchdog: Watchdog | None, fabric: FabricReport | None) -> None:
        self.watchdog, self.fabric = watchdog, fabric

    def holds(self) -> list[str]:
        return self.watchdog.state.holds if self.watchdog else []

    def sections(self) -> JsonObject:
        return {"memory": self.watchdog.state.to_json() if self.watchdog else None,
                "fabric": self.fabric.to_json() if self.fabric else None}

    def register(self, registry: CollectorRegistry) -> None:
        from appliance.hostmem.metrics import WatchdogCollector
        from appliance.multinode.fabric_metrics import FabricCollector

        if self.watchdog:
            watchdog = self.watchdog
            registry.register(WatchdogCollector(lambda: watchdog.state))
        if self.fabric:
            registry.register(FabricCollector(self.fabric))

    def start(self, stop: threading.Event, interval: float) -> threading.Thread | None:
        if not self.watchdog:
            return None
        thread = threading.Thread(target=self.watchdog.run, args=(stop, interval), name="memory-watchdog",
                                  daemon=True)
        thread.start()
        return thread


def read_fabric_report(path: Path) -> FabricReport:
    """A fabric report written by hand-run tooling (`python -m appliance.multinode.fabric here`'s JSON line), for
    `appliance exporter --fabric-report`; `appliance run` hands its own over in launch.json. Read strictly
    (appliance/jsonstrict.py: no FIFO, no duplicate key, bounded depth and size)."""
    from appliance.jsonstrict import load_file
    from appliance.redact import clip

    data = load_file(path, "--fabric-report", MAX_REPORT_BYTES, "fabric qualification report")
    try:
        return FabricReport.from_json(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ApplianceError(f"{clip(str(path), 200)} is not a fabric qualification report: {clip(str(exc), 200)}",
                             field="--fabric-report", value=clip(str(path), 200),
                             fix="pass a report of `python -m appliance.multinode.fabric here`, or leave the flag "
                                 "out") from None


def host_side_for(profile: Profile, settings: ApplianceSettings, engine_program: str,
                  fabric: FabricReport | None) -> HostSide:
    """The memory watchdog (K24; the same readers as doctor, APPLIANCE_PROCFS / APPLIANCE_KMSG) and the fabric
    report (K25). It stops the engine only under supervisord; run alone it reports what it would do."""
    from appliance.hostmem.sources import KernelLog, load_kernel_checks
    from appliance.hostmem.watchdog import SupervisorControl

    watchdog = None
    if profile.memory.watchdog != "off":
        watchdog = Watchdog(profile.memory, load_kernel_checks(), procfs=settings.procfs,
                            kernel=KernelLog(settings.kmsg), control=SupervisorControl.from_env(engine_program))
    return HostSide(watchdog, fabric)
