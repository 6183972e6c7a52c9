"""Profile -> ServePlan: the single rendered truth (argv + env + role). Every output is a view of it.

Role, role_for, Placement, ServePlan and the URL helpers are re-exported: callers name the plan as one module."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from appliance.catalogue import GpuFacts, load_catalogue
from appliance.channels import capabilities as engine_vars
from appliance.channels.capabilities import DSV4_FLASHINFER, DSV4_FLASHMLA, Capabilities, profile_capabilities
from appliance.errors import ApplianceError
from appliance.profile.graph_sizes import profile_capture_sizes
from appliance.profile.model import DEFAULT_CUDAGRAPH_MODE, DEFAULT_PORT, Profile
from appliance.profile.topology import Role, ib_devices, role_for
from appliance.render.launcher import launcher_plan
from appliance.render.managed import ENGINE_ENV_OWNERS, flag_owner, managed_env_owner
from appliance.render.passthrough import passthrough_argv, passthrough_env
from appliance.render.serveplan import (
    Placement,
    ResolvedPlacement,
    ServePlan,
    engine_api_url,
    http_url,
    resolve_placement,
)
from appliance.weights.pins import revision_for

# Env that changes engine behaviour (must reach every rank): the names are the channels' (channels/capabilities),
# the list is render/managed.py's, which owns each.
ENGINE_ENV_KEYS = tuple(ENGINE_ENV_OWNERS)


def _flag(argv: list[str], name: str, value: object) -> None:
    if value is not None:
        argv += [_managed(name), str(value)]


def _managed(name: str) -> str:
    flag_owner(name)  # every flag rendered has an owner a passthrough is refused in favour of (render/managed.py)
    return name


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def engine_argv(profile: Profile, model_dir: Path | None, facts: PlanFacts, api_port: int) -> list[str]:
    """`vllm serve …` for the profile, in the seed's reference order, without launcher flags; `api_port`: the
    resolved placement's (server.port has one reader, placement.api_port_of)."""
    p = profile
    argv = ["vllm", "serve", str(model_dir) if model_dir else p.model.checkpoint]
    served = p.server.served_model_name or (p.model.checkpoint if model_dir else None)
    _flag(argv, "--served-model-name", served)
    if p.model.trust_remote_code:
        argv.append(_managed("--trust-remote-code"))
    _flag(argv, "--tokenizer-mode", p.server.tokenizer_mode)
    if p.server.tool_call_parser:
        argv += [_managed("--tool-call-parser"), p.server.tool_call_parser, _managed("--enable-auto-tool-choice")]
    _flag(argv, "--reasoning-parser", p.server.reasoning_parser)
    if p.parallel.tensor > 1:
        _flag(argv, "--tensor-parallel-size", p.parallel.tensor)
    if p.parallel.pipeline > 1:
        _flag(argv, "--pipeline-parallel-size", p.parallel.pipeline)
    if p.parallel.expert:
        argv.append(_managed("--enable-expert-parallel"))
    if p.cache.kv_dtype != "auto":
        _flag(argv, "--kv-cache-dtype", p.cache.kv_dtype)
    _flag(argv, "--block-size", p.cache.block_size)
    _flag(argv, "--max-model-len", p.limits.max_model_len)
    _flag(argv, "--max-num-seqs", p.limits.max_num_seqs)
    _flag(argv, "--max-num-batched-tokens", p.limits.max_num_batched_tokens)
    if p.hardware.gpu != "cpu":
        _flag(argv, "--gpu-memory-utilization", p.limits.gpu_memory_utilization)
    if p.limits.kv_cache_memory_gib:
        _flag(argv, "--kv-cache-memory-bytes", int(p.limits.kv_cache_memory_gib * 1024**3))
    argv.append(_managed("--enable-prefix-caching" if p.cache.prefix_caching else "--no-enable-prefix-caching"))
    if p.speculative:
        spec: dict[str, object] = {"method": p.speculative.method, "num_speculative_tokens": p.speculative.num_tokens}
        if p.speculative.draft_sample_method:
            spec["draft_sample_method"] = p.speculative.draft_sample_method
        _flag(argv, "--speculative-config", _compact(spec))
    if p.engine.enforce_eager:
        argv.append(_managed("--enforce-eager"))
    else:
        compilation: dict[str, object] = {}
        if p.engine.cudagraph_mode != DEFAULT_CUDAGRAPH_MODE:
            compilation["cudagraph_mode"] = p.engine.cudagraph_mode
        if p.engine.cudagraph_capture_sizes == "profile" and (sizes := profile_capture_sizes(p)):
            compilation["cudagraph_capture_sizes"] = sizes
        if compilation:
            _flag(argv, "--compilation-config", _compact(compilation))
    if p.engine.flashinfer_autotune is not None:
        argv.append(_managed(f"--{'' if p.engine.flashinfer_autotune else 'no-'}enable-flashinfer-autotune"))
    if p.engine.fp4_indexer_cache:
        _flag(argv, "--attention-config", _compact({"use_fp4_indexer_cache": True}))
    if not model_dir:  # a local folder is one revision already; a hub id is fetched at the pin (W1, W2)
        # vLLM takes the tokenizer at the same revision when --tokenizer-revision is unset (config/model.py)
        _flag(argv, "--revision", revision_for(p.model.checkpoint, p.model.revision))
    if p.engine.logits_processors:
        argv += [_managed("--logits-processors"), *p.engine.logits_processors]
    if p.engine.kv_offload_gib > 0:
        _flag(argv, "--kv-offloading-size", p.engine.kv_offload_gib)
    _flag(argv, "--attention-backend", _sm120_backend(p, facts))
    _flag(argv, "--host", p.server.host)
    if api_port != DEFAULT_PORT:
        _flag(argv, "--port", api_port)
    return argv


@dataclass(frozen=True)
class PlanFacts:
    """What a plan reads beyond the profile, passed in (no hidden read below `plan_facts`): the catalogue's facts of
    the profile's GPU and checkpoint family, and the capabilities of the profile's engine channel."""

    gpu: GpuFacts
    family: str | None
    """The checkpoint's family in the catalogue (deepseek-v4, ...); None for a checkpoint it does not list."""
    caps: Capabilities


def plan_facts(profile: Profile) -> PlanFacts:
    """The shipped catalogue's and the channel's facts for `profile`: the one place a plan reads them from disk."""
    cat = load_catalogue()
    ck = cat.checkpoints.get(profile.model.checkpoint)
    return PlanFacts(cat.gpus[profile.hardware.gpu], ck.family if ck else None, profile_capabilities(profile))


def _sm120_backend(p: Profile, facts: PlanFacts) -> str | None:
    """engine.sm120_decode on a channel that chooses the path by attention backend (upstream): FlashInfer's
    DeepSeek-V4 sparse MLA (its SM120 kernels on SM12x) or FlashMLA's, named explicitly so the engine cannot pick
    another one silently. None where the channel switches it by env (the fork) or the serve is no DSv4 on SM12x."""
    if facts.caps.sm120_decode != "backend" or not (facts.gpu.is_sm12x and facts.family == "deepseek-v4"):
        return None
    return DSV4_FLASHINFER if p.engine.sm120_decode else DSV4_FLASHMLA


def engine_env(profile: Profile, facts: PlanFacts) -> dict[str, str]:
    """Env that changes engine behaviour; it goes to every rank. Each channel's adapter: a switch the channel's
    engine does not have is not rendered (the rules refuse a profile that asks for one: K4, E6, E9)."""
    p, caps = profile, facts.caps
    env = {engine_vars.ENV_RUNNER: "1" if p.engine.runner == "v2" else "0"} if caps.runner_switch else {}
    if p.cache.guard != "auto" and caps.guard:
        env[engine_vars.ENV_GUARD] = str(p.cache.guard)
    if facts.gpu.is_sm12x and caps.sm120_decode == "env":
        env[engine_vars.ENV_SM120_DECODE] = "1" if p.engine.sm120_decode else "0"
        if caps.sm120_prefill:
            env[engine_vars.ENV_SM120_PREFILL] = "1" if p.engine.sm120_prefill else "0"
    if p.engine.eager_scratch_pool and caps.scratch_pool:
        env[engine_vars.ENV_SCRATCH_POOL] = "1"
    if p.engine.execute_model_timeout_s is not None:
        env[engine_vars.ENV_EXECUTE_TIMEOUT] = str(p.engine.execute_model_timeout_s)
    if p.hardware.gpu == "cpu" and not p.engine.enforce_eager:
        # W5: the CPU platform compiles in DYNAMO_TRACE_ONCE mode with torch's own inductor backend
        # (vllm/platforms/cpu.py: `compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE`), whose AOT artefact
        # holds a plain function; loading it calls `compiled_fn.finalize_loading` (vllm/compilation/decorators.py,
        # _try_load_aot_compiled_fn), which fails ("'function' object has no attribute 'finalize_loading'") and every
        # start recompiles. Without AOT compile the start re-traces and takes inductor's own cache (C++ kernels and
        # FX graphs in TORCHINDUCTOR_CACHE_DIR): measured cold vs warm in benchmarks/warm_start.py.
        env[engine_vars.ENV_AOT_COMPILE] = "0"
    if p.hardware.gpu != "cpu":
        # INFO, not VERSION: under VERSION NCCL prints its version once, from rank 0 only, so a worker node never
        # shows it (shared/evidence/nccl-h200x2). Under INFO every rank prints its version (K15) and the
        # transport it chose, IB or Socket (K10); INIT,NET keeps that to the start-up lines.
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
    return env


SOCKET_IFNAME_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")
"""Each takes the rank's fabric interface by name: NCCL's out-of-band sockets, Gloo's mesh (without it Gloo binds
what the host name resolves to: loopback on Ubuntu, K39), torch's TensorPipe and UCX; NVIDIA's dgx-spark-playbooks
(nvidia/vllm/README.md) set all four on both nodes."""


def fabric_env_origins(profile: Profile, place: ResolvedPlacement) -> dict[str, tuple[str, str]]:
    """The rank's own network variables, each with the origin of its value (`run --dry-run` shows them): from its
    placement, whose values were given or resolved on the node (multinode/netident.py, K39)."""
    out: dict[str, tuple[str, str]] = {}
    if place.host_ip:
        out["VLLM_HOST_IP"] = (place.host_ip, place.origin("host_ip"))
    if place.fabric_ifname:
        out |= {name: (place.fabric_ifname, place.origin("fabric_ifname")) for name in SOCKET_IFNAME_ENV}
    d = profile.distributed
    if profile.hardware.gpu != "cpu" and (d.nccl_ib_hca or place.rdma_device):
        out["NCCL_IB_HCA"] = ((d.nccl_ib_hca, "profile:distributed.nccl_ib_hca") if d.nccl_ib_hca
                              else (str(place.rdma_device), place.origin("rdma_device")))
    return out


def fabric_env(profile: Profile, place: ResolvedPlacement) -> dict[str, str]:
    env = {name: value for name, (value, _) in fabric_env_origins(profile, place).items()}
    if profile.hardware.gpu != "cpu":
        env["NCCL_IB_DISABLE"] = "1" if profile.distributed.nccl_ib_disable else "0"
        d = profile.distributed
        merge = d.nccl_ib_merge_nics
        if merge is None and len(ib_devices(d.nccl_ib_hca)) > 1:
            merge = True  # two HCAs named: NCCL merges them into one NIC only when told (K36)
        if merge is not None:
            env["NCCL_IB_MERGE_NICS"] = "1" if merge else "0"
        if d.nccl_ib_gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(d.nccl_ib_gid_index)
    return env


def build_plan(profile: Profile, place: Placement | ResolvedPlacement | None = None, *,
               facts: PlanFacts | None = None) -> ServePlan:
    """`place`: where this node stands, resolved against the profile here when only what was given is passed.
    `facts`: the catalogue's and the channel's facts the plan depends on (default: `plan_facts(profile)`)."""
    at = place if isinstance(place, ResolvedPlacement) else resolve_placement(profile, place)
    facts = facts or plan_facts(profile)
    argv = engine_argv(profile, at.model_dir, facts, at.api_port)
    env = engine_env(profile, facts)
    if at.role == "single":
        return _with_passthrough(profile, ServePlan(argv, env, at.role))
    if not at.master_addr:
        raise ApplianceError(
            f"{profile.name} spans {profile.hardware.nodes} nodes and needs the head's fabric address",
            field="APPLIANCE_MASTER_ADDR", value=None,
            fix="set APPLIANCE_MASTER_ADDR (or --master-addr) to the head's address on the fast fabric",
            reason="K10: every rank rendezvous at the head; an address off the fabric runs NCCL over the slow path",
        )
    env |= fabric_env(profile, at)
    return _with_passthrough(profile, launcher_plan(profile, argv, env, at.role, at.node_rank, at.master_addr,
                                                    at.master_port))


def _with_passthrough(profile: Profile, plan: ServePlan) -> ServePlan:
    """engine.extra_args after every flag the appliance renders (a `vllm serve` only: a Ray worker runs `ray
    start`, its head's serve carries them); engine.extra_env on every rank, under what the appliance sets."""
    for name in plan.env:
        managed_env_owner(name) or _unowned(name)
    argv = [*plan.argv, *passthrough_argv(profile)] if "serve" in plan.argv[:2] else plan.argv
    return ServePlan(argv, passthrough_env(profile) | plan.env, plan.role, plan.setup)


def _unowned(name: str) -> None:
    raise AssertionError(f"the renderer sets {name}, which render/managed.py does not own")


__all__ = ["ENGINE_ENV_KEYS", "Placement", "PlanFacts", "ResolvedPlacement", "Role", "ServePlan", "build_plan",
           "engine_api_url", "engine_argv", "engine_env", "fabric_env", "fabric_env_origins", "http_url", "plan_facts",
           "resolve_placement",
           "role_for"]
