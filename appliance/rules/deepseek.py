"""Rules for DeepSeek-V4-Flash serves (K1–K9, K11, K21). None of them applies to other models."""

from __future__ import annotations

import json

from appliance.channels.capabilities import ENV_GUARD
from appliance.rules.base import Finding, Rule, RuleContext, always, deepseek, deepseek_on_gpu, rule


@rule("K1", "fp8 KV cache is mandatory",
      "DSv4's fp8_ds_mla attention asserts an fp8 KV layout; --kv-cache-dtype auto fails at model construction",
      deepseek,
      fix="set cache.kv_dtype: fp8")
def k1_fp8_kv(ctx: RuleContext, r: Rule) -> list[Finding]:
    kv = ctx.profile.cache.kv_dtype
    if kv in ("fp8", "fp8_ds_mla"):
        return []
    return [r.finding("error", "cache.kv_dtype", kv,
                      f"DeepSeek-V4 cannot start with kv_dtype {kv}", "set cache.kv_dtype: fp8")]


@rule("K2", "DSpark speculative tokens equal the checkpoint's dspark_block_size",
      "below the block size DSpark garbles output; above it the extra slots are drafted but never accepted",
      deepseek,
      fix="set speculative.num_tokens to the checkpoint's dspark_block_size (5 on 0731)")
def k2_dspark_block(ctx: RuleContext, r: Rule) -> list[Finding]:
    spec, block = ctx.profile.speculative, ctx.checkpoint.dspark_block_size
    if spec is None or spec.method != "dspark" or block is None:
        return []
    if spec.num_tokens < block:
        return [r.finding("error", "speculative.num_tokens", spec.num_tokens,
                          f"below the checkpoint's dspark_block_size {block} ({ctx.checkpoint.source}): "
                          f"DSpark would garble output", f"set speculative.num_tokens: {block}")]
    if spec.num_tokens > block:
        return [r.finding("warning", "speculative.num_tokens", spec.num_tokens,
                          f"above the checkpoint's dspark_block_size {block}: the drafter emits one block per "
                          f"pass, the extra slots are never accepted (nst=7 drafted 40 % more for worse "
                          f"acceptance)", f"set speculative.num_tokens: {block}")]
    return []


@rule("K3", "speculative method matches the checkpoint's draft weights",
      "DSpark needs DSpark weights (0731, nvfp4-DSpark); MTP needs MTP heads, which DSpark checkpoints lack",
      deepseek,
      fix="use method dspark on DSpark checkpoints (0731), mtp only on checkpoints with MTP heads")
def k3_method_vs_checkpoint(ctx: RuleContext, r: Rule) -> list[Finding]:
    """A refusal needs the checkpoint's own files or a fact the seed states (0731 "ships no MTP heads"). A catalogue
    fact from outside the seed (the NVFP4 checkpoint's model page: no DSpark weights) is a warning until
    `appliance run` reads the checkpoint's config.json, which then refuses for real."""
    spec, ck, name = ctx.profile.speculative, ctx.checkpoint, ctx.profile.model.checkpoint
    if spec is None:
        return []
    if spec.method == "dspark" and ck.dspark_block_size is None:
        alt = "nvidia/DeepSeek-V4-Flash-nvfp4-DSpark (unvalidated)" if ck.quantization == "nvfp4" else (
            "deepseek-ai/DeepSeek-V4-Flash-0731")
        if "dspark_block_size" in ck.unconfirmed:
            return [r.finding("warning", "speculative.method", spec.method,
                              f"the catalogue says {name} has no DSpark weights, a fact from outside the seed "
                              f"({ck.confirmed or ck.source}); with the checkpoint on disk, appliance run reads its "
                              f"config.json (dspark_block_size) and refuses if that holds",
                              f"use speculative.method: mtp on this checkpoint, or model.checkpoint: {alt}")]
        return [r.finding("error", "speculative.method", spec.method,
                          f"{name} has no DSpark weights (no dspark_block_size, per {ck.source})",
                          f"use speculative.method: mtp on this checkpoint, or model.checkpoint: {alt}")]
    if spec.method == "mtp" and ck.mtp_heads == 0:
        severity = "warning" if "mtp_heads" in ck.unconfirmed else "error"
        return [r.finding(severity, "speculative.method", spec.method,
                          f"{name} has no MTP heads (per {ck.source}); its draft is DSpark"
                          + (": a catalogue fact from outside the seed, re-read from the checkpoint by appliance "
                             "run" if severity == "warning" else ""),
                          f"use speculative.method: dspark with num_tokens: {ck.dspark_block_size or 5}")]
    return []


@rule("K4", "same-step ghost-block guard stays on with prefix caching + speculative decoding",
      "a block hash can be published before its KV is written; a serve that loses the race serves poisoned "
      "blocks for its life (recall fell to mean 11.5/24, floor 3/24)",
      always,
      fix="leave cache.guard: auto (the engine guards every KV manager); on a channel without the guard, turn "
          "prefix caching off")
def k4_guard(ctx: RuleContext, r: Rule) -> list[Finding]:
    p = ctx.profile
    exposed = p.cache.prefix_caching and p.speculative is not None
    guard = p.cache.guard
    if not ctx.caps.guard:
        return _k4_unguarded_channel(ctx, r, exposed)
    if not ctx.is_deepseek or not exposed or guard in ("auto", 2):
        return []
    if guard == 0:
        return [r.finding("warning", "cache.guard", guard,
                          "guard explicitly off with prefix caching and speculative decoding: long-context "
                          "recall can collapse for the life of the serve",
                          "set cache.guard: auto (the engine then guards every KV manager)")]
    return [r.finding("warning", "cache.guard", guard,
                      "guard 1 follows upstream semantics: on DeepSeek-V4 only 2 of 5 KV managers are guarded "
                      "and the main MLA path is not", "set cache.guard: auto or 2")]


def _k4_unguarded_channel(ctx: RuleContext, r: Rule, exposed: bool) -> list[Finding]:
    """The channel's engine has no same-step ghost-block guard (its facts hold neither the env var nor the code)."""
    p, name = ctx.profile, ctx.channel.name
    out = []
    if p.cache.guard != "auto":
        out.append(r.finding("error", "cache.guard", p.cache.guard,
                             f"channel {name} has no same-step ghost-block guard ({ENV_GUARD} is not among its "
                             f"engine's env vars): the setting would be silently ignored",
                             "set cache.guard: auto, or use a channel that carries the guard (jasl-sm120-20260809)"))
    if not exposed:
        return out
    if p.engine.accept_unguarded_prefix_cache:
        out.append(r.finding("warning", "cache.prefix_caching", True,
                             f"prefix caching + speculative decoding on channel {name}, which has no same-step "
                             f"ghost-block guard, by acknowledgement (engine.accept_unguarded_prefix_cache): "
                             f"long-context recall can collapse for the life of a serve",
                             "set cache.prefix_caching: false for any serve users rely on"))
        return out
    out.append(r.finding("error", "cache.prefix_caching", True,
                         f"prefix caching + speculative decoding on channel {name}, which has no same-step "
                         f"ghost-block guard (upstream #42359 is still open): a serve that loses the race keeps "
                         f"serving poisoned prefix blocks (recall fell to mean 11.5/24, floor 3/24)",
                         "set cache.prefix_caching: false, or acknowledge the risk with "
                         "engine.accept_unguarded_prefix_cache: true, or use a channel with the guard "
                         "(jasl-sm120-20260809)"))
    return out


@rule("K5", "V1 runner needs a cudagraph mode without PIECEWISE on engines that carry upstream #51768",
      "engines with #51768 reject DSv4 under Model Runner V1 with PIECEWISE cudagraphs at config time (the "
      "channel's facts say whether its engine has the check); the accepted fork pin predates it, where "
      "VLLM_USE_V2_MODEL_RUNNER=0 alone gave V1 and passed",
      deepseek_on_gpu,
      fix="with engine.runner: v1 use cudagraph_mode FULL_DECODE_ONLY, FULL or NONE (or enforce_eager), or stay on v2")
def k5_runner(ctx: RuleContext, r: Rule) -> list[Finding]:
    e = ctx.profile.engine
    if e.runner != "v1" or e.enforce_eager or "PIECEWISE" not in e.cudagraph_mode:
        return []
    fix = ("set engine.cudagraph_mode: FULL_DECODE_ONLY (or FULL / NONE, or engine.enforce_eager: true), "
           "or go back to engine.runner: v2")
    label = f"channel {ctx.channel.name} ({ctx.channel.lock.engine.label})"
    if ctx.caps.refuses_v1_piecewise:
        return [r.finding("error", "engine.cudagraph_mode", e.cudagraph_mode,
                          f"runner v1 (VLLM_USE_V2_MODEL_RUNNER=0) with a PIECEWISE cudagraph mode fails to boot "
                          f"on {label}, which carries upstream #51768", fix)]
    return [r.finding("warning", "engine.cudagraph_mode", e.cudagraph_mode,
                      f"runner v1 with a PIECEWISE cudagraph mode boots on {label} (no #51768 check in its "
                      f"sources; the seed's acceptance on the fork: VLLM_USE_V2_MODEL_RUNNER=0 alone gave V1, guard "
                      f"5/5, passed), but engines after upstream #51768 refuse it at config time",
                      f"{fix} to stay bootable on a later engine")]


@rule("K6", "eager scratch pool stays off",
      "enabling it corrupted output under concurrent mixed prefill+decode in 7 of 7 rounds",
      deepseek,
      fix="keep engine.eager_scratch_pool: false")
def k6_scratch_pool(ctx: RuleContext, r: Rule) -> list[Finding]:
    e = ctx.profile.engine
    if not e.eager_scratch_pool:
        return []
    if not e.accept_scratch_pool_corruption_risk:
        return [r.finding("error", "engine.eager_scratch_pool", True,
                          "the eager scratch pool corrupts output under concurrent mixed prefill+decode",
                          "set engine.eager_scratch_pool: false, or acknowledge with "
                          "engine.accept_scratch_pool_corruption_risk: true for a debugging serve")]
    return [r.finding("warning", "engine.eager_scratch_pool", True,
                      "eager scratch pool on by acknowledgement: expect corrupted output under concurrency",
                      "turn it off for any serve users rely on")]


@rule("K7", "FlashInfer SM120 paths are engaged, not assumed",
      "both paths are availability-gated: 'stock installs without the kernel degrade gracefully rather than "
      "raising', so a fallback is silent; each has its own switch ('set either=0 to fall back to the FlashMLA / "
      "Triton path')",
      deepseek_on_gpu,
      fix="keep engine.sm120_decode and sm120_prefill on and let the log confirm engagement")
def k7_sm120_paths(ctx: RuleContext, r: Rule) -> list[Finding]:
    e = ctx.profile.engine
    if e.sm120_prefill != e.sm120_decode:
        on, off = ("sm120_prefill", "sm120_decode") if e.sm120_prefill else ("sm120_decode", "sm120_prefill")
        return [r.finding("warning", f"engine.{off}", False,
                          f"engine.{on} on with engine.{off} off: the seed's head defaults both on and names each "
                          f"switch as a fallback to the FlashMLA / Triton path; it reports no run of this mix",
                          f"set engine.{off}: true, or both off to bisect a kernel problem")]
    if not e.sm120_decode and ctx.gpu.is_sm12x:
        return [r.finding("warning", "engine.sm120_decode", False,
                          "SM120 packed decode off: decode falls back to the FlashMLA/Triton path",
                          "set engine.sm120_decode: true unless you are bisecting a kernel problem")]
    return []


@rule("K8", "NVFP4 runs plain tensor parallel",
      "the NVFP4 checkpoint auto-selects the FlashInfer CUTLASS MoE backend; expert parallel is not the "
      "supported path",
      deepseek,
      fix="set parallel.expert: false with NVFP4")
def k8_nvfp4_ep(ctx: RuleContext, r: Rule) -> list[Finding]:
    if ctx.checkpoint.quantization != "nvfp4":  # what the checkpoint is, not what the profile says (M1)
        return []
    if ctx.profile.parallel.expert:
        return [r.finding("error", "parallel.expert", True, "expert parallel with NVFP4 is unsupported on SM12x",
                          "set parallel.expert: false (plain TP)")]
    if not ctx.gpu.is_sm12x:
        return []
    # Seed: "On SM12x NVFP4 is not a memory or throughput win versus MXFP4 ... MXFP4 remains the better practical
    # choice on consumer Blackwell."
    return [r.finding("warning", "model.quantization", "nvfp4",
                      "on SM12x NVFP4 is not a memory or throughput win: weights are ~4 GiB/GPU larger than MXFP4 "
                      "(less KV room), single-stream prefill marginally faster, aggregate decode marginally slower; "
                      "the MoE auto-selects the FlashInfer CUTLASS backend (the log must say so)",
                      "prefer the MXFP4 checkpoint (deepseek-ai/DeepSeek-V4-Flash-0731) unless you need NVFP4 for "
                      "checkpoint parity with the SM100 datacenter path")]


@rule("K9", "block size 256, the one measured",
      "the seed's full gate battery ran on both architectures at --block-size 256, where its SM120 serve comes up "
      "('the DSv4 packed KV cache is laid out in 64-token pages independent of vLLM's logical block size'); "
      "upstream 0.32.0's DeepSeek-V4 FlashInfer sparse-MLA backend takes kernel block size 256 only "
      "(vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py, get_supported_kernel_block_sizes); no source says "
      "another size fails outright",
      deepseek,
      fix="set cache.block_size: 256")
def k9_block_size(ctx: RuleContext, r: Rule) -> list[Finding]:
    bs = ctx.profile.cache.block_size
    if bs is None or bs == 256:
        return []
    return [r.finding("warning", "cache.block_size", bs,
                      f"block size {bs} is not the measured 256: the engine may pick another attention backend "
                      f"(its DeepSeek-V4 FlashInfer SM120 path takes 256) or a layout nobody measured",
                      "set cache.block_size: 256")]


@rule("K11", "KV offload is opt-in",
      "kv_offloading_size had a memory-safety defect with the canonical layout and several writers",
      deepseek,
      fix="set engine.kv_offload_gib: 0 unless testing offload")
def k11_kv_offload(ctx: RuleContext, r: Rule) -> list[Finding]:
    gib = ctx.profile.engine.kv_offload_gib
    if gib <= 0:
        return []
    return [r.finding("warning", "engine.kv_offload_gib", gib,
                      "KV offload is outside the measured configuration and had a memory-safety defect",
                      "set engine.kv_offload_gib: 0 unless you are testing offload")]


@rule("K21", "no FP4 indexer cache on SM12x",
      "use_fp4_indexer_cache still depends on DeepGEMM kernels that SM12x lacks",
      deepseek_on_gpu,
      fix="set engine.fp4_indexer_cache: false on SM12x")
def k21_fp4_indexer(ctx: RuleContext, r: Rule) -> list[Finding]:
    if not ctx.profile.engine.fp4_indexer_cache or not ctx.gpu.is_sm12x:
        return []
    return [r.finding("error", "engine.fp4_indexer_cache", True,
                      f"--attention-config {json.dumps({'use_fp4_indexer_cache': True})} needs DeepGEMM "
                      f"kernels that {ctx.gpu.arch.upper()} does not have", "set engine.fp4_indexer_cache: false")]
