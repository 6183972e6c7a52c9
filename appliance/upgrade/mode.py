"""U3: how a candidate is qualified, from the host's memory and the profile's need (K23).

- side by side: the candidate starts beside the running incumbent, on other ports. Only when the host holds both:
  the candidate's K23 need per node fits what the host has *with the incumbent running* (MemAvailable on GB10's
  unified memory and the CPU target; NVML's least free device memory on discrete GPUs, where the incumbent holds
  the GPUs the candidate would need). Single-node only: a multi-node candidate would need a second set of nodes.
- window: the incumbent's engine is stopped, the candidate served and judged, and the incumbent restored whatever
  the verdict (a DeepSeek serve on 2 x GB10 cannot hold two).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from appliance.errors import ApplianceError
from appliance.hostmem.admission import Admission, admit, nvml_free_gib
from appliance.hostmem.sources import mem_available_gib
from appliance.profile.model import Profile
from appliance.rules import context_for
from appliance.rules.upgrade import RULES

Mode = Literal["side-by-side", "window"]
Requested = Literal["auto", "side-by-side", "window"]
MODES: tuple[Requested, ...] = ("auto", "side-by-side", "window")


@dataclass(frozen=True)
class ModeChoice:
    mode: Mode
    requested: Requested
    why: str
    admission: Admission | None
    """The candidate's K23 need against what the host has now (None where it was not asked: multi-node)."""

    def to_json(self) -> dict[str, object]:
        a = self.admission
        return {"mode": self.mode, "requested": self.requested, "why": self.why,
                "need_gib": round(a.need.total_gib, 2) if a else None,
                "need": a.need.breakdown() if a else None,
                "available_gib": round(a.available_gib, 2) if a and a.available_gib is not None else None,
                "source": a.source if a else None}


def host_admission(candidate: Profile, procfs: Path) -> Admission:
    """The candidate's need against what this host has now (the incumbent, if running, already counted in)."""
    ctx = context_for(candidate)
    gpu = ctx.gpu
    if gpu.arch == "cpu" or gpu.unified_memory:
        return admit(candidate, mem_available_gib(procfs), f"MemAvailable in {procfs}/meminfo", ctx)
    free, source = nvml_free_gib()
    return admit(candidate, free, source, ctx)


def choose_mode(candidate: Profile, requested: Requested, procfs: Path) -> ModeChoice:
    """U3. `requested` side-by-side on a host that cannot hold both is exit 2 naming both figures."""
    if candidate.hardware.nodes > 1:
        why = (f"a {candidate.hardware.nodes}-node serve: a candidate beside it would need a second set of "
               f"{candidate.hardware.nodes} nodes")
        if requested == "side-by-side":
            raise ApplianceError(f"U3 --mode side-by-side: {why}", field="--mode", value=requested,
                                 fix="use --mode window (or auto)")
        return ModeChoice("window", requested, why, None)
    a = host_admission(candidate, procfs)
    fits = a.verdict == "ok"
    if requested == "window":
        return ModeChoice("window", requested, "asked for (--mode window)" +
                          (f"; the host could hold both ({a.detail})" if fits else ""), a)
    if fits:
        return ModeChoice("side-by-side", requested, f"the host holds both: {a.detail}", a)
    if requested == "side-by-side":
        raise ApplianceError(f"U3 --mode side-by-side: the host cannot hold the candidate beside the incumbent: "
                             f"{a.detail}", field="--mode", value=requested,
                             fix="use --mode window (or auto): the incumbent is stopped for the window and restored "
                                 "whatever the verdict", reason=RULES["U3"].reason)
    why = a.detail if a.verdict == "fail" else f"what the host has is unknown ({a.detail}): not risking two serves"
    return ModeChoice("window", requested, why, a)


OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's CPU worker binds its OpenMP threads by this (channels/facts/vllm-cpu-*.json: vllm.envs, default `auto`).
`auto` takes the lowest cores, so a second engine beside the first would spin on the very cores the incumbent's
worker busy-waits on: on 2 cores the candidate's worker never finished starting in 8 minutes."""


def candidate_cpu_bind(allowed: set[int]) -> str | None:
    """The cores a CPU candidate served side by side binds to: the upper half of the cores this process may use (the
    incumbent's `auto` binding starts from the lowest), or None with a single core (nothing to split)."""
    cores = sorted(allowed)
    if len(cores) < 2:
        return None
    return ",".join(str(c) for c in cores[len(cores) // 2:])
