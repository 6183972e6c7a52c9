"""What the host adds to the exporter: the memory watchdog's holds and state (K24), and the fabric
qualification this node passed before launch (K25), as /status sections and metrics."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from appliance.errors import ApplianceError
from appliance.hostmem.watchdog import Watchdog
from appliance.profile.model import Profile
from appliance.settings import ApplianceSettings


class HostSide:
    def __init__(self, watchdog: Watchdog | None, fabric: dict[str, Any] | None) -> None:
        self.watchdog, self.fabric = watchdog, fabric

    def holds(self) -> list[str]:
        return self.watchdog.state.holds if self.watchdog else []

    def sections(self) -> dict[str, Any]:
        return {"memory": self.watchdog.state.to_json() if self.watchdog else None, "fabric": self.fabric}

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


def read_fabric_report(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from appliance.jsonstrict import load_file

    data = load_file(path, "--fabric-report", 4 << 20, "fabric qualification report")
    if not isinstance(data, dict):
        raise ApplianceError(f"{path} is not a fabric qualification report", field="--fabric-report", value=str(path))
    return data


def host_side_for(profile: Profile, settings: ApplianceSettings, engine_program: str,
                  fabric_report: Path | None) -> HostSide:
    """The memory watchdog (K24; the same readers as doctor, APPLIANCE_PROCFS / APPLIANCE_KMSG) and the fabric
    report (K25). It stops the engine only under supervisord; run alone it reports what it would do."""
    from appliance.hostmem.sources import KernelLog, load_kernel_checks
    from appliance.hostmem.watchdog import SupervisorControl

    watchdog = None
    if profile.memory.watchdog != "off":
        watchdog = Watchdog(profile.memory, load_kernel_checks(), procfs=settings.procfs,
                            kernel=KernelLog(settings.kmsg), control=SupervisorControl.from_env(engine_program))
    return HostSide(watchdog, read_fabric_report(fabric_report))
