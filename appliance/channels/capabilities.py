"""What a channel's engine can do, read from its committed facts: the rules consult these instead of assuming the
fork, and the adapter renders the profile's semantic fields to the engine's own mechanism.

The names below are the engine's (env vars, backends): each is checked against the channel's facts before it is
rendered (rules E2-E4), so a renamed one is refused at validate, never silently ignored at run time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from typing import Literal

from appliance.channels.facts import EngineFacts, load_facts
from appliance.profile.model import Profile

ENV_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
ENV_GUARD = "VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT"
ENV_SM120_DECODE = "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE"
ENV_SM120_PREFILL = "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL"
ENV_SCRATCH_POOL = "VLLM_DEEPSEEK_V4_EAGER_SCRATCH_POOL"
ENV_EXECUTE_TIMEOUT = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"  # vllm/envs.py of every channel's engine (K26)
ENV_AOT_COMPILE = "VLLM_USE_AOT_COMPILE"  # vllm/envs.py: use_aot_compile(), default on from torch 2.10 (W5)
# Upstream's DeepSeek-V4 sparse-MLA attention backends: FlashInfer's (on SM12x its SM120 kernels) and FlashMLA's.
DSV4_FLASHINFER = "FLASHINFER_MLA_SPARSE_DSV4"
DSV4_FLASHMLA = "FLASHMLA_SPARSE_DSV4"
NVFP4_CUTLASS = "FLASHINFER_CUTLASS"
"""The MoE backend the seed's NVFP4 checkpoint auto-selects (K8); the log expectation names it."""
MARKER_V1_PIECEWISE = "v1-piecewise-refusal"
MARKER_GUARD = "same-step-guard"

Sm120Switch = Literal["env", "backend"]


@dataclass(frozen=True)
class Capabilities:
    channel: str
    guard: bool
    """The same-step ghost-block guard exists (its env var and its code): K4."""
    refuses_v1_piecewise: bool
    """Upstream #51768: DSv4 under Model Runner V1 with a PIECEWISE cudagraph mode is refused at config time: K5."""
    sm120_decode: Sm120Switch | None
    """How the SM120 FlashInfer decode path is chosen: the fork's env switch, upstream's attention backend, or not."""
    sm120_prefill: bool
    """A separate switch for the SM120 prefill path exists (the fork's); upstream's backend covers both or neither."""
    dspark: bool
    mtp: bool
    nvfp4_moe_backends: tuple[str, ...]
    scratch_pool: bool
    """The fork's eager scratch pool switch (K6) exists."""
    runner_switch: bool
    """VLLM_USE_V2_MODEL_RUNNER exists (K5)."""

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["nvfp4_moe_backends"] = list(self.nvfp4_moe_backends)
        return out


def capabilities_of(facts: EngineFacts) -> Capabilities:
    backends = facts.registry("attention_backends")
    sm120: Sm120Switch | None = "env" if facts.has_env(ENV_SM120_DECODE) else (
        "backend" if DSV4_FLASHINFER in backends and DSV4_FLASHMLA in backends else None)
    specs = facts.registry("speculative_methods")
    return Capabilities(
        channel=facts.channel,
        guard=facts.has_env(ENV_GUARD) and facts.marker(MARKER_GUARD),
        refuses_v1_piecewise=facts.marker(MARKER_V1_PIECEWISE),
        sm120_decode=sm120,
        sm120_prefill=facts.has_env(ENV_SM120_PREFILL),
        dspark="dspark" in specs,
        mtp="mtp" in specs,
        nvfp4_moe_backends=tuple(facts.registry("nvfp4_moe_backends")),
        scratch_pool=facts.has_env(ENV_SCRATCH_POOL),
        runner_switch=facts.has_env(ENV_RUNNER),
    )


@cache
def channel_capabilities(channel: str) -> Capabilities:
    return capabilities_of(load_facts(channel))


def profile_channel(profile: Profile) -> str:
    """The profile's channel: the loader fills it; a Profile built directly gets the loader's default."""
    if profile.engine.channel:
        return profile.engine.channel
    from appliance.profile.loader import default_channel

    return default_channel(profile.hardware.target)[0]


def profile_capabilities(profile: Profile) -> Capabilities:
    return channel_capabilities(profile_channel(profile))
