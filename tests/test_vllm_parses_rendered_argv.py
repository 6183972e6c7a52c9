"""Every rendered argv is accepted by vLLM's OWN serve parser (the real package, not a copy of its flags),
and the values vLLM parses are the profile's."""

from __future__ import annotations

import json

import pytest

from appliance.engine_args import parse_serve_argv
from appliance.placement import resolve_placement
from appliance.profile import list_profiles, load_profile
from appliance.render import Placement, build_plan

pytestmark = pytest.mark.usefixtures("vllm_engine")  # vLLM's own parser: the engine marker follows


def rendered(name: str, rank: int = 0, *overrides: str) -> list[str]:
    profile = load_profile(name, cli_overrides=list(overrides)).profile
    plan = build_plan(profile, resolve_placement(profile, Placement(node_rank=rank, master_addr="10.1.0.1")))
    return plan.argv


@pytest.mark.parametrize("name", list_profiles())
def test_vllm_accepts_every_profile_on_every_rank_with_the_profiles_values(name: str) -> None:
    profile = load_profile(name).profile
    assert profile.hardware.nodes >= 1
    for rank in range(profile.hardware.nodes):
        parsed = parse_serve_argv(rendered(name, rank))
        assert parsed["model"] == profile.model.checkpoint
        assert parsed["max_model_len"] == profile.limits.max_model_len
        assert parsed["tensor_parallel_size"] == profile.parallel.tensor
        assert parsed["enable_prefix_caching"] is profile.cache.prefix_caching
        if profile.cache.block_size:
            assert parsed["block_size"] == profile.cache.block_size
        if profile.hardware.nodes > 1:
            assert (parsed["nnodes"], parsed["node_rank"], parsed["headless"]) == (2, rank, rank > 0)
            assert parsed["distributed_executor_backend"] == "mp"
        spec = parsed.get("speculative_config")
        if profile.speculative:
            spec = spec if isinstance(spec, dict) else json.loads(str(spec))
            assert spec["method"] == profile.speculative.method
            assert spec["num_speculative_tokens"] == profile.speculative.num_tokens
        else:
            assert spec is None


def test_v1_escape_hatch_renders_a_compilation_config_vllm_accepts() -> None:
    parsed = parse_serve_argv(rendered("rtx-pro-6000-tp2", 0, "engine.runner=v1",
                                       "engine.cudagraph_mode=FULL_DECODE_ONLY"))
    config = parsed["compilation_config"]
    mode = config.get("cudagraph_mode") if isinstance(config, dict) else config.cudagraph_mode
    assert "FULL_DECODE_ONLY" in str(mode)


def test_vllm_rejects_an_unknown_flag_and_a_bad_choice() -> None:
    argv = rendered("cpu-smoke")
    with pytest.raises(ValueError, match="unrecognized arguments: --no-such-flag"):
        parse_serve_argv([*argv, "--no-such-flag"])
    with pytest.raises(ValueError, match="kv-cache-dtype"):
        parse_serve_argv([*argv, "--kv-cache-dtype", "fp7"])
    with pytest.raises(ValueError, match="invalid reasoning parser"):
        parse_serve_argv([*argv, "--reasoning-parser", "deepseek_v9"])


def test_vllm_accepts_the_autotune_switch_and_the_capture_list_computed_from_the_profile() -> None:
    # K31 and K32: both render only when the profile asks, and vLLM's own parser takes what they render.
    parsed = parse_serve_argv(rendered("gb10-tp2", 0, "engine.flashinfer_autotune=false",
                                       "engine.cudagraph_capture_sizes=profile", "limits.max_num_seqs=128"))
    assert parsed["enable_flashinfer_autotune"] is False
    config = parsed["compilation_config"]
    sizes = config.get("cudagraph_capture_sizes") if isinstance(config, dict) else config.cudagraph_capture_sizes
    assert max(sizes) == 128 * 6 and 6 in sizes


def test_passthrough_reaches_vllms_parser_as_given_and_last(tmp_path) -> None:
    """engine.extra_args / `-- ARGS`: vLLM's own parser reads the passed values (rendered after every managed flag);
    it checks that a chat template path exists, so the template is a real file."""
    template = tmp_path / "tpl.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    profile = load_profile("rtx-pro-6000-tp2", cli_extra_args=["--chat-template", str(template),
                                                               "--load-format=safetensors", "--seed=-1"]).profile
    parsed = parse_serve_argv(build_plan(profile).argv)
    assert (parsed["chat_template"], parsed["load_format"], parsed["seed"]) == (str(template), "safetensors", -1)
    assert parsed["max_model_len"] == profile.limits.max_model_len
