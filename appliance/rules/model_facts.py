"""M1: what the checkpoint owns is derived from it, and a profile that says otherwise is refused.

`model.quantization` is a fact of the checkpoint (its catalogue entry, or its own config.json when it is on disk);
K8 and K20 read the checkpoint's value. A profile or `--set model.quantization=...` that contradicts it would
render one checkpoint while the rules judged another, so it is an error.
"""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, always, rule


@rule("M1", "declared model facts match the checkpoint",
      "quantization is a property of the checkpoint: declaring another one would have the rules judge a model "
      "that is not the one rendered",
      always,
      fix="leave model.quantization as the checkpoint's (appliance rules M1), or choose the checkpoint you mean")
def m1_quantization(ctx: RuleContext, r: Rule) -> list[Finding]:
    declared, actual = ctx.profile.model.quantization, ctx.checkpoint.quantization
    if declared == actual:
        return []
    return [r.finding("error", "model.quantization", declared,
                      f"{ctx.profile.model.checkpoint} is {actual} (per {ctx.checkpoint.source}), not {declared}",
                      f"set model.quantization: {actual}, or model.checkpoint to a {declared} checkpoint")]
