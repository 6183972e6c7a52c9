"""`appliance run` pieces that need no engine: supervisord.conf, crash policy, model facts, caches."""

from __future__ import annotations

import configparser
import json
import shlex
from pathlib import Path

import pytest

from appliance.catalogue import load_catalogue
from appliance.errors import ApplianceError
from appliance.multinode.netif import ipv4_of
from appliance.render.plan import ServePlan
from appliance.render.supervisord import STOP_WAIT_S, RunFiles, render_conf
from appliance.run.caches import cache_env
from appliance.run.crashguard import CrashPolicy
from appliance.run.model_location import in_hf_cache, locate, read_facts


def conf_for(plan: ServePlan, tmp_path: Path, env: dict[str, str] | None = None) -> configparser.RawConfigParser:
    text = render_conf(plan, RunFiles(tmp_path, tmp_path / "s.sock"), env or plan.env, ["exporter", "--x"])
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    return parser


def test_percent_signs_are_escaped_and_the_command_round_trips(tmp_path: Path) -> None:
    plan = ServePlan(["vllm", "serve", "m", "--speculative-config", '{"a":"50%"}'], {"K": 'v "q" 5%'}, "single")
    conf = conf_for(plan, tmp_path)
    command = conf.get("program:vllm", "command")
    assert shlex.split(command.replace("%%", "%")) == plan.argv
    assert conf.get("program:vllm", "environment") == 'K="v \\"q\\" 5%%"'


def test_engine_program_is_stopped_as_a_group_with_a_long_timeout_and_bounded_retries(tmp_path: Path) -> None:
    conf = conf_for(ServePlan(["vllm", "serve", "m"], {}, "single"), tmp_path)
    vllm = dict(conf.items("program:vllm"))
    assert vllm["stopasgroup"] == vllm["killasgroup"] == "true"
    assert int(vllm["stopwaitsecs"]) == STOP_WAIT_S["gpu"] >= 30  # render_conf's default: the longer wait
    assert vllm["autorestart"] == "true" and int(vllm["startretries"]) <= 5
    assert vllm["stdout_logfile"] == str(tmp_path / "vllm.log")
    assert conf.get("program:logtail", "stdout_logfile") == "/dev/stdout"
    assert {"PROCESS_STATE_FATAL", "PROCESS_STATE_EXITED", "PROCESS_STATE_STOPPED"} <= set(
        conf.get("eventlistener:crashguard", "events").split(","))  # a stop reaps the engine's group too


def test_secrets_are_never_written_into_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_in_env")
    text = render_conf(ServePlan(["vllm"], {"A": "1"}, "single"), RunFiles(tmp_path, tmp_path / "s"), {"A": "1"},
                       ["e"])
    assert "hf_secret_in_env" not in text


def test_crash_policy_gives_up_only_on_repeated_exits_inside_the_window() -> None:
    policy = CrashPolicy(limit=3, window_s=60)
    assert not policy.record_exit(0) and not policy.record_exit(100)  # far apart: a restart each time
    assert not policy.record_exit(130)
    assert policy.record_exit(140)  # 100, 130, 140: three inside 60 s


def test_caches_are_keyed_by_lock_and_profile_digest(tmp_path: Path) -> None:
    a = cache_env("a" * 64, "b" * 64, tmp_path)
    b = cache_env("a" * 64, "c" * 64, tmp_path)
    assert a["TRITON_CACHE_DIR"] != b["TRITON_CACHE_DIR"]
    assert a["VLLM_CACHE_ROOT"].startswith(str(tmp_path / "aaaaaaaaaaaa-bbbbbbbbbbbb"))
    assert all(Path(p).is_dir() for p in a.values())
    assert "HF_HOME" not in a


def _checkpoint(tmp_path: Path, config: dict[str, object], total: int | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    if total is not None:
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}}))
    return tmp_path


def test_real_config_and_index_replace_catalogue_figures(tmp_path: Path) -> None:
    base = load_catalogue().checkpoint("deepseek-ai/DeepSeek-V4-Flash-0731")
    ck = _checkpoint(tmp_path, {"dspark_block_size": 4, "num_nextn_predict_layers": 3}, total=171_000_000_000)
    facts = read_facts(ck, base)
    assert (facts.dspark_block_size, facts.mtp_heads, facts.size_bytes) == (4, 0, 171_000_000_000)
    assert facts.source == f"config.json at {ck}"


def test_a_checkpoint_without_dspark_reports_its_mtp_layers(tmp_path: Path) -> None:
    base = load_catalogue().checkpoint("nvidia/DeepSeek-V4-Flash-NVFP4")
    facts = read_facts(_checkpoint(tmp_path, {"num_nextn_predict_layers": 1}), base)
    assert (facts.dspark_block_size, facts.mtp_heads) == (None, 1)


def test_model_dir_without_config_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match=r"holds no config\.json"):
        locate("x/y", None, tmp_path / "missing")


def test_hf_cache_snapshot_is_found_by_its_commit_and_no_other(tmp_path: Path) -> None:
    rev, other = "a" * 40, "b" * 40
    _checkpoint(tmp_path / "models--org--name" / "snapshots" / rev, {})
    assert in_hf_cache("org/name", rev, tmp_path)
    assert not in_hf_cache("org/name", other, tmp_path)


def test_loopback_address_and_unknown_interface() -> None:
    assert ipv4_of("lo") == "127.0.0.1"
    with pytest.raises(ApplianceError, match="no IPv4 address"):
        ipv4_of("nosuchif0")


def test_the_smoke_model_is_prepared_where_run_looks_for_the_cpu_smoke_checkpoint(monkeypatch) -> None:
    from appliance.profile import load_profile
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, default_smoke_model_dir

    monkeypatch.delenv("APPLIANCE_MODEL_DIR", raising=False)
    assert load_profile("cpu-smoke").profile.model.checkpoint == SMOKE_CHECKPOINT
    assert default_smoke_model_dir() == prepared_model_dir(SMOKE_CHECKPOINT)


def test_a_model_dir_under_home_is_the_same_folder_for_run_and_smoke_model(monkeypatch) -> None:
    from appliance.settings import load_settings
    from appliance.smoke_model import default_smoke_model_dir

    monkeypatch.setenv("APPLIANCE_MODEL_DIR", "~/models/smol")
    monkeypatch.setenv("APPLIANCE_LOG_DIR", "~/logs")
    settings = load_settings()
    assert settings.model_dir == default_smoke_model_dir() == Path.home() / "models" / "smol"
    assert settings.log_dir == Path.home() / "logs"
    monkeypatch.delenv("APPLIANCE_MODEL_DIR")
    monkeypatch.setenv("APPLIANCE_HOME", "~/ahome")  # where smoke-model prepares it is where run looks
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT

    assert default_smoke_model_dir() == prepared_model_dir(SMOKE_CHECKPOINT)
    assert prepared_model_dir(SMOKE_CHECKPOINT).is_relative_to(Path.home() / "ahome")


# One change per section that shapes compiled kernels and CUDA graphs (a runner change first: the case).
ENGINE_SHAPING = {"engine": "engine.runner=v1", "cache": "cache.block_size=128", "limits": "limits.max_num_seqs=32",
                  "speculative": "speculative.num_tokens=6", "parallel": "parallel.expert=true",
                  "model": "model.revision='a1b2c3d4e5f60718293a4b5c6d7e8f9012345678'",
                  "hardware": "hardware.gpu=rtx-pro-6000"}


@pytest.mark.parametrize("section", sorted(ENGINE_SHAPING))
def test_cache_key_ignores_ports_and_names_but_not_engine_settings(section: str) -> None:
    """The compile caches are keyed by the engine digest: a port or a name keeps them warm, a change to what the
    engine compiles does not reuse them. Mutant this kills (applied, run, seen failing, reverted): `"engine"` added to
    appliance/profile/loader.py's _NOT_ENGINE, which the old test (limits only) let pass, so stale compile caches
    were reused after a runner change; likewise any other section listed here."""
    from appliance.profile import load_profile
    from appliance.profile.loader import engine_digest

    base = engine_digest(load_profile("gb10-tp2").profile)
    moved = load_profile("gb10-tp2", cli_overrides=["server.port=9999", "server.health_port=9998",
                                                    "description=x", "distributed.master_port=29600"]).profile
    assert engine_digest(moved) == base
    changed = load_profile("gb10-tp2", cli_overrides=[ENGINE_SHAPING[section]]).profile
    assert getattr(changed, section) != getattr(load_profile("gb10-tp2").profile, section)
    assert engine_digest(changed) != base, f"{ENGINE_SHAPING[section]} must key a new compile cache"


def test_the_engine_and_every_setup_step_run_this_environments_programs(vllm_engine: Path) -> None:
    """supervisord's PATH may lack this environment's bin/: `vllm` and a Ray head's `ray start` are made
    absolute where this environment has them."""
    import sys

    from appliance.run.launch import absolute_programs as _resolved

    bindir = Path(sys.executable).parent
    plan = ServePlan(role="head", argv=["vllm", "serve", "m"], env={}, setup=[["supervisorctl", "status"]])
    resolved = _resolved(plan)
    assert resolved.argv == [str(bindir / "vllm"), "serve", "m"]
    assert resolved.setup == [[str(bindir / "supervisorctl"), "status"]]
    assert _resolved(ServePlan(role="single", argv=["no-such-program-here"], env={})).argv == ["no-such-program-here"]
