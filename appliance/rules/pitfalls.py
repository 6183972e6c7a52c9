"""Pitfalls reported in public since the seed (K31-K34, K36-K38), each rule's reason citing where it was read.

Sources are GitHub threads and the engine's own code; the docstring of each rule says what the source holds and,
where part of a report did not hold up, what was left out.
"""

from __future__ import annotations

from appliance.lock import ChannelLock
from appliance.profile.graph_sizes import (
    decode_query_len,
    engine_largest_capture,
    profile_capture_sizes,
    widest_decode_batch,
)
from appliance.profile.topology import ib_devices
from appliance.rules.base import Finding, Rule, RuleContext, deepseek_on_gpu, on_gpu, rule


def _multi_node(ctx: RuleContext) -> bool:
    p = ctx.profile
    return on_gpu(ctx) and p.hardware.nodes > 1 and p.parallel.ranks > 1


@rule("K31", "FlashInfer autotuning does not desynchronize the ranks of a TP launch",
      "each rank tunes on its own GPU and ranks choose different tactics (sgl-project/sglang#35343: 20 of 20 tuned "
      "shapes diverged across 4 ranks); since FlashInfer 0.6.16.post3 vLLM syncs the tuning with a cross-rank "
      "collective, and multi-node GB10 startup deadlocks in it (vllm-project/vllm#52291, opt-out proposed in "
      "#52292), as it does when one rank starts with a warm autotune cache and another cold (#54618)",
      _multi_node,
      fix="set engine.flashinfer_autotune: false (--no-enable-flashinfer-autotune), or give every rank one warmed "
          "autotune cache")
def k31_flashinfer_autotune(ctx: RuleContext, r: Rule) -> list[Finding]:
    """Multi-node only: there each node keeps its own caches (a new or wiped node starts cold beside a warm one,
    #54618's hang) and the tuning collective crosses the fabric (#52291). On one node the ranks share one cache
    folder. The lock pins FlashInfer 0.6.16.post3, the release #52291 names; the seed never mentions autotuning
    and its reference command sets no such flag, so this is a warning, not a refusal."""
    e, p = ctx.profile.engine, ctx.profile
    if e.flashinfer_autotune is not None:
        return []
    ranks = p.parallel.ranks
    return [r.finding("warning", "engine.flashinfer_autotune", None,
                      f"{ranks} ranks over {p.hardware.nodes} nodes tune FlashInfer kernels at start-up (the engine's "
                      f"default), each node with its own cache: a rank "
                      f"that tunes apart, or starts with another rank's warm cache, can hang the launch without an "
                      f"error", "set engine.flashinfer_autotune: false, or keep it on knowingly "
                      "(engine.flashinfer_autotune: true) with one warmed autotune cache on every rank")]


@rule("K32", "CUDA graphs cover the widest uniform decode batch",
      "a decode step verifies max_num_seqs x (K + 1) tokens with K speculative tokens, but vLLM's default caps "
      "its largest graph at min(2 x that, 512) tokens and at max_num_batched_tokens (vllm/config/vllm.py "
      "_set_cudagraph_sizes); wider decode steps run without a graph (vllm-project/vllm#27325, #50488)",
      on_gpu,
      fix="set engine.cudagraph_capture_sizes: profile (the capture list is computed from max_num_seqs and K)")
def k32_capture_sizes(ctx: RuleContext, r: Rule) -> list[Finding]:
    p = ctx.profile
    if p.engine.enforce_eager or p.engine.cudagraph_mode == "NONE" or p.engine.cudagraph_capture_sizes == "profile":
        return []
    widest, largest = widest_decode_batch(p), engine_largest_capture(p)
    if widest is None or largest is None or widest <= largest:
        return []
    k = decode_query_len(p) - 1
    return [r.finding("warning", "engine.cudagraph_capture_sizes", "engine",
                      f"max_num_seqs {p.limits.max_num_seqs} x (1 + {k} speculative tokens) = {widest} tokens per "
                      f"decode step, but vLLM's default list captures up to {largest}: decode steps wider than "
                      f"that run without a CUDA graph",
                      f"set engine.cudagraph_capture_sizes: profile ({len(profile_capture_sizes(p))} sizes up to "
                      f"{widest}), or lower limits.max_num_seqs")]


@rule("K33", "a fixed KV size keeps vLLM's memory headroom checks",
      "with --kv-cache-memory-bytes vLLM reserves the size given and skips memory profiling ('skipped memory "
      "profiling. This does not respect the gpu_memory_utilization config', vllm/v1/worker/gpu_worker.py of "
      "0.27.1); nothing compares it with the activation peak, so a size that is too large serves short requests "
      "and runs out of memory under load (vllm-project/vllm#56698)",
      on_gpu,
      fix="leave limits.kv_cache_memory_gib unset on GPU profiles and size the KV cache with gpu_memory_utilization")
def k33_kv_cache_bytes(ctx: RuleContext, r: Rule) -> list[Finding]:
    gib = ctx.profile.limits.kv_cache_memory_gib
    if gib is None:
        return []
    return [r.finding("warning", "limits.kv_cache_memory_gib", gib,
                      f"a fixed {gib} GiB KV cache per GPU skips vLLM's memory profiling: no check that weights, "
                      f"activations and CUDA graphs still fit beside it",
                      "unset limits.kv_cache_memory_gib and set limits.gpu_memory_utilization (K20 checks the fit)")]


@rule("K34", "no nvfp4_ds_mla KV cache on SM12x",
      "upstream vLLM 0.32.0 lays DeepSeek-V4's sliding-window cache out in the fp8_ds_mla format for nvfp4_ds_mla "
      "too (vllm/v1/attention/backends/mla/sparse_swa.py, get_kv_cache_spec) and allows the NVFP4 record in "
      "FLASHMLA_SPARSE on SM100 only (flashmla_sparse.py); on 2-3 GB10 nodes long-context decode ran ~16x "
      "slower with it than with fp8_ds_mla, which also gave the larger KV pool "
      "(MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#22)",
      deepseek_on_gpu,
      fix="set cache.kv_dtype: fp8")
def k34_nvfp4_kv(ctx: RuleContext, r: Rule) -> list[Finding]:
    """Not held up: the report that the name is a mere alias storing FP8 records everywhere. What holds is the
    engine code cited in the reason (one of DSv4's caches keeps the FP8 layout under that name) and #22's
    measurement, itself marked "suspected" by its author; the pinned fork's handling is unconfirmed."""
    if ctx.profile.cache.kv_dtype != "nvfp4_ds_mla" or not ctx.gpu.is_sm12x:
        return []
    return [r.finding("error", "cache.kv_dtype", "nvfp4_ds_mla",
                      f"nvfp4_ds_mla on {ctx.gpu.arch.upper()}: part of DeepSeek-V4's KV keeps the FP8 record under "
                      f"the NVFP4 name, the NVFP4 record is an SM100 path, and long-context decode was reported "
                      f"~16x slower than with fp8_ds_mla", "set cache.kv_dtype: fp8")]


@rule("K36", "two GB10 HCAs are merged into one NIC and the GID index is left to NCCL",
      "a GB10's QSFP port is two virtual NICs: with only one in use NCCL ran at 98 instead of 161 Gb/s, and both "
      "need NCCL_IB_MERGE_NICS=1 (tonyd2wild/DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark#35, "
      "NVIDIA/dgx-spark-playbooks#103); a pinned NCCL_IB_GID_INDEX drifted on one of the two HCAs (3 -> 4 within "
      "30 minutes) and hung the TP handshake silently (same repository, #38 and #40)",
      on_gpu,
      fix="name both HCAs in distributed.nccl_ib_hca, leave distributed.nccl_ib_merge_nics unset (1) and "
          "distributed.nccl_ib_gid_index unset")
def k36_dual_hca(ctx: RuleContext, r: Rule) -> list[Finding]:
    d = ctx.profile.distributed
    if len(ib_devices(d.nccl_ib_hca)) < 2:
        return []
    out = []
    if d.nccl_ib_merge_nics is False:
        out.append(r.finding("warning", "distributed.nccl_ib_merge_nics", False,
                             f"two HCAs ({d.nccl_ib_hca}) without NCCL_IB_MERGE_NICS: NCCL keeps them apart",
                             "leave distributed.nccl_ib_merge_nics unset (renders NCCL_IB_MERGE_NICS=1)"))
    if d.nccl_ib_gid_index is not None:
        out.append(r.finding("warning", "distributed.nccl_ib_gid_index", d.nccl_ib_gid_index,
                             f"NCCL_IB_GID_INDEX={d.nccl_ib_gid_index} pinned over two HCAs: when the GID table of one "
                             f"of them reshuffles, the pinned index fails there only and the handshake hangs",
                             "unset distributed.nccl_ib_gid_index: NCCL picks the RoCEv2 GID per device"))
    return out


def channel_package(lock: ChannelLock, name: str) -> str | None:
    """The version a channel's lock pins for a package, or None."""
    try:
        return lock.pin(name).version
    except KeyError:
        return None


def engine_label(lock: ChannelLock) -> str:
    return f"channel {lock.name} ({lock.engine.label})"


DECLINED_50843: frozenset[str] = frozenset({
    # The seed, Update 2026-08-04: "Not taking #50843 (V2-tree only, inert on our default)"; no later head of the
    # seed says it was taken, and the 20260809 tag made V2 the default.
    "sm120-pr-41834-stable-preview-20260809", "aa0d513027", "d44e224ab9",
    "sm120-pr-41834-stable-preview-20260804", "0f59188db1",
})
"""Fork refs/commits without upstream #50843 (bound the V2 samplers' tile-local argmax to vocab_size): the
20260804 ones by the seed's own account, the 20260809 ones by inference (no later update of the seed says it
was taken; an upstream sync could have brought it, which nothing read here says). Elsewhere (a later fork head,
an upstream release) it is unknown, and K38 says nothing."""


def lacks_50843(lock: ChannelLock) -> bool:
    """True where this channel's engine is a fork ref of DECLINED_50843: one the seed says did not take #50843, or
    a later one no update of the seed says took it (K38)."""
    e = lock.engine
    return e.source == "fork" and bool({e.ref, (e.commit or "")[:10]} & DECLINED_50843)


FLASHINFER_DSV4_GAP = frozenset({"0.7.0"})
"""FlashInfer releases that break vLLM's DeepSeek-V4 sparse-MLA call (K37); 0.7.0.post1 is what upstream pins."""


@rule("K37", "not FlashInfer 0.7.0 for DeepSeek-V4 sparse MLA",
      "FlashInfer 0.7.0 (flashinfer-ai/flashinfer#3856) makes sparse_indices_are_storage_offsets mandatory for "
      "strided KV pools, which vLLM's packed DeepSeek-V4 pools are: every rank died in warmup with 'ValueError: "
      "sparse_indices_are_storage_offsets must be set for strided KV pools' (vllm-project/vllm#58069); upstream "
      "vLLM 0.31.0 and 0.32.0 pin 0.7.0.post1 (their wheels' metadata)",
      deepseek_on_gpu,
      fix="lock flashinfer-python (and cubin, jit-cache) at 0.7.0.post1 or the channel's locked release, not 0.7.0")
def k37_flashinfer_070(ctx: RuleContext, r: Rule) -> list[Finding]:
    """A fact of the engine stack, not of the profile: the flashinfer-python the profile's channel locks (each
    channel judged by its own pins; upstream vLLM's channels pin 0.7.0.post1). The report was
    measured on GB300 (SM103) with DeepSeek-V4.1; that the same call fails on SM120 is inferred from the shared API
    (trtllm_batch_decode_sparse_mla_dsv4), not measured."""
    version = channel_package(ctx.channel.lock, "flashinfer-python")
    if version not in FLASHINFER_DSV4_GAP:
        return []
    return [r.finding("error", "engine.channel", engine_label(ctx.channel.lock),
                      f"the engine stack pins flashinfer-python {version}, whose sparse-MLA API refuses vLLM's packed "
                      f"DeepSeek-V4 KV pools at warmup", "use a channel whose lock pins flashinfer-python "
                      "0.7.0.post1 or the accepted commit's 0.6.16.post3 (appliance channels)")]


@rule("K38", "structured output on the V2 runner meets an unbounded V2 sampler on this pin",
      "the seed declined upstream #50843, which bounds the V2 samplers' tile-local argmax to vocab_size, as "
      "'V2-tree only, inert on our default' while V1 was the default, and called the defect real; a grammar that "
      "masks every candidate is one way structured output reaches it, and V2 is the default on this pin",
      deepseek_on_gpu,
      fix="serve structured-output traffic on engine.runner: v1 (the seed's fallback), or an engine that carries "
          "#50843; appliance gate --checks structured exercises it")
def k38_v2_structured(ctx: RuleContext, r: Rule) -> list[Finding]:
    if ctx.profile.engine.runner != "v2" or not lacks_50843(ctx.channel.lock):
        return []
    return [r.finding("warning", "engine.runner", "v2",
                      f"V2 on {engine_label(ctx.channel.lock)}, which does not carry #50843: a fully masked row "
                      f"(structured output) can sample an id past the vocabulary in the V2 samplers",
                      "route structured-output requests to a serve with engine.runner: v1, or gate this one with "
                      "appliance gate --checks structured")]
