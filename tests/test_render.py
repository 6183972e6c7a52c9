"""The ServePlan: the seed's reference command flag for flag, launcher flags, env on every rank."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.errors import ApplianceError
from appliance.placement import resolve_placement
from appliance.profile import list_profiles, load_profile
from appliance.profile.model import DEFAULT_PORT
from appliance.render import Placement, build_plan
from appliance.render.plan import ENGINE_ENV_KEYS

REFERENCE = shlex.split(
    "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --trust-remote-code --tokenizer-mode deepseek_v4 "
    "--tool-call-parser deepseek_v4 --enable-auto-tool-choice --reasoning-parser deepseek_v4 "
    "--tensor-parallel-size 2 --kv-cache-dtype fp8 --block-size 256 --max-model-len 49152 "
    "--max-num-seqs 64 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.85 --enable-prefix-caching "
    "--speculative-config "
    "'{\"method\":\"dspark\",\"num_speculative_tokens\":5,\"draft_sample_method\":\"probabilistic\"}'"
)
LAUNCHER = ["--distributed-executor-backend", "mp", "--nnodes", "2", "--master-addr", "10.1.0.1", "--master-port",
            "29501"]


def plan(name: str, rank: int = 0, *overrides: str, **place: object):
    profile = load_profile(name, cli_overrides=list(overrides)).profile
    given = Placement(node_rank=rank, master_addr="10.1.0.1", **place)  # type: ignore[arg-type]
    return build_plan(profile, resolve_placement(profile, given))


PIN_0731 = ["--revision", "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"]  # versions.json (W1, W2)


def test_gb10_head_is_the_seeds_reference_command_plus_the_pin_and_launcher_flags() -> None:
    head = plan("gb10-tp2", 0)
    assert head.role == "head"
    assert head.argv[: len(REFERENCE)] == REFERENCE
    assert head.argv[len(REFERENCE):] == [*PIN_0731, *LAUNCHER[:4], "--node-rank", "0", *LAUNCHER[4:]]


def test_a_profile_revision_replaces_the_pin_and_a_local_folder_takes_none(tmp_path: Path) -> None:
    other = "a" * 40
    argv = plan("gb10-tp2", 0, f"model.revision={other}").argv
    assert argv[argv.index("--revision") + 1] == other
    assert "--revision" not in plan("gb10-tp2", 0, model_dir=tmp_path).argv


def test_a_branch_name_as_revision_is_refused_naming_the_field() -> None:
    with pytest.raises(ApplianceError, match=r"model\.revision"):
        load_profile("gb10-tp2", cli_overrides=["model.revision=main"])


def test_gb10_worker_is_headless_with_the_same_engine_args() -> None:
    worker = plan("gb10-tp2", 1)
    assert worker.role == "worker"
    assert worker.argv[: len(REFERENCE)] == REFERENCE
    assert worker.argv[-1] == "--headless"
    assert worker.argv[worker.argv.index("--node-rank") + 1] == "1"


def test_engine_env_reaches_every_rank_unchanged() -> None:
    head, worker = plan("gb10-tp2", 0, "cache.guard=2"), plan("gb10-tp2", 1, "cache.guard=2")
    engine = {k: v for k, v in head.env.items() if k in ENGINE_ENV_KEYS}
    assert engine == {k: v for k, v in worker.env.items() if k in ENGINE_ENV_KEYS}
    assert engine["VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT"] == "2"
    assert engine["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert engine["VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE"] == "1"


def test_the_step_timeout_reaches_every_ranks_engine_and_unset_leaves_the_engines_default() -> None:
    """K26: the multiproc executor's RPC timeout is the engine's env, on the head and the worker alike."""
    for rank in (0, 1):
        assert plan("gb10-tp2", rank).env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "1800"
    assert plan("gb10-tp2", 0, "engine.execute_model_timeout_s=3600").env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == \
        "3600"
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in plan("gb10-tp2", 0, "engine.execute_model_timeout_s=null").env


def test_guard_env_is_set_only_when_the_profile_sets_the_guard_explicitly() -> None:
    assert "VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT" not in plan("gb10-tp2").env
    assert plan("gb10-tp2", 0, "cache.guard=0").env["VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT"] == "0"


def test_fabric_env_on_the_head_uses_the_master_address_and_interface() -> None:
    head = plan("gb10-tp2", 0, fabric_ifname="enp1s0f1np1")
    assert head.env["VLLM_HOST_IP"] == "10.1.0.1"
    assert head.env["NCCL_SOCKET_IFNAME"] == head.env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert head.env["NCCL_IB_DISABLE"] == "0"


def test_multi_node_without_a_master_address_is_refused() -> None:
    profile = load_profile("gb10-tp2").profile
    with pytest.raises(ApplianceError, match="APPLIANCE_MASTER_ADDR"):
        build_plan(profile, resolve_placement(profile, Placement(node_rank=0)))


def test_rank_outside_the_profile_is_refused() -> None:
    with pytest.raises(ApplianceError, match="outside the 2-node"):
        plan("gb10-tp2", 2)


def test_single_node_plans_carry_no_launcher_flags() -> None:
    single = plan("rtx-pro-6000-tp2")
    assert single.role == "single" and "--nnodes" not in single.argv
    assert single.argv[: len(REFERENCE)] == REFERENCE


def test_a_model_dir_replaces_the_positional_and_keeps_the_served_name(tmp_path: Path) -> None:
    argv = plan("rtx-pro-6000-tp2", model_dir=tmp_path).argv
    assert argv[2] == str(tmp_path)
    assert argv[argv.index("--served-model-name") + 1] == "deepseek-ai/DeepSeek-V4-Flash-0731"


def test_v1_runner_with_full_decode_only_renders_the_compilation_config() -> None:
    p = plan("rtx-pro-6000-tp2", 0, "engine.runner=v1", "engine.cudagraph_mode=FULL_DECODE_ONLY")
    assert p.env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert p.argv[p.argv.index("--compilation-config") + 1] == '{"cudagraph_mode":"FULL_DECODE_ONLY"}'


def test_ray_backend_renders_the_ray_way() -> None:
    head = plan("gb10-tp2", 0, "distributed.backend=ray")
    worker = plan("gb10-tp2", 1, "distributed.backend=ray")
    assert head.setup[0][:3] == ["ray", "start", "--head"]
    assert head.argv[-2:] == ["--distributed-executor-backend", "ray"]
    assert worker.argv[:2] == ["ray", "start"] and "--address=10.1.0.1:29501" in worker.argv


def test_cpu_smoke_renders_eager_with_a_fixed_kv_size() -> None:
    p = plan("cpu-smoke")
    assert "--enforce-eager" in p.argv and "--gpu-memory-utilization" not in p.argv
    assert p.argv[p.argv.index("--kv-cache-memory-bytes") + 1] == str(1024**3)
    assert p.env == {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # W6: one rank


@pytest.mark.parametrize("name", list_profiles())
def test_render_json_round_trips_the_plan(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", name, "--format", "json", "--master-addr", "10.1.0.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = plan(name)
    assert data == {"argv": expected.argv, "env": expected.env, "role": expected.role}


def test_render_shell_quotes_the_json_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "rtx-pro-6000-tp2"]) == 0
    command = capsys.readouterr().out.strip().splitlines()[-1]
    assert shlex.split(command) == plan("rtx-pro-6000-tp2").argv


@pytest.mark.parametrize("name", ["cpu-smoke", "gb10-tp2"])
def test_a_non_default_api_port_is_rendered_and_the_default_is_left_to_vllm(name: str) -> None:
    """The API port reaches vLLM only through --port: a profile's server.port that differs from vLLM's default must be
    rendered (on a head as on a single node), or the engine listens where the exporter, the probe and the gate do not
    look. Mutant this kills: the `if p.server.port != DEFAULT_PORT` branch of engine_argv removed."""
    moved = plan(name, 0, "server.port=8123")
    assert moved.argv[moved.argv.index("--port") + 1] == "8123" and moved.argv.count("--port") == 1
    assert "--port" not in plan(name).argv  # 8000 is vLLM's own default
    assert "--port" not in plan(name, 0, f"server.port={DEFAULT_PORT}").argv
