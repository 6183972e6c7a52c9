"""A rendered head/worker pair: same engine env on every rank, one master address/port, one world size."""

from __future__ import annotations

import pytest

from appliance.channels.capabilities import ENV_RUNNER, ENV_SM120_DECODE, ENV_SM120_PREFILL, profile_capabilities
from appliance.placement import resolve_placement
from appliance.profile import list_profiles, load_profile
from appliance.render import Placement, ServePlan, build_plan
from appliance.render.k8s import K8sOptions, render_manifests
from appliance.render.plan import ENGINE_ENV_KEYS

MULTI_NODE = [n for n in list_profiles() if load_profile(n).profile.hardware.nodes > 1]
MASTER = "10.1.0.1"


def pair(name: str, *overrides: str, nodes_port: int = 29601) -> tuple[ServePlan, ServePlan]:
    profile = load_profile(name, cli_overrides=list(overrides)).profile
    head = build_plan(profile, resolve_placement(
        profile, Placement(node_rank=0, master_addr=MASTER, master_port=nodes_port)))
    worker = build_plan(profile, resolve_placement(
        profile, Placement(node_rank=1, master_addr=MASTER, master_port=nodes_port, host_ip="10.1.0.2")))
    return head, worker


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def engine_env(plan: ServePlan) -> dict[str, str]:
    return {k: v for k, v in plan.env.items() if k not in ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")}


def test_there_are_multi_node_profiles_to_check() -> None:
    assert {"gb10-tp2", "cpu-smoke-2node"} <= set(MULTI_NODE)


@pytest.mark.parametrize("name", MULTI_NODE)
def test_head_and_worker_carry_the_same_engine_env(name: str) -> None:
    head, worker = pair(name, "cache.guard=2")
    assert engine_env(head) == engine_env(worker)
    # The adapter renders the guard only on a channel whose engine has it (the CPU engine has not: K4 refuses
    # the setting there, and nothing is rendered to be silently ignored).
    has_guard = profile_capabilities(load_profile(name).profile).guard
    assert head.env.get("VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT") == ("2" if has_guard else None)
    assert ENV_RUNNER in worker.env
    present = [k for k in ENGINE_ENV_KEYS if k in head.env]
    assert all(worker.env[k] == head.env[k] for k in present)


def test_the_sm120_flags_and_runner_reach_the_gb10_worker() -> None:
    _, worker = pair("gb10-tp2")
    assert worker.env[ENV_RUNNER] == "1"
    assert worker.env[ENV_SM120_DECODE] == "1" and worker.env[ENV_SM120_PREFILL] == "1"
    assert worker.env["VLLM_HOST_IP"] == "10.1.0.2"  # per node, not the head's


@pytest.mark.parametrize("name", MULTI_NODE)
def test_head_and_worker_agree_on_master_address_port_and_world_size(name: str) -> None:
    head, worker = pair(name)
    profile = load_profile(name).profile
    for plan, rank in ((head, "0"), (worker, "1")):
        assert flag(plan.argv, "--master-addr") == MASTER and flag(plan.argv, "--master-port") == "29601"
        assert flag(plan.argv, "--nnodes") == str(profile.hardware.nodes)
        assert flag(plan.argv, "--node-rank") == rank
    world = [int(flag(p.argv, "--tensor-parallel-size") or 1) * int(flag(p.argv, "--pipeline-parallel-size") or 1)
             for p in (head, worker)]
    assert world[0] == world[1] == profile.hardware.nodes * profile.hardware.gpus_per_node
    assert "--headless" in worker.argv and "--headless" not in head.argv
    strip = {"--node-rank", "--headless"}
    assert [a for a in head.argv if a not in strip and a != "0"] == \
        [a for a in worker.argv if a not in strip and a != "1"]


def test_the_ray_way_joins_every_raylet_on_its_fabric_address_with_the_engine_env() -> None:
    head, worker = pair("gb10-tp2", "distributed.backend=ray")
    assert head.setup == [["ray", "start", "--head", "--port=29601", "--disable-usage-stats",
                           f"--node-ip-address={MASTER}"]]
    assert worker.argv == ["ray", "start", "--block", f"--address={MASTER}:29601", "--disable-usage-stats",
                           "--node-ip-address=10.1.0.2"]
    assert engine_env(head) == engine_env(worker)


@pytest.mark.parametrize("name", MULTI_NODE)
def test_k8s_leader_and_worker_templates_carry_the_same_engine_env_and_master(name: str) -> None:
    profile = load_profile(name).profile
    lws = render_manifests(profile, K8sOptions(image="appliance:test"), "a" * 64, "b" * 64)[0]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == profile.hardware.nodes

    def env(role: str) -> dict[str, object]:
        container = lwt[f"{role}Template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}

    leader, worker = env("leader"), env("worker")
    assert leader.pop("APPLIANCE_NODE_RANK") == "0" and worker.pop("APPLIANCE_NODE_RANK") == "$(LWS_WORKER_INDEX)"
    assert leader == worker
    assert leader["APPLIANCE_MASTER_ADDR"] == "$(LWS_LEADER_ADDRESS)"
    assert leader["APPLIANCE_MASTER_PORT"] == str(profile.distributed.master_port)
    head, _ = pair(name)
    assert {k: leader[k] for k in engine_env(head)} == engine_env(head)
