"""Rules that hold the profile to its hardware (K10, K20)."""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, always, on_gpu, rule

# The engine's own default when the profile leaves gpu_memory_utilization unset.
ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
NVFP4_SM12X_OVERHEAD_GIB = 4.0
"""Seed: "NVFP4 weights are ~4 GiB/GPU larger, leaving less KV-cache room"."""
RESIDENT_PER_CHECKPOINT_GIB = 0.9646
"""Engine memory outside the KV cache (weights, activation peak, CUDA graphs) per GiB of checkpoint per rank,
fitted to the seed's smaller KV figure ("a 3x smaller KV cache (6.25 GiB vs ~18.5 GiB)", across its two
architectures; the seed names neither figure's hardware nor utilization: this project reads 6.25 as the 2 x RTX
PRO 6000 serve of 0731 and takes 0.85 from the seed's Running DSpark example, an inference): 0.85 x 95.6 - 6.25 =
75.01 GiB per GPU for 155.5 GiB of checkpoint over 2 ranks. With GB10's engine_memory_gib fitted to the other
figure, K20 reproduces both (tests/test_rules_seed.py)."""
SEED_SMALLER_KV_GIB = 6.25
"""The smaller of the seed's two KV figures (read here as 2 x RTX PRO 6000, 0731, 0.85: an inference, see above)."""
MIN_KV_GIB = SEED_SMALLER_KV_GIB / 2
"""Under half that KV: warn (the serve may not hold max_model_len; the log's K20 expectation
kv-holds-max-model-len says for sure)."""


def nvfp4_overhead_gib(ctx: RuleContext) -> float:
    return NVFP4_SM12X_OVERHEAD_GIB if ctx.checkpoint.quantization == "nvfp4" and ctx.gpu.is_sm12x else 0.0


def weights_per_rank_gib(ctx: RuleContext) -> float:
    """Weights one engine rank holds: checkpoint bytes / ranks (+ NVFP4's SM12x overhead). K20 and the
    memory admission (appliance.hostmem.admission, K23) both use this figure."""
    p = ctx.profile
    return ctx.checkpoint.size_gib / p.parallel.ranks + nvfp4_overhead_gib(ctx)


def predicted_kv_gib(ctx: RuleContext) -> tuple[float, float, float]:
    """(KV GiB per GPU, budget GiB, non-KV GiB per GPU) as the calibrated K20 model predicts them."""
    p, gpu, ck = ctx.profile, ctx.gpu, ctx.checkpoint
    ranks = p.parallel.ranks
    resident = RESIDENT_PER_CHECKPOINT_GIB * ck.size_gib / ranks + nvfp4_overhead_gib(ctx)
    util = p.limits.gpu_memory_utilization or ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION
    budget = util * (gpu.budget_base_gib or 0.0)
    return budget - resident, budget, resident


@rule("K10", "parallelism matches the hardware",
      "tensor x pipeline ranks must equal the GPUs of all nodes; GB10 has one GPU per node",
      always,
      fix="make parallel.tensor x parallel.pipeline equal nodes x GPUs per node")
def k10_parallel(ctx: RuleContext, r: Rule) -> list[Finding]:
    p, hw = ctx.profile.parallel, ctx.profile.hardware
    ranks, gpus = p.ranks, hw.gpus_per_node * hw.nodes
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
                             "pipeline parallel on GB10 is outside the measured configuration",
                             "use parallel.tensor across nodes and pipeline: 1"))
    return out


@rule("K20", "weights fit with room for KV",
      "engine memory outside the KV cache, calibrated on the seed's two KV figures ('6.25 GiB vs ~18.5 GiB'; the "
      "seed names neither one's hardware or utilization: read here as 2 x RTX PRO 6000 and GB10 at 0.85, an "
      "inference), must fit inside gpu_memory_utilization x GPU memory with room for KV",
      on_gpu,
      fix="add GPUs, lower max_model_len or raise gpu_memory_utilization so weights leave room for KV")
def k20_weights_fit(ctx: RuleContext, r: Rule) -> list[Finding]:
    p, gpu, ck = ctx.profile, ctx.gpu, ctx.checkpoint
    if gpu.budget_base_gib is None:
        return []
    ranks = p.parallel.ranks
    kv, budget, resident = predicted_kv_gib(ctx)
    util = p.limits.gpu_memory_utilization or ENGINE_DEFAULT_GPU_MEMORY_UTILIZATION
    where = (f"{ck.size_gib:.1f} GiB of checkpoint ({ck.source}) over {ranks} GPU(s) ~ {resident:.1f} GiB/GPU "
             f"outside the KV cache")
    if kv <= 0:
        per_rank = budget - MIN_KV_GIB - (resident - RESIDENT_PER_CHECKPOINT_GIB * ck.size_gib / ranks)
        need = int(-(-RESIDENT_PER_CHECKPOINT_GIB * ck.size_gib // per_rank)) if per_rank > 0 else None
        return [r.finding("error", "parallel.tensor", p.parallel.tensor,
                          f"{where} exceed {util} x {gpu.budget_base_gib} GiB = {budget:.1f} GiB per GPU: "
                          f"the model cannot load",
                          f"spread the weights over at least {need} GPUs" if need else "use a larger GPU")]
    if kv < MIN_KV_GIB:
        return [r.finding("warning", "limits.gpu_memory_utilization", util,
                          f"{where} leave ~{kv:.1f} GiB per GPU for the KV cache, under half the "
                          f"{SEED_SMALLER_KV_GIB} GiB of the seed's smaller KV figure",
                          "raise limits.gpu_memory_utilization a little or add GPUs; the log's "
                          "kv-holds-max-model-len expectation says whether max_model_len fits")]
    return []
