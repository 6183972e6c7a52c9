"""P1: a profile that runs what its provenance did not measure says so at validate time.

The seed on its own coverage: "Everything above was measured on one configuration: 2-node TP=2,
DeepSeek-V4-Flash-0731, DSpark num_speculative_tokens: 5, fp8 KV, max_model_len 131072, prefix caching on,
GB10 (SM121). The default now applies to every DSpark config, including shapes not measured here — TP=4, other
context lengths, the NVFP4 checkpoint, single-node setups. ... if you run a materially different shape and see
something worse, VLLM_USE_V2_MODEL_RUNNER=0 returns you to V1".
"""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, deepseek_on_gpu, rule

MEASURED_V2 = "GB10 2-node TP=2, 0731, DSpark nst=5, max_model_len 131072"
"""The one configuration the seed measured V2 + guard on."""
MEASURED_TENSOR = 2
"""The TP size of the seed's one measured V2 configuration (GB10 2-node TP=2); its SM120 box is 2 x RTX PRO 6000,
which this project reads as TP=2 too (an inference: no SM120 TP size is given)."""
FALLBACK = "the seed's fallback is VLLM_USE_V2_MODEL_RUNNER=0: set engine.runner: v1"


@rule("P1", "the profile runs what the seed measured",
      "each profile's measurement is one head with one runner on its hardware (the seed reports SM120 on "
      "0f59188db1 with V1 only), and the seed measured V2 + guard on one shape only; a combination it did not "
      "measure is a gap in coverage, not a claim ruled out",
      deepseek_on_gpu,
      fix="run it and gate it (appliance gate --battery seed); if it is worse, fall back to what the seed measured")
def p1_measured(ctx: RuleContext, r: Rule) -> list[Finding]:
    return [*_runner(ctx, r), *_v2_shape(ctx, r), *_context_length(ctx, r), *_heads_per_rank(ctx, r)]


def _runner(ctx: RuleContext, r: Rule) -> list[Finding]:
    """The runner differs from the one of the profile's measurement."""
    m, runner = ctx.profile.provenance.measured, ctx.profile.engine.runner
    if m is None or m.runner is None or m.runner == runner:
        return []
    on = f"head {m.head}" + (f" ({m.tag})" if m.tag else "") if m.head else "the seed's head"
    guard = " before the ghost-block guard existed" if m.guard == "absent" else ""
    hw = ctx.profile.provenance.hardware or ctx.profile.hardware.gpu
    fallback = FALLBACK if runner == "v2" else "engine.runner: v2 is what the seed measured here"
    return [r.finding("warning", "engine.runner", runner,
                      f"the seed measured {hw} on {on} with runner {m.runner}{guard}; this profile runs runner "
                      f"{runner}, which that measurement did not",
                      f"gate this serve (appliance gate --battery seed); if it is worse, {fallback}")]


def _v2_shape(ctx: RuleContext, r: Rule) -> list[Finding]:
    """V2 where the seed has no V2 measurement of its own: without DSpark (no speculation, or MTP), or DSpark
    without a measurement for this profile."""
    p, m = ctx.profile, ctx.profile.provenance.measured
    if p.engine.runner != "v2" or (m is not None and m.runner == "v1"):
        return []  # a V1 measurement: _runner speaks for it
    spec = p.speculative
    if spec is None or spec.method == "mtp":
        what = "without speculative decoding" if spec is None else f"with MTP ({spec.num_tokens} tokens)"
        return [r.finding("warning", "engine.runner", "v2",
                          f"V2 {what} was not measured by the seed: it measured V2 with DSpark only ({MEASURED_V2})",
                          f"gate this serve (appliance gate --battery seed); if it is worse, {FALLBACK}")]
    if m is None or m.runner is None:
        return [r.finding("warning", "engine.runner", "v2",
                          f"V2 with DSpark was measured by the seed on one configuration only ({MEASURED_V2}); the "
                          f"seed lists TP=4, other context lengths, the NVFP4 checkpoint and single-node setups as "
                          f"not measured", f"gate this serve (appliance gate --battery seed); if it is worse, "
                          f"{FALLBACK}")]
    return []


def _context_length(ctx: RuleContext, r: Rule) -> list[Finding]:
    """The profile serves another max_model_len than the measurement ran at ("other context lengths")."""
    p, m = ctx.profile, ctx.profile.provenance.measured
    if m is None or m.max_model_len is None or m.max_model_len == p.limits.max_model_len:
        return []
    return [r.finding("warning", "limits.max_model_len", p.limits.max_model_len,
                      f"the seed's measurement ran at max_model_len {m.max_model_len}; this profile serves "
                      f"{p.limits.max_model_len}, a context length the seed lists as not measured",
                      f"gate this serve (appliance gate --battery seed), or serve max_model_len {m.max_model_len}")]


def _heads_per_rank(ctx: RuleContext, r: Rule) -> list[Finding]:
    """TP sizes other than the measured one change heads per rank, and FlashInfer's SM120 decode dispatches on
    (num_heads, topk): the seed, "the same assertion has two distinct gates (page_block_size and (num_heads,
    topk), the latter being #50720 / flashinfer#3989)"."""
    p, m, heads = ctx.profile, ctx.profile.provenance.measured, ctx.checkpoint.attention_heads
    measured = (m.tensor if m and m.tensor else None) or MEASURED_TENSOR
    if heads is None or p.parallel.tensor == measured:
        return []
    return [r.finding("warning", "parallel.tensor", p.parallel.tensor,
                      f"TP={p.parallel.tensor} gives {heads // p.parallel.tensor} heads per rank; the seed measured "
                      f"TP={measured} ({heads // measured} per rank). FlashInfer's SM120 decode dispatches on "
                      f"(num_heads, topk) and a shape without a kernel trips `Check failed: num_tokens > 64` "
                      f"(#50720 / flashinfer#3989)",
                      "gate this serve (appliance gate --battery seed); the log's K17 signature names the gate")]
