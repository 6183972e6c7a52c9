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
from appliance.jsonstrict import JsonObject
from appliance.profile.model import Profile

ENV_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
ENV_GUARD = "VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT"
ENV_SM120_DECODE = "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE"
ENV_SM120_PREFILL = "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL"
ENV_SCRATCH_POOL = "VLLM_DEEPSEEK_V4_EAGER_SCRATCH_POOL"
ENV_EXECUTE_TIMEOUT = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"  # vllm/envs.py of every channel's engine (K26)
ENV_AOT_COMPILE = "VLLM_USE_AOT_COMPILE"  # vllm/envs.py: use_aot_compile(), default on from torch 2.10 (W5)
ENV_V1_MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"  # vllm/envs.py; the CPU platform reads it raw (W6)
# Upstream's DeepSeek-V4 sparse-MLA attention backends: FlashInfer's (on SM12x its SM120 kernels) and FlashMLA's.
DSV4_FLASHINFER = "FLASHINFER_MLA_SPARSE_DSV4"
DSV4_FLASHMLA = "FLASHMLA_SPARSE_DSV4"
NVFP4_CUTLASS = "FLASHINFER_CUTLASS"
"""The MoE backend the seed's NVFP4 checkpoint auto-selects (K8); the log expectation names it."""
MARKER_V1_PIECEWISE = "v1-piecewise-refusal"
MARKER_GUARD = "same-step-guard"
MARKER_DSV4_TOPK_CHECK = "dsv4-sm120-topk-check"
MARKER_FLASHINFER_DSV4_DECODE = "flashinfer-dsv4-sm120-decode"
MOE_BACKEND_PACKAGES = {"b12x": "b12x"}
"""--moe-backend value -> the package whose kernels it runs, which the channel's lock must install: upstream's B12X
MoE experts take their kernels from the `b12x` package (the vllm-0.33.0 channel's
vllm/model_executor/layers/fused_moe/b12x.py:29 through vllm/utils/b12x.py:25, `find_spec("b12x")`), which vLLM
ships only as its optional `b12x` extra (its wheel's METADATA: a Requires-Dist of b12x under `extra == "b12x"`, the
version the channel's lock pins)."""

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
    dsv4_topk_check: bool = False
    """The engine refuses to build DeepSeek-V4's SM120 FlashInfer attention without FlashInfer's DSV4 sparse-MLA
    decode specialization for the layer's (heads, top-k) (E10)."""
    flashinfer_dsv4_decode: bool = False
    """The channel's FlashInfer carries that DSV4 SM120 decode dispatch (read from its installed sources)."""

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["nvfp4_moe_backends"] = list(self.nvfp4_moe_backends)
        return out


CAPABILITY_RULES: dict[str, tuple[str, str]] = {
    "guard": ("K4", "the same-step ghost-block guard"),
    "refuses_v1_piecewise": ("K5", "the #51768 refusal of V1 with a PIECEWISE cudagraph mode"),
    "runner_switch": ("K5", "the V2 model runner switch"),
    "sm120_decode": ("E6", "how the SM120 FlashInfer decode path is chosen"),
    "sm120_prefill": ("E6", "a separate SM120 prefill switch"),
    "dspark": ("E5", "the DSpark draft method"),
    "mtp": ("E5", "the MTP draft method"),
    "nvfp4_moe_backends": ("E8", "the NVFP4 MoE backends"),
    "scratch_pool": ("E9", "the eager scratch pool switch"),
    "dsv4_topk_check": ("E10", "the refusal of an SM120 DeepSeek-V4 attention without FlashInfer's DSV4 decode "
                               "specialization"),
    "flashinfer_dsv4_decode": ("E10", "FlashInfer's DSV4 SM120 decode dispatch"),
}
"""capability -> (the rule that consults it, what it is): a change between two channels is said with the rule whose
verdicts it moves (channels diff, upgrade plan)."""


def capability_changes(a: Capabilities, b: Capabilities) -> list[JsonObject]:
    """Each capability that differs between two channels' engines: its name, what it is, both values and its rule."""
    ja, jb = a.to_json(), b.to_json()
    return [{"name": k, "from": ja[k], "to": jb[k], "rule": CAPABILITY_RULES[k][0], "what": CAPABILITY_RULES[k][1]}
            for k in sorted(CAPABILITY_RULES) if ja[k] != jb[k]]


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
        dsv4_topk_check=facts.marker(MARKER_DSV4_TOPK_CHECK),
        flashinfer_dsv4_decode=facts.marker(MARKER_FLASHINFER_DSV4_DECODE),
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
