"""What the appliance manages on the engine's command line and in its environment, and which profile key (or
setting) owns each: the renderer emits a flag (declared with its owner in flags.py) or variable only through these
tables (plan.py, launcher.py), so a passthrough that names one of them is refused naming its owner (rules X2, X3)
and the two cannot drift apart.
The compile-cache variables `run` adds (run/caches.py, a layer above the rules) are refused by the launch itself."""

from __future__ import annotations

from appliance.channels.capabilities import (
    ENV_AOT_COMPILE,
    ENV_EXECUTE_TIMEOUT,
    ENV_GUARD,
    ENV_RUNNER,
    ENV_SCRATCH_POOL,
    ENV_SM120_DECODE,
    ENV_SM120_PREFILL,
    ENV_V1_MULTIPROCESSING,
)
from appliance.redact import LIBRARY_SECRET_ENV
from appliance.render.flags import SECRET_OWNER, owners

_LIBRARY_SECRET = "{} (a credential huggingface_hub or vLLM reads: kept in the caller's environment, never in a " \
                  "profile)"


FLAG_OWNERS: dict[str, str] = owners()
"""Every engine flag the appliance renders, with its owner: derived from render/flags.py, where each is declared."""

ENGINE_ENV_OWNERS: dict[str, str] = {
    ENV_RUNNER: "engine.runner",
    ENV_GUARD: "cache.guard",
    ENV_SM120_DECODE: "engine.sm120_decode",
    ENV_SM120_PREFILL: "engine.sm120_prefill",
    ENV_SCRATCH_POOL: "engine.eager_scratch_pool",
    # W5: the CPU build's AOT artefact never loads (render/plan.py), so a compiling CPU serve runs without AOT.
    ENV_EXECUTE_TIMEOUT: "engine.execute_model_timeout_s (K26: a mid-serve JIT outlasting the 300 s default)",
    ENV_AOT_COMPILE: "engine.enforce_eager (off on the CPU build: its AOT compile artefact never loads, W5)",
    ENV_V1_MULTIPROCESSING: "hardware and parallel (off on a one-rank CPU serve: its worker runs in the engine core, "
                            "W6)",
}
"""The engine's own switches the renderer sets (render/plan.engine_env): the same on every rank of a serve."""

SOCKET_IFNAME_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")
"""Each takes the rank's fabric interface by name: NCCL's out-of-band sockets, Gloo's mesh (without it Gloo binds
what the host name resolves to: loopback on Ubuntu, K39), torch's TensorPipe and UCX; NVIDIA's dgx-spark-playbooks
(nvidia/vllm/README.md) set all four on both nodes."""


ENV_OWNERS: dict[str, str] = {
    **ENGINE_ENV_OWNERS,
    # INFO with INIT,NET is what the health read-back parses (K10, K15): another level hides those lines.
    "NCCL_DEBUG": "the appliance's NCCL read-back (K10, K15)",
    "NCCL_DEBUG_SUBSYS": "the appliance's NCCL read-back (K10, K15)",
    "VLLM_HOST_IP": "APPLIANCE_HOST_IP",
    **dict.fromkeys(SOCKET_IFNAME_ENV, "APPLIANCE_FABRIC_IFNAME (--fabric-ifname)"),
    "NCCL_IB_DISABLE": "distributed.nccl_ib_disable",
    "NCCL_IB_HCA": "distributed.nccl_ib_hca, else the RDMA device of the rank's fabric interface (K39)",
    "NCCL_IB_MERGE_NICS": "distributed.nccl_ib_merge_nics",
    "NCCL_IB_GID_INDEX": "distributed.nccl_ib_gid_index",
    "HF_HUB_OFFLINE": "APPLIANCE_MODEL_DIR (a local checkpoint runs offline) or the caller's environment",
    "HF_HOME": "the caller's environment (the Hugging Face cache the model was fetched into)",
    "VLLM_API_KEY": SECRET_OWNER.format("VLLM_API_KEY"),
    "HF_TOKEN": SECRET_OWNER.format("HF_TOKEN"),
    **{name: _LIBRARY_SECRET.format(name) for name in LIBRARY_SECRET_ENV},
}


def flag_owner(flag: str) -> str:
    """The owner of a flag the renderer emits; a flag missing here is a renderer bug, refused at once."""
    try:
        return FLAG_OWNERS[flag]
    except KeyError:
        raise AssertionError(f"the renderer emits {flag}, which render/managed.py does not own") from None


def managed_env_owner(name: str) -> str | None:
    if name.startswith("APPLIANCE_"):
        return "the appliance's own settings (appliance/settings.py)"
    return ENV_OWNERS.get(name)
