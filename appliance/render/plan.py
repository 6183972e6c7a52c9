"""Profile -> ServePlan: the single rendered truth (argv + env + role). Every output is a view of it.

Role, role_for, Placement, ServePlan and the URL helpers are re-exported: callers name the plan as one module."""

from __future__ import annotations

from pathlib import Path

from appliance.catalogue import load_catalogue
from appliance.channels import capabilities as engine_vars
from appliance.channels.capabilities import profile_capabilities
from appliance.errors import ApplianceError
from appliance.profile.model import Profile
from appliance.profile.topology import Role, ib_devices, role_for
from appliance.render.flags import ENGINE_FLAGS, serve_flags
from appliance.render.launcher import launcher_plan
from appliance.render.managed import ENGINE_ENV_OWNERS, SOCKET_IFNAME_ENV, flag_owner, managed_env_owner
from appliance.render.passthrough import passthrough_argv, passthrough_env
from appliance.render.planfacts import PlanFacts
from appliance.render.serveplan import (
    Placement,
    ResolvedPlacement,
    ServePlan,
    engine_api_url,
    http_url,
    rank_placements,
)

# Env that changes engine behaviour (must reach every rank): the names are the channels' (channels/capabilities),
# the list is render/managed.py's, which owns each.
ENGINE_ENV_KEYS = tuple(ENGINE_ENV_OWNERS)
MANAGED_SPELLINGS = frozenset(flag for entry in ENGINE_FLAGS for flag in entry.flags)


def engine_argv(profile: Profile, model_dir: Path | None, facts: PlanFacts, listen_port: int) -> list[str]:
    """`vllm serve …` for the profile, in the seed's reference order, without launcher flags: the words of
    render/flags.py's entries, each flag checked against the owners derived from them (render/managed.py);
    `listen_port`: the resolved placement's (behind the front, the engine's own port)."""
    words = serve_flags(profile, model_dir, facts, listen_port)
    for word in words:
        if word in MANAGED_SPELLINGS:
            flag_owner(word)  # every flag rendered has an owner a passthrough is refused in favour of
    return ["vllm", "serve", str(model_dir) if model_dir else profile.model.checkpoint, *words]


def plan_facts(profile: Profile) -> PlanFacts:
    """The shipped catalogue's and the channel's facts for `profile`: the one place a plan reads them from disk."""
    cat = load_catalogue()
    ck = cat.checkpoints.get(profile.model.checkpoint)
    return PlanFacts(cat.gpus[profile.hardware.gpu], ck.family if ck else None, profile_capabilities(profile))


def engine_env(profile: Profile, facts: PlanFacts) -> dict[str, str]:
    """Env that changes engine behaviour; it goes to every rank. Each channel's adapter: a switch the channel's
    engine does not have is not rendered (the rules refuse a profile that asks for one: K4, E6, E9)."""
    p, caps = profile, facts.caps
    env = ({engine_vars.ENV_RUNNER: "1" if p.engine.runner == "v2" else "0"}
           if caps.runner_switch and p.engine.runner != "auto" else {})
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
    if p.hardware.target == "cpu" and not p.engine.enforce_eager:
        # W5: the CPU platform compiles in DYNAMO_TRACE_ONCE mode with torch's own inductor backend
        # (vllm/platforms/cpu.py: `compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE`), whose AOT artefact
        # holds a plain function; loading it calls `compiled_fn.finalize_loading` (vllm/compilation/decorators.py,
        # _try_load_aot_compiled_fn), which fails ("'function' object has no attribute 'finalize_loading'") and every
        # start recompiles. Without AOT compile the start re-traces and takes inductor's own cache (C++ kernels and
        # FX graphs in TORCHINDUCTOR_CACHE_DIR): measured cold vs warm in benchmarks/warm_start.py.
        env[engine_vars.ENV_AOT_COMPILE] = "0"
    if p.hardware.target == "cpu" and p.parallel.ranks == 1:
        # W6: while V1 multiprocessing is on, the CPU platform turns a one-rank serve's `uni` executor into `mp`
        # (platforms/cpu.py, check_and_update_config, in both CPU channels): a third spawned Python process, whose
        # imports alone take ~15 s of every start on 2 cores. Off, the worker runs inside the engine core, which stays
        # its own process (AsyncLLM always takes the multiprocess client: v1/engine/async_llm.py).
        env[engine_vars.ENV_V1_MULTIPROCESSING] = "0"
    if p.hardware.target != "cpu":
        # INFO, not VERSION: under VERSION NCCL prints its version once, from rank 0 only, so a worker node never
        # shows it (shared/evidence/nccl-h200x2). Under INFO every rank prints its version (K15) and the
        # transport it chose, IB or Socket (K10); INIT,NET keeps that to the start-up lines.
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
    return env


def fabric_env_origins(profile: Profile, place: ResolvedPlacement) -> dict[str, tuple[str, str]]:
    """The rank's own network variables, each with the origin of its value (`run --dry-run` shows them): from its
    placement, whose values were given or resolved on the node (multinode/netident.py, K39)."""
    out: dict[str, tuple[str, str]] = {}
    if place.host_ip:
        out["VLLM_HOST_IP"] = (place.host_ip, place.origin("host_ip"))
    if place.fabric_ifname:
        out |= {name: (place.fabric_ifname, place.origin("fabric_ifname")) for name in SOCKET_IFNAME_ENV}
    d = profile.distributed
    if profile.hardware.target != "cpu" and (d.nccl_ib_hca or place.rdma_device):
        out["NCCL_IB_HCA"] = ((d.nccl_ib_hca, "profile:distributed.nccl_ib_hca") if d.nccl_ib_hca
                              else (str(place.rdma_device), place.origin("rdma_device")))
    return out


def fabric_env(profile: Profile, place: ResolvedPlacement) -> dict[str, str]:
    env = {name: value for name, (value, _) in fabric_env_origins(profile, place).items()}
    if profile.hardware.target != "cpu":
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


def build_plan(profile: Profile, place: ResolvedPlacement | None = None, *,
               facts: PlanFacts | None = None) -> ServePlan:
    """`place`: where this node stands, resolved once by its owner (a serve's: appliance/serve/resolve.py; a render
    of every rank: placement.rank_placements); None: the first rank, told nothing.
    `facts`: the catalogue's and the channel's facts the plan depends on (default: `plan_facts(profile)`)."""
    if place is not None and not isinstance(place, ResolvedPlacement):  # a Placement is what was given, unresolved
        raise TypeError(f"build_plan takes a resolved placement, not {type(place).__name__}")
    at = place or rank_placements(profile)[0]
    facts = facts or plan_facts(profile)
    argv = engine_argv(profile, at.model_dir, facts, at.listen_port)
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
           "rank_placements", "role_for"]
