"""Rules for the cpu target (the CPU build of vLLM). None of them applies to a GPU profile."""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, on_cpu, rule


@rule("C1", "the CPU build runs Model Runner V1",
      "the CPU build prints 'Model Runner V2 requires Triton; using the V1 model runner instead'",
      on_cpu,
      fix="set engine.runner: v1 on the cpu target")
def c1_cpu_runner(ctx: RuleContext, r: Rule) -> list[Finding]:
    if ctx.profile.engine.runner in ("v1", "auto"):  # auto: the build itself falls back to V1 (the line above)
        return []
    return [r.finding("error", "engine.runner", "v2",
                      "the CPU build has no V2 runner, so the health check's runner expectation could never pass",
                      "set engine.runner: v1 on the cpu target")]


@rule("C2", "the CPU build starts eager",
      "torch.compile on 2 cores takes ~110 s and its cache failed to reload on the next start",
      on_cpu,
      fix="set engine.enforce_eager: true")
def c2_cpu_eager(ctx: RuleContext, r: Rule) -> list[Finding]:
    if ctx.profile.engine.enforce_eager:
        return []
    return [r.finding("warning", "engine.enforce_eager", False,
                      "compiling on the CPU build takes minutes per start",
                      "set engine.enforce_eager: true")]


@rule("C3", "DeepSeek-V4-Flash is not a CPU model",
      "284B parameters need SM12x GPUs; the cpu target serves the tiny smoke model",
      on_cpu,
      fix="choose an SM12x profile for DeepSeek-V4-Flash; the cpu target serves the smoke model")
def c3_cpu_model(ctx: RuleContext, r: Rule) -> list[Finding]:
    if not ctx.is_deepseek:
        return []
    return [r.finding("error", "hardware.gpu", "cpu",
                      f"{ctx.profile.model.checkpoint} cannot be served on the cpu target",
                      "choose an SM12x profile (appliance profiles), or the cpu-smoke model")]
