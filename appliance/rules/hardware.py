"""Rules that hold the profile to its hardware (K10, K20)."""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, always, on_gpu, rule

# The engine's own default when the profile leaves gpu_memory_utilization unset.
ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
NVFP4_SM12X_OVERHEAD_GIB = 4.0
MIN_KV_HEADROOM_GIB = 2.0


@rule("K10", "parallelism matches the hardware",
      "tensor x pipeline ranks must equal the GPUs of all nodes; GB10 has one GPU per node",
      always)
def k10_parallel(ctx: RuleContext, r: Rule) -> list[Finding]:
    p, hw = ctx.profile.parallel, ctx.profile.hardware
    ranks, gpus = p.tensor * p.pipeline, hw.gpus_per_node * hw.nodes
    out: list[Finding] = []
    if ranks != gpus:
        out.append(r.finding("error", "parallel.tensor", p.tensor,
                             f"tensor {p.tensor} x pipeline {p.pipeline} = {ranks} ranks, but the hardware has "
                             f"{hw.nodes} node(s) x {hw.gpus_per_node} GPU(s) = {gpus}",
                             f"make parallel.tensor x parallel.pipeline equal {gpus}, or change hardware"))
    if hw.gpu == "gb10" and hw.gpus_per_node != 1:
        out.append(r.finding("error", "hardware.gpus_per_node", hw.gpus_per_node,
                             "a GB10 (DGX Spark) has exactly one GPU", "set hardware.gpus_per_node: 1"))
    if hw.gpu == "gb10" and p.pipeline > 1:
        out.append(r.finding("warning", "parallel.pipeline", p.pipeline,
                             "pipeline parallel on GB10 is outside the validated configuration",
                             "use parallel.tensor across nodes and pipeline: 1"))
    return out


def nvfp4_overhead_gib(ctx: RuleContext) -> float:
    return NVFP4_SM12X_OVERHEAD_GIB if ctx.profile.model.quantization == "nvfp4" and ctx.gpu.is_sm12x else 0.0


def weights_per_rank_gib(ctx: RuleContext) -> float:
    """Weights one engine rank holds: checkpoint bytes / ranks (+ NVFP4's SM12x overhead). K20 and the
    memory admission (appliance.hostmem.admission, K23) both use this figure."""
    p = ctx.profile
    return ctx.checkpoint.size_gib / (p.parallel.tensor * p.parallel.pipeline) + nvfp4_overhead_gib(ctx)


@rule("K20", "weights fit with room for KV",
      "weights per GPU ~ checkpoint bytes / ranks (+ ~4 GiB/GPU for NVFP4 on SM12x) must fit inside "
      "gpu_memory_utilization x GPU memory, leaving room for the KV cache",
      on_gpu)
def k20_weights_fit(ctx: RuleContext, r: Rule) -> list[Finding]:
    p, gpu, ck = ctx.profile, ctx.gpu, ctx.checkpoint
    if gpu.memory_gib is None:
        return []
    ranks = p.parallel.tensor * p.parallel.pipeline
    overhead = nvfp4_overhead_gib(ctx)
    per_gpu = weights_per_rank_gib(ctx)
    util = p.limits.gpu_memory_utilization or ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION
    budget = util * gpu.memory_gib
    headroom = budget - per_gpu
    where = f"{ck.size_gib:.1f} GiB ({ck.source}) over {ranks} GPU(s) = {per_gpu:.1f} GiB/GPU"
    if headroom <= 0:
        need = int(-(-ck.size_gib // (budget - overhead - MIN_KV_HEADROOM_GIB)))
        return [r.finding("error", "parallel.tensor", p.parallel.tensor,
                          f"weights {where} exceed {util} x {gpu.memory_gib} GiB = {budget:.1f} GiB per GPU: "
                          f"the model cannot load", f"spread the weights over at least {need} GPUs")]
    if headroom < MIN_KV_HEADROOM_GIB:
        return [r.finding("warning", "limits.gpu_memory_utilization", util,
                          f"weights {where} leave {headroom:.1f} GiB of {budget:.1f} GiB for KV and activations",
                          "raise limits.gpu_memory_utilization a little or add GPUs")]
    return []
