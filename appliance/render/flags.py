"""Every engine flag the appliance manages, declared once: the profile key that owns it, each spelling it may take,
and the words it renders. `vllm serve`'s argv (render/plan.py) is these entries' words in this order (the reference
command's order), and render/managed.py's FLAG_OWNERS, which a passthrough naming one is refused against (X2), is
derived from the same entries: the renderer and the list of what it manages cannot drift apart (issue 31 item 5)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.channels.capabilities import DSV4_FLASHINFER, DSV4_FLASHMLA
from appliance.profile.graph_sizes import profile_capture_sizes
from appliance.profile.model import DEFAULT_CUDAGRAPH_MODE, DEFAULT_PORT, Profile
from appliance.render.planfacts import PlanFacts
from appliance.weights.pins import revision_for

Words = Callable[[Profile, "Path | None", "PlanFacts", int], list[str]]
"""(profile, the local model folder or None, the plan's facts, the resolved placement's API port) -> the words of
the flag, [] when it is not rendered."""

SECRET_OWNER = "{} (kept in the environment or the Kubernetes Secret, never in a profile)"


@dataclass(frozen=True)
class EngineFlag:
    owner: str
    """The profile key (or setting) that owns the flag: what a passthrough of it is told to set instead."""
    flags: tuple[str, ...]
    """Every spelling the flag renders as (a switch and its `--no-` form, a flag and the one it brings along)."""
    words: Words | None = None
    """The words on `vllm serve`; None for a flag rendered elsewhere (the launcher's, the positional model) or
    never (a secret)."""


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _value(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]


def _when(flag: str, on: bool) -> list[str]:
    return [flag] if on else []


def _speculative(p: Profile) -> list[str]:
    if not p.speculative:
        return []
    spec: dict[str, object] = {"method": p.speculative.method, "num_speculative_tokens": p.speculative.num_tokens}
    if p.speculative.draft_sample_method:
        spec["draft_sample_method"] = p.speculative.draft_sample_method
    return ["--speculative-config", _compact(spec)]


def _compilation(p: Profile) -> list[str]:
    if p.engine.enforce_eager:
        return []
    compilation: dict[str, object] = {}
    if p.engine.cudagraph_mode != DEFAULT_CUDAGRAPH_MODE:
        compilation["cudagraph_mode"] = p.engine.cudagraph_mode
    if p.engine.cudagraph_capture_sizes == "profile" and (sizes := profile_capture_sizes(p)):
        compilation["cudagraph_capture_sizes"] = sizes
    return ["--compilation-config", _compact(compilation)] if compilation else []


def _autotune(p: Profile) -> list[str]:
    on = p.engine.flashinfer_autotune
    return [] if on is None else [f"--{'' if on else 'no-'}enable-flashinfer-autotune"]


def sm120_backend(p: Profile, facts: PlanFacts) -> str | None:
    """engine.sm120_decode on a channel that chooses the path by attention backend (upstream): FlashInfer's
    DeepSeek-V4 sparse MLA (its SM120 kernels on SM12x) or FlashMLA's, named explicitly so the engine cannot pick
    another one silently. None where the channel switches it by env (the fork) or the serve is no DSv4 on SM12x."""
    if facts.caps.sm120_decode != "backend" or not (facts.gpu.is_sm12x and facts.family == "deepseek-v4"):
        return None
    return DSV4_FLASHINFER if p.engine.sm120_decode else DSV4_FLASHMLA


ENGINE_FLAGS: tuple[EngineFlag, ...] = (
    # rendered as the positional model tag (render/plan.py); the flag is the same setting
    EngineFlag("model.checkpoint", ("--model",)),
    EngineFlag("server.served_model_name", ("--served-model-name",), lambda p, model_dir, *_: _value(
        "--served-model-name", p.server.served_model_name or (p.model.checkpoint if model_dir else None))),
    EngineFlag("model.trust_remote_code", ("--trust-remote-code",),
               lambda p, *_: _when("--trust-remote-code", p.model.trust_remote_code)),
    EngineFlag("model.dtype", ("--dtype",),
               lambda p, *_: _value("--dtype", p.model.dtype if p.model.dtype != "auto" else None)),
    EngineFlag("server.tokenizer_mode", ("--tokenizer-mode",),
               lambda p, *_: _value("--tokenizer-mode", p.server.tokenizer_mode)),
    EngineFlag("server.tool_call_parser", ("--tool-call-parser", "--enable-auto-tool-choice"), lambda p, *_: (
        ["--tool-call-parser", p.server.tool_call_parser, "--enable-auto-tool-choice"]
        if p.server.tool_call_parser else [])),
    EngineFlag("server.reasoning_parser", ("--reasoning-parser",),
               lambda p, *_: _value("--reasoning-parser", p.server.reasoning_parser)),
    EngineFlag("parallel.tensor", ("--tensor-parallel-size",),
               lambda p, *_: _value("--tensor-parallel-size", p.parallel.tensor if p.parallel.tensor > 1 else None)),
    EngineFlag("parallel.pipeline", ("--pipeline-parallel-size",), lambda p, *_: _value(
        "--pipeline-parallel-size", p.parallel.pipeline if p.parallel.pipeline > 1 else None)),
    EngineFlag("parallel.expert", ("--enable-expert-parallel",),
               lambda p, *_: _when("--enable-expert-parallel", p.parallel.expert)),
    EngineFlag("cache.kv_dtype", ("--kv-cache-dtype",),
               lambda p, *_: _value("--kv-cache-dtype", p.cache.kv_dtype if p.cache.kv_dtype != "auto" else None)),
    EngineFlag("cache.block_size", ("--block-size",), lambda p, *_: _value("--block-size", p.cache.block_size)),
    EngineFlag("limits.max_model_len", ("--max-model-len",),
               lambda p, *_: _value("--max-model-len", p.limits.max_model_len)),
    EngineFlag("limits.max_num_seqs", ("--max-num-seqs",),
               lambda p, *_: _value("--max-num-seqs", p.limits.max_num_seqs)),
    EngineFlag("limits.max_num_batched_tokens", ("--max-num-batched-tokens",),
               lambda p, *_: _value("--max-num-batched-tokens", p.limits.max_num_batched_tokens)),
    EngineFlag("limits.gpu_memory_utilization", ("--gpu-memory-utilization",), lambda p, *_: _value(
        "--gpu-memory-utilization", p.limits.gpu_memory_utilization if p.hardware.target != "cpu" else None)),
    EngineFlag("limits.kv_cache_memory_gib", ("--kv-cache-memory-bytes",), lambda p, *_: _value(
        "--kv-cache-memory-bytes",
        int(p.limits.kv_cache_memory_gib * 1024**3) if p.limits.kv_cache_memory_gib else None)),
    EngineFlag("cache.prefix_caching", ("--enable-prefix-caching", "--no-enable-prefix-caching"),
               lambda p, *_: ["--enable-prefix-caching" if p.cache.prefix_caching else "--no-enable-prefix-caching"]),
    EngineFlag("speculative", ("--speculative-config",), lambda p, *_: _speculative(p)),
    EngineFlag("engine.enforce_eager", ("--enforce-eager",),
               lambda p, *_: _when("--enforce-eager", p.engine.enforce_eager)),
    EngineFlag("engine.cudagraph_mode and engine.cudagraph_capture_sizes", ("--compilation-config",),
               lambda p, *_: _compilation(p)),
    EngineFlag("engine.flashinfer_autotune", ("--enable-flashinfer-autotune", "--no-enable-flashinfer-autotune"),
               lambda p, *_: _autotune(p)),
    EngineFlag("engine.fp4_indexer_cache", ("--attention-config",), lambda p, *_: (
        ["--attention-config", _compact({"use_fp4_indexer_cache": True})] if p.engine.fp4_indexer_cache else [])),
    # a local folder is one revision already; a hub id is fetched at the pin (W1, W2). vLLM takes the tokenizer at
    # the same revision when --tokenizer-revision is unset (config/model.py)
    EngineFlag("model.revision", ("--revision",), lambda p, model_dir, *_: _value(
        "--revision", None if model_dir else revision_for(p.model.checkpoint, p.model.revision))),
    EngineFlag("engine.logits_processors", ("--logits-processors",), lambda p, *_: (
        ["--logits-processors", *p.engine.logits_processors] if p.engine.logits_processors else [])),
    EngineFlag("engine.kv_offload_gib", ("--kv-offloading-size",), lambda p, *_: _value(
        "--kv-offloading-size", p.engine.kv_offload_gib if p.engine.kv_offload_gib > 0 else None)),
    EngineFlag("engine.sm120_decode", ("--attention-backend",),
               lambda p, _, facts, __: _value("--attention-backend", sm120_backend(p, facts))),
    EngineFlag("engine.moe_backend", ("--moe-backend",), lambda p, *_: _value("--moe-backend", p.engine.moe_backend)),
    # behind the front (server.front) the engine answers on loopback only: clients reach it through the front
    EngineFlag("server.host", ("--host",),
               lambda p, *_: _value("--host", "127.0.0.1" if p.server.front else p.server.host)),
    # the resolved placement's listen_port: server.port, or behind the front its engine_port (read by the placement)
    EngineFlag("server.port", ("--port",),
               lambda _p, _m, _f, port: _value("--port", port if port != DEFAULT_PORT else None)),
    # The multi-node launcher's (render/launcher.py).
    EngineFlag("distributed.backend", ("--distributed-executor-backend",)),
    EngineFlag("hardware.nodes", ("--nnodes",)),
    EngineFlag("APPLIANCE_NODE_RANK (--node-rank of appliance run)", ("--node-rank",)),
    EngineFlag("APPLIANCE_MASTER_ADDR (--master-addr of appliance run)", ("--master-addr",)),
    EngineFlag("distributed.master_port", ("--master-port",)),
    EngineFlag("hardware.nodes (a worker rank runs headless)", ("--headless",)),
    # Secrets never go on a command line (it is shown by ps, logged and rendered): the environment carries them.
    EngineFlag(SECRET_OWNER.format("VLLM_API_KEY"), ("--api-key",)),
    EngineFlag(SECRET_OWNER.format("HF_TOKEN"), ("--hf-token",)),
    # vLLM's parser reads more flags from this YAML file (utils/argparse_utils.py: `if "--config" in args`): one
    # passed word would carry any managed flag past X2, and no rule reads the file. Never rendered.
    EngineFlag("nothing: vLLM reads further flags from that file, unchecked (set each as its profile key or pass it "
               "as its own flag)", ("--config",)),
)


def owners() -> dict[str, str]:
    """flag -> its owner, for every spelling of every entry."""
    return {flag: entry.owner for entry in ENGINE_FLAGS for flag in entry.flags}


def serve_flags(profile: Profile, model_dir: Path | None, facts: PlanFacts, listen_port: int) -> list[str]:
    """The managed flags of `vllm serve` for the profile, in the table's order (without the launcher's)."""
    return [word for entry in ENGINE_FLAGS if entry.words
            for word in entry.words(profile, model_dir, facts, listen_port)]
