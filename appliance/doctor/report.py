"""`doctor`: each check is ok / warn / fail / skip with a detail line; any fail refuses the start."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

from appliance.catalogue import GpuFacts, load_catalogue
from appliance.doctor.gpu import GpuProbe, probe_gpus
from appliance.doctor.host import (
    kernel_log_this_boot,
    mem_available_gib,
    nv_no_memory_lines,
    port_in_use,
    running_engines,
)
from appliance.profile.model import Profile

CheckStatus = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def checks_text(checks: list[Check], as_json: bool, profile: str) -> str:
    """The report as `doctor` and `run` print it: one line per check, or one JSON document."""
    if as_json:
        return json.dumps({"profile": profile, "ok": not any(c.status == "fail" for c in checks),
                           "checks": [c.as_dict() for c in checks]}, indent=2)
    return "\n".join(f"{c.status.upper():<5} {c.name:<11} {c.detail}" for c in checks)


def check_gpu(profile: Profile, target: GpuFacts, probe: GpuProbe) -> list[Check]:
    want = profile.hardware.gpus_per_node
    if target.arch == "cpu":
        seen = ", ".join(g.name for g in probe.gpus) or "none"
        return [Check("gpu", "ok", f"profile {profile.name} targets the CPU; GPUs seen: {seen}")]
    if not probe.gpus:
        return [Check("gpu", "fail", f"profile {profile.name} needs {want} {target.arch.upper()} GPU(s) "
                      f"({profile.hardware.gpu}); none found ({probe.error}). In a container, pass the GPUs "
                      f"(compose: deploy.resources.reservations.devices; docker run --gpus all)")]
    out = []
    wrong = [g for g in probe.gpus if g.compute_capability != target.compute_capability]
    if wrong:
        g = wrong[0]
        out.append(Check("gpu.arch", "fail",
                         f"GPU {g.index} is {g.name}, compute capability {g.compute_capability} ({g.sm.upper()}), "
                         f"driver {g.driver}; profile {profile.name} is built for {profile.hardware.gpu} "
                         f"({target.arch.upper()}, compute capability {target.compute_capability}): the image's "
                         f"kernels are compiled for SM120/SM121 only and the DeepSeek-V4 SM12x paths "
                         f"would not run. Choose a profile for this GPU, or run on SM12x hardware"))
    else:
        names = ", ".join(sorted({g.name for g in probe.gpus}))
        out.append(Check("gpu.arch", "ok", f"{len(probe.gpus)} x {names}, compute capability "
                         f"{target.compute_capability}, driver {probe.gpus[0].driver} (via {probe.source})"))
        if target.names and not any(n.lower() in g.name.lower() for g in probe.gpus for n in target.names):
            out.append(Check("gpu.model", "warn", f"{names} is {target.arch.upper()} but not a "
                             f"{profile.hardware.gpu}; memory figures of the profile may not hold"))
    if len(probe.gpus) < want:
        out.append(Check("gpu.count", "fail", f"profile {profile.name} uses {want} GPU(s) per node; "
                         f"{len(probe.gpus)} visible. Pass all of them to the container"))
    return out


def check_memory(profile: Profile, target: GpuFacts, available: float | None, kernel_log: str | None) -> list[Check]:
    out = []
    floor = target.min_mem_available_gib
    if floor is not None:
        if available is None:
            out.append(Check("memory", "warn", "MemAvailable unreadable; cannot check the unified-memory floor"))
        elif available < floor:
            out.append(Check("memory", "fail", f"MemAvailable {available:.1f} GiB is under {floor:g} GiB: on "
                             f"{profile.hardware.gpu} the GPU shares the 128 GB with the OS and a load this short "
                             f"of memory can hard-freeze the host. Stop other workloads (or drop page cache) first"))
        else:
            out.append(Check("memory", "ok", f"MemAvailable {available:.1f} GiB >= {floor:g} GiB"))
    elif available is not None:
        out.append(Check("memory", "ok", f"MemAvailable {available:.1f} GiB"))
    if target.arch != "cpu":
        if kernel_log is None:
            out.append(Check("kernel-log", "skip", "kernel log not readable here (NV_ERR_NO_MEMORY not checked)"))
        else:
            hits = nv_no_memory_lines(kernel_log)
            out.append(Check("kernel-log", "warn", f"{len(hits)} NV_ERR_NO_MEMORY line(s) this boot, last: "
                             f"{hits[-1].strip()[:160]}") if hits else Check("kernel-log", "ok",
                                                                               "no NV_ERR_NO_MEMORY this boot"))
    return out


def check_stale_engine(profile: Profile, engines: list[tuple[int, str]], port_busy: bool | None) -> list[Check]:
    """`port_busy` None: this rank serves no API (a headless worker), so the port is not its to check."""
    out = []
    if port_busy:
        out.append(Check("engine.port", "fail", f"port {profile.server.port} is already in use; stop what holds "
                         f"it or set server.port"))
    if engines:
        pid, cmd = engines[0]
        # On a GPU a second engine holds the memory this one needs; on the CPU target it only costs speed.
        status: CheckStatus = "warn" if profile.hardware.gpu == "cpu" else "fail"
        cost = "they compete for the CPU" if status == "warn" else "they hold GPU memory. Stop them first"
        out.append(Check("engine", status, f"{len(engines)} vLLM process(es) already running (pid {pid}: {cmd}); "
                         f"{cost}"))
    return out or [Check("engine", "ok", "no vLLM engine running")]


def check_versions(profile: Profile) -> list[Check]:
    from appliance.lock import check, load_lock

    target = profile.hardware.target
    drifts = check(load_lock(), target)
    if not drifts:
        return [Check("versions", "ok", f"installed {target} stack matches versions.json")]
    return [Check("versions", "fail", d.message) for d in drifts]


def run_doctor(profile: Profile, role: str = "single") -> list[Check]:
    target = load_catalogue().gpus[profile.hardware.gpu]
    port_busy = None if role == "worker" else port_in_use(profile.server.port)
    kernel_log = kernel_log_this_boot() if target.arch != "cpu" else None
    return [
        *check_gpu(profile, target, probe_gpus()),
        *check_memory(profile, target, mem_available_gib(), kernel_log),
        *check_stale_engine(profile, running_engines(), port_busy),
        *check_versions(profile),
    ]
