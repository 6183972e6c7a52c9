"""Which shipped profile fits this host: its GPUs (NVML, else nvidia-smi), their arch and memory, the node's memory
(procfs) and its RDMA fabric devices (sysfs), each profile judged by the checks `doctor` runs before a start
(H2 the arch, H1 the count, K23 admission) and by the rules; one recommended. `appliance profiles --host`."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from appliance.catalogue import load_catalogue
from appliance.doctor.gpu import GpuProbe, probe_gpus
from appliance.hostmem.sources import meminfo
from appliance.profile.model import Profile

Verdict = Literal["validated here", "fits", "refused"]
_STATUS_ORDER = ("validated", "partial", "community", "unvalidated", "test")


@dataclass(frozen=True)
class Host:
    gpus: GpuProbe
    mem_total_gib: float | None
    mem_available_gib: float | None
    fabric: list[str]
    """RDMA devices (sysfs class/infiniband): what NCCL's IB/RoCE transport can use between nodes."""
    machine: str = field(default_factory=platform.machine)

    def describe(self) -> list[str]:
        if self.gpus.gpus:
            names: dict[str, int] = {}
            for g in self.gpus.gpus:
                key = f"{g.name} ({g.sm.upper()}, compute capability {g.compute_capability}" + (
                    f", {g.memory_gib:.1f} GiB)" if g.memory_gib else ", unified memory)")
                names[key] = names.get(key, 0) + 1
            gpus = "; ".join(f"{n} x {k}" for k, n in names.items()) + f", driver {self.gpus.gpus[0].driver} " \
                                                                        f"(via {self.gpus.source})"
        else:
            gpus = f"none ({self.gpus.error or self.gpus.source})"
        mem = "unreadable" if self.mem_total_gib is None else \
            f"{self.mem_total_gib:.1f} GiB, {self.mem_available_gib or 0:.1f} GiB available"
        return [f"GPUs:   {gpus}", f"memory: {mem}", f"fabric: {', '.join(self.fabric) or 'no RDMA device'}",
                f"CPU:    {self.machine}"]


def read_host(procfs: Path = Path("/proc"), sysfs: Path = Path("/sys"), probe: GpuProbe | None = None) -> Host:
    info = meminfo(procfs) or {}
    try:
        fabric = sorted(p.name for p in (sysfs / "class" / "infiniband").iterdir())
    except OSError:
        fabric = []
    return Host(probe if probe is not None else probe_gpus(), info.get("MemTotal"), info.get("MemAvailable"), fabric)


@dataclass(frozen=True)
class Fit:
    profile: str
    verdict: Verdict
    rule: str | None
    reason: str
    status: str
    gpu: bool

    def as_dict(self) -> dict[str, object]:
        return {"profile": self.profile, "verdict": self.verdict, "rule": self.rule, "reason": self.reason,
                "provenance": self.status}


def fit(profile: Profile, host: Host) -> Fit:
    """The first thing that refuses the profile here (the doctor's start checks, then the rules), else fits."""
    from appliance.doctor.report import check_gpu, check_memory
    from appliance.rules import context_for, evaluate

    target = load_catalogue().gpus[profile.hardware.gpu]
    status, gpu = profile.provenance.status, target.arch != "cpu"

    def refused(rule: str | None, reason: str) -> Fit:
        return Fit(profile.name, "refused", rule, reason, status, gpu)

    want, seen = profile.hardware.gpus_per_node, host.gpus.gpus
    for check in check_gpu(profile, target, host.gpus):
        if check.status != "fail":
            continue
        if check.name == "gpu.arch":
            other = next(g for g in seen if g.compute_capability != target.compute_capability)
            return refused(check.rule, f"GPU {other.index} is {other.name} ({other.sm.upper()}); built for "
                                       f"{profile.hardware.gpu} ({target.arch.upper()}): the image's kernels are "
                                       f"SM120/SM121 only")
        if check.name == "gpu.count":
            return refused(check.rule, f"uses {want} GPU(s) per node; {len(seen)} here")
        return refused(check.rule, f"needs {want} {target.arch.upper()} GPU(s) ({profile.hardware.gpu}); none here")
    if target.unified_memory or not gpu:  # the node's memory holds the weights: K23 admission
        for check in check_memory(profile, target, host.mem_available_gib, [],
                                  source="MemAvailable of this host"):
            if check.name == "memory" and check.status == "fail":
                return refused(check.rule, check.detail)
    errors = [f for f in evaluate(context_for(profile)) if f.severity == "error"]
    if errors:
        return refused(errors[0].rule, errors[0].message)
    nodes = profile.hardware.nodes
    notes = []
    if nodes > 1:
        notes.append(f"as one of {nodes} nodes (each needs the same)")
        if gpu and not host.fabric and not profile.distributed.nccl_ib_disable:
            notes.append("no RDMA device here: NCCL would fall back to sockets between the nodes (K10)")
    if gpu and status == "validated":
        return Fit(profile.name, "validated here", None,
                   "; ".join(["every check of the battery passed on this hardware at this shape", *notes]), status, gpu)
    said = f"provenance {status}"
    if profile.provenance.blockers:  # partial: accepted with blockers, each named (the harness's rule)
        said += f" (accepted with blockers: {'; '.join(profile.provenance.blockers)})"
    return Fit(profile.name, "fits", None, "; ".join([*notes, said]), status, gpu)


def recommend(fits: list[Fit], profiles: dict[str, Profile]) -> Fit | None:
    """A GPU profile where one fits (the best-proven, then the fewest nodes, then the reference: the shortest
    name of its family), else a CPU one: the demo."""
    usable = [f for f in fits if f.verdict != "refused"]
    if not usable:
        return None

    def key(f: Fit) -> tuple[int, int, int, int, str]:
        return (not f.gpu, _STATUS_ORDER.index(f.status) if f.status in _STATUS_ORDER else len(_STATUS_ORDER),
                profiles[f.profile].hardware.nodes, len(f.profile), f.profile)

    return min(usable, key=key)


@dataclass(frozen=True)
class HostFits:
    """This host, every shipped profile's verdict on it, and the one recommended (None: none fits)."""

    host: Host
    fits: list[Fit]
    best: Fit | None

    def said(self) -> str:
        """The recommendation in one line."""
        best, fits = self.best, self.fits
        if best is None:
            return "recommended: none of the shipped profiles fits this host"
        if not best.gpu and any(f.gpu for f in fits) and self.host.gpus.gpus:
            return (f"recommended: {best.profile} (no GPU profile fits these GPUs: the appliance serves DeepSeek-V4 on "
                    f"SM12x only; {best.profile} is the CPU demo)")
        return f"recommended: {best.profile} ({best.verdict}; provenance {best.status})"


def judge_host(host: Host | None = None) -> HostFits:
    """Every shipped profile judged on this host (read from the settings' procfs when not given)."""
    from appliance.profile import list_profiles, load_profile
    from appliance.settings import load_settings

    if host is None:
        host = read_host(load_settings().procfs)
    profiles = {name: load_profile(name).profile for name in list_profiles()}
    fits = [fit(p, host) for p in profiles.values()]
    return HostFits(host, fits, recommend(fits, profiles))


def host_report(as_json: bool, host: Host | None = None) -> int:
    """`profiles --host`: this host's facts, every shipped profile's verdict here, and one recommended."""
    judged = judge_host(host)
    host, fits, best = judged.host, judged.fits, judged.best
    if as_json:
        print(json.dumps({"host": host.describe(), "profiles": [f.as_dict() for f in fits],
                          "recommended": best.profile if best else None}, indent=2, ensure_ascii=False))
        return 0
    from appliance.table import line, render

    print("\n".join(line(fact) for fact in host.describe()))
    print()
    print(render(["profile", "verdict", "reason"],
                 [[f.profile, f"refused ({f.rule})" if f.verdict == "refused" else f.verdict, f.reason]
                  for f in fits]))
    print()
    print(line(judged.said()))
    return 0
