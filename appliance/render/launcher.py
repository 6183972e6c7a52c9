"""Multi-node launch with the engines' own launchers: vLLM's mp launcher, or Ray."""

from __future__ import annotations

from appliance.profile.model import Profile
from appliance.profile.topology import Role
from appliance.render.managed import flag_owner
from appliance.render.serveplan import ServePlan


def launcher_plan(profile: Profile, argv: list[str], env: dict[str, str], role: Role, rank: int,
                  master_addr: str, master_port: int) -> ServePlan:
    if profile.distributed.backend == "ray":
        return _ray(argv, env, role, master_addr, master_port)
    argv = [*argv, "--distributed-executor-backend", "mp", "--nnodes", str(profile.hardware.nodes),
            "--node-rank", str(rank), "--master-addr", master_addr, "--master-port", str(master_port)]
    if role == "worker":
        argv.append("--headless")
    for word in argv:
        if word.startswith("--"):
            flag_owner(word)  # each launcher flag has its owner, as the renderer's (render/managed.py)
    return ServePlan(argv, env, role)


def _ray(argv: list[str], env: dict[str, str], role: Role, master_addr: str, master_port: int) -> ServePlan:
    # Ray: every node joins one Ray cluster (its GCS on the master port); only the head runs `vllm serve`,
    # which places the ranks as Ray actors. vLLM copies the driver's VLLM_*, NCCL_* and HF_* variables to
    # every actor (VLLM_HOST_IP excepted), so the engine env reaches the workers from the head; it is on
    # the worker plan as well so that each raylet (and what it forks before vLLM's copy) starts with it.
    # Each raylet must advertise its fabric address, or Ray picks the default route's and NCCL follows it.
    # Usage stats are off: the nodes have no way out, and the report would only time out.
    node_ip = env.get("VLLM_HOST_IP")
    common = ["--disable-usage-stats", *([f"--node-ip-address={node_ip}"] if node_ip else [])]
    if role == "head":
        setup = [["ray", "start", "--head", f"--port={master_port}", *common]]
        return ServePlan([*argv, "--distributed-executor-backend", "ray"], env, role, setup)
    return ServePlan(["ray", "start", "--block", f"--address={master_addr}:{master_port}", *common], env, role)
