"""Profile predicates the log-check table names in `when:` (healthchecks/logchecks.yaml).

Each is a pure function of the Profile; the table stays data and the meaning of a name lives here.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.catalogue import load_catalogue
from appliance.channels.capabilities import profile_capabilities
from appliance.profile.model import Profile

Predicate = Callable[[Profile], bool]


def _gpu(p: Profile) -> bool:
    return p.hardware.target != "cpu"


def _sm12x(p: Profile) -> bool:
    gpu = load_catalogue().gpus.get(p.hardware.gpu)
    return bool(gpu and gpu.is_sm12x)


def _deepseek(p: Profile) -> bool:
    facts = load_catalogue().checkpoints.get(p.model.checkpoint)
    return bool(facts and facts.family == "deepseek-v4")


def _cuda_graphs(p: Profile) -> bool:
    return _gpu(p) and not p.engine.enforce_eager and p.engine.cudagraph_mode != "NONE"


PREDICATES: dict[str, Predicate] = {
    "gpu": _gpu,
    "cpu": lambda p: not _gpu(p),
    "sm12x": _sm12x,
    "deepseek": _deepseek,
    "multi_node": lambda p: p.hardware.nodes > 1,
    "prefix_caching": lambda p: p.cache.prefix_caching,
    "speculative": lambda p: p.speculative is not None,
    "dspark": lambda p: p.speculative is not None and p.speculative.method == "dspark",
    "mtp": lambda p: p.speculative is not None and p.speculative.method == "mtp",
    # `guard` is Literal["auto", 0, 1, 2]; compare by type too, so False/True never pass for 0/1.
    "guard_auto": lambda p: p.cache.guard == "auto",
    "guard_every": lambda p: p.cache.guard == "auto" or (type(p.cache.guard) is int and p.cache.guard == 2),
    "guard_0": lambda p: type(p.cache.guard) is int and p.cache.guard == 0,
    "guard_1": lambda p: type(p.cache.guard) is int and p.cache.guard == 1,
    "guard_2": lambda p: type(p.cache.guard) is int and p.cache.guard == 2,
    "runner_v1": lambda p: p.engine.runner == "v1",
    "runner_v2": lambda p: p.engine.runner == "v2",
    "enforce_eager": lambda p: p.engine.enforce_eager,
    "cuda_graphs": _cuda_graphs,
    "sm120_decode": lambda p: p.engine.sm120_decode,
    "nvfp4": lambda p: p.model.quantization == "nvfp4",
    # NCCL may use IB/RoCE (the profile does not disable it): the transport it chose is then read back (K10).
    "nccl_ib": lambda p: not p.distributed.nccl_ib_disable,
    # What the profile's channel can do (its engine's facts, channels/facts/): which lines prove engagement there.
    "channel_guard": lambda p: profile_capabilities(p).guard,
    "sm120_env": lambda p: profile_capabilities(p).sm120_decode == "env",
    "sm120_backend": lambda p: profile_capabilities(p).sm120_decode == "backend",
}


def holds(names: list[str], profile: Profile) -> bool:
    """All named predicates hold (`!name` negates one)."""
    for name in names:
        negate = name.startswith("!")
        if PREDICATES[name.lstrip("!")](profile) == negate:
            return False
    return True
