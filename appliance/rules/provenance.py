"""P1: a profile that runs what its provenance did not measure says so at validate time.

The seed on its own coverage: "The default now applies to every DSpark config, including shapes not measured
here — TP=4, other context lengths, the NVFP4 checkpoint, single-node setups. ... if you run a materially
different shape and see something worse, VLLM_USE_V2_MODEL_RUNNER=0 returns you to V1".
"""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, deepseek_on_gpu, rule


@rule("P1", "the profile runs what the seed measured",
      "the seed validated each hardware on one head with one runner; a combination it did not measure is a gap "
      "in coverage, not a claim ruled out",
      deepseek_on_gpu,
      fix="run it and gate it (appliance gate); if it is worse, fall back to what the seed measured")
def p1_measured(ctx: RuleContext, r: Rule) -> list[Finding]:
    m = ctx.profile.provenance.measured
    runner = ctx.profile.engine.runner
    spec = ctx.profile.speculative
    if (m is None or m.runner is None) and runner == "v2" and spec is not None and spec.method == "dspark":
        return [r.finding("warning", "engine.runner", runner,
                          "V2 with DSpark was measured by the seed on one configuration only (GB10 2-node TP=2, 0731); "
                          "the seed lists TP=4, other context lengths, the NVFP4 checkpoint and single-node setups "
                          "as not measured",
                          "gate this serve (appliance gate); if it is worse, the seed's fallback is "
                          "VLLM_USE_V2_MODEL_RUNNER=0: set engine.runner: v1")]
    if m is None or m.runner is None or m.runner == runner:
        return []
    on = f"head {m.head}" + (f" ({m.tag})" if m.tag else "") if m.head else "the seed's head"
    guard = " before the ghost-block guard existed" if m.guard == "absent" else ""
    hw = ctx.profile.provenance.hardware or ctx.profile.hardware.gpu
    fallback = ("the seed's fallback is VLLM_USE_V2_MODEL_RUNNER=0: set engine.runner: v1" if runner == "v2"
                else "engine.runner: v2 is what the seed measured here")
    return [r.finding("warning", "engine.runner", runner,
                      f"the seed measured {hw} on {on} with runner {m.runner}{guard}; runner {runner} on this "
                      f"hardware was not measured by the seed",
                      f"gate this serve (appliance gate); if it is worse, {fallback}")]
