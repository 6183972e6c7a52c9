"""Multi-node launch with the engines' own launchers: vLLM's mp launcher, or Ray."""

from __future__ import annotations

from appliance.profile.model import Profile
from appliance.render.plan import Role, ServePlan


def launcher_plan(profile: Profile, argv: list[str], env: dict[str, str], role: Role, rank: int,
                  master_addr: str, master_port: int) -> ServePlan:
    if profile.distributed.backend == "ray":
        return _ray(argv, env, role, master_addr, master_port)
    argv = [*argv, "--distributed-executor-backend", "mp", "--nnodes", str(profile.hardware.nodes),
            "--node-rank", str(rank), "--master-addr", master_addr, "--master-port", str(master_port)]
    if role == "worker":
        argv.append("--headless")
    return ServePlan(argv, env, role)


def _ray(argv: list[str], env: dict[str, str], role: Role, master_addr: str, master_port: int) -> ServePlan:
    # Ray: every node joins one Ray cluster; only the head runs `vllm serve`, which places the ranks.
    # The engine env must be in each raylet's environment, so it is on the worker plan as well.
    if role == "head":
        setup = [["ray", "start", "--head", f"--node-ip-address={master_addr}", f"--port={master_port}"]]
        return ServePlan([*argv, "--distributed-executor-backend", "ray"], env, role, setup)
    return ServePlan(["ray", "start", "--block", f"--address={master_addr}:{master_port}"], env, role)
