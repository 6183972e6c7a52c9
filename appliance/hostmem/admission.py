"""Admission from the profile's own need (K23): what one node's engine will take, against what the host
can give, before anything starts.

Need per node = weights per rank (rule K20's figure) + the KV the profile asks for + overhead outside
them (activations, CUDA graphs, torch.compile/JIT workers, the API server) + an OS reserve.

- GB10 (unified memory): vLLM sizes its pool as gpu_memory_utilization x total memory, and the GPU's
  memory IS the host's, so that pool (weights + KV) plus overhead plus the reserve must fit MemAvailable.
- Discrete GPUs: vLLM needs utilisation x device memory free on each GPU at start; NVML says what is free.
- CPU: weights + the fixed KV (limits.kv_cache_memory_gib) + overhead per rank on this node, from MemAvailable.

A refusal gives both numbers and the knob that would make it fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from appliance.catalogue import GpuFacts
from appliance.profile.model import Profile
from appliance.rules import context_for
from appliance.rules.base import RuleContext
from appliance.rules.hardware import ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION, weights_per_rank_gib

RULE = "K23"
DEFAULT_OVERHEAD_GIB = {"gpu": 4.0, "cpu": 1.5}
"""Per rank, outside weights and KV: estimates (CUDA context + graphs + JIT workers; torch + the API server)."""
CPU_ENGINE_DEFAULT_KV_GIB = 4.0
"""vLLM's CPU build reserves this much KV (VLLM_CPU_KVCACHE_SPACE) when no size is given."""

Verdict = Literal["ok", "fail", "unknown"]


@dataclass(frozen=True)
class Need:
    weights_gib: float
    kv_gib: float
    overhead_gib: float
    reserve_gib: float
    per: str
    """What the need is for: "node" (host memory) or "GPU" (device memory)."""
    kv_source: str

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_gib + self.overhead_gib + self.reserve_gib

    def breakdown(self) -> str:
        return (f"weights {self.weights_gib:.1f} + KV {self.kv_gib:.1f} ({self.kv_source}) + overhead "
                f"{self.overhead_gib:.1f} + OS reserve {self.reserve_gib:.1f} = {self.total_gib:.1f} GiB "
                f"per {self.per}")


@dataclass(frozen=True)
class Admission:
    rule: str
    verdict: Verdict
    need: Need
    available_gib: float | None
    source: str
    """Where `available_gib` was read (MemAvailable under a procfs root, or NVML free memory)."""
    detail: str
    fix: str | None = None


def ranks_on_node(p: Profile) -> int:
    return max(1, p.parallel.ranks // p.hardware.nodes)


def need_for(ctx: RuleContext) -> Need:
    p, gpu = ctx.profile, ctx.gpu
    ranks = ranks_on_node(p)
    weights = weights_per_rank_gib(ctx)
    overhead = p.memory.overhead_gib
    overhead = DEFAULT_OVERHEAD_GIB[p.hardware.target] if overhead is None else overhead
    fixed_kv = p.limits.kv_cache_memory_gib
    if gpu.arch == "cpu":
        kv, kv_source = (fixed_kv, "limits.kv_cache_memory_gib") if fixed_kv else (
            CPU_ENGINE_DEFAULT_KV_GIB, "the CPU engine's default")
        return Need(weights * ranks, kv * ranks, overhead * ranks, p.memory.os_reserve_gib, "node", kv_source)
    if fixed_kv:
        kv, kv_source = fixed_kv, "limits.kv_cache_memory_gib"
    else:
        util = p.limits.gpu_memory_utilization or ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION
        kv = max(0.0, util * (gpu.budget_base_gib or 0.0) - weights)
        kv_source = f"the rest of gpu_memory_utilization {util} x {gpu.budget_base_gib} GiB"
    if gpu.unified_memory:
        return Need(weights * ranks, kv * ranks, overhead * ranks, p.memory.os_reserve_gib, "node", kv_source)
    # Discrete: the pool lives on the GPU; overhead outside it (context, JIT) is small there and the OS
    # lives in host memory, so the device-side need is the pool alone.
    return Need(weights, kv, 0.0, 0.0, "GPU", kv_source)


def _fix(p: Profile, gpu: GpuFacts, need: Need, available: float) -> str:
    short = need.total_gib - available
    room_for_kv = need.kv_gib - short
    if room_for_kv <= 0:
        return (f"the weights alone ({need.weights_gib:.1f} GiB) with overhead and reserve do not fit "
                f"{available:.1f} GiB: stop what else uses memory on this node, or spread the model over more "
                f"{'nodes' if need.per == 'node' else 'GPUs'}")
    if p.limits.kv_cache_memory_gib or gpu.arch == "cpu":
        per_rank = room_for_kv / (ranks_on_node(p) if need.per == "node" else 1)
        return (f"set limits.kv_cache_memory_gib <= {per_rank:.1f} (then limits.max_model_len x "
                f"limits.max_num_seqs = {p.limits.max_model_len} x {p.limits.max_num_seqs or 'default'} must fit that "
                f"KV: lower them if the engine says so), or free {short:.1f} GiB on this node")
    util = (need.weights_gib / ranks_on_node(p) if need.per == "node" else need.weights_gib) \
        + room_for_kv / (ranks_on_node(p) if need.per == "node" else 1)
    fitting = int(util / (gpu.budget_base_gib or 1) * 100) / 100
    return (f"set limits.gpu_memory_utilization <= {fitting:.2f} (KV {room_for_kv:.1f} GiB; limits.max_model_len "
            f"{p.limits.max_model_len} and max_num_seqs {p.limits.max_num_seqs or 'default'} must fit it), or free "
            f"{short:.1f} GiB")


def admit(profile: Profile, available_gib: float | None, source: str, ctx: RuleContext | None = None) -> Admission:
    ctx = ctx or context_for(profile)
    need = need_for(ctx)
    if available_gib is None:
        return Admission(RULE, "unknown", need, None, source,
                         f"{RULE} cannot read what the host can give ({source}); the serve needs {need.breakdown()}")
    if need.total_gib > available_gib:
        what = "MemAvailable" if need.per == "node" else "free device memory"
        return Admission(RULE, "fail", need, available_gib, source,
                         f"{RULE} the serve needs {need.total_gib:.1f} GiB per {need.per} ({need.breakdown()}) but "
                         f"{what} is {available_gib:.1f} GiB ({source})", _fix(profile, ctx.gpu, need, available_gib))
    return Admission(RULE, "ok", need, available_gib, source,
                     f"{RULE} needs {need.total_gib:.1f} of {available_gib:.1f} GiB ({need.breakdown()}; {source})")


def nvml_free_gib(engine_env: Mapping[str, str] | None = None) -> tuple[float | None, str]:
    """The least free device memory over the GPUs the engine may use (NVML, under the CUDA_VISIBLE_DEVICES it gets:
    `engine_env`, the profile's engine.extra_env, over this process's; a second engine pinned to free cards is
    judged by those), or None with the reason."""
    import os

    from appliance.errors import ApplianceError
    from appliance.hostmem.cards import VISIBLE_ENV, read_cards, visible

    cards, source = read_cards()
    if cards is None:
        return None, source
    environ = {**os.environ, **(engine_env or {})}
    try:
        usable, among = visible(cards, environ), (f" named by {VISIBLE_ENV}" if VISIBLE_ENV in environ else "")
    except ApplianceError:  # a MIG instance, say: judged by every card, as before
        usable, among = cards, ""
    if not usable:
        return None, f"NVML: no GPU{among}"
    return min(c.free_gib for c in usable), f"NVML free memory, least of {len(usable)} GPU(s){among}"
