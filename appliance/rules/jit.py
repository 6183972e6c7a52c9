"""Rules about the engine compiling kernels while it serves (K26)."""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, rule

ENGINE_DEFAULT_EXECUTE_TIMEOUT_S = 300
"""VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS when unset: vllm/envs.py (`int(os.getenv(..., "300"))`) in 0.27.1, the fork's
base, and in 0.32.0; v1/executor/multiproc_executor.py passes it as the timeout of every execute_model RPC."""
JIT_SAFE_EXECUTE_TIMEOUT_S = 1800
"""What the community GB10 composes set (issue 20: 'community GB10 composes set 1800')."""


def _sm12x_multiproc(ctx: RuleContext) -> bool:
    # The timeout lives in the multiproc executor: one rank alone runs in-process and has none.
    p = ctx.profile
    return ctx.gpu.is_sm12x and p.parallel.ranks > 1


@rule("K26", "the engine's step timeout outlasts a mid-serve JIT",
      "vLLM's multiproc executor gives each execute_model RPC VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (default 300 s) and "
      "kills the engine core when it expires; on SM12x the CuTe DSL and TileLang compile kernels for new shapes "
      "while serving, and one such JIT can outlast 300 s, so a healthy serve dies on its first unusual batch "
      "(community GB10 composes set 1800 s)",
      _sm12x_multiproc,
      fix=f"set engine.execute_model_timeout_s to {JIT_SAFE_EXECUTE_TIMEOUT_S} or more")
def k26_execute_timeout(ctx: RuleContext, r: Rule) -> list[Finding]:
    got = ctx.profile.engine.execute_model_timeout_s
    effective = ENGINE_DEFAULT_EXECUTE_TIMEOUT_S if got is None else got
    if effective >= JIT_SAFE_EXECUTE_TIMEOUT_S:
        return []
    said = "unset (the engine's 300 s)" if got is None else f"{got} s"
    return [r.finding("warning", "engine.execute_model_timeout_s", got,
                      f"the step timeout is {said}: a CuTe DSL or TileLang JIT during serving can take longer on "
                      f"{ctx.gpu.arch.upper()}, and the engine core is killed when it expires",
                      f"set engine.execute_model_timeout_s: {JIT_SAFE_EXECUTE_TIMEOUT_S} (or more)")]
