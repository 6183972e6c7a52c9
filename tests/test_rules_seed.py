"""Rules held to the seed's own lines (issue 15): each test quotes the line it follows."""

from __future__ import annotations

from dataclasses import replace

from appliance.channels.capabilities import channel_capabilities
from appliance.profile import load_profile
from appliance.rules import context_for, evaluate


def _ctx(profile: str, *overrides: str):
    return context_for(load_profile(profile, cli_overrides=list(overrides)).profile)


def _hits(ctx, rule_id: str):
    return [f for f in evaluate(ctx) if f.rule == rule_id]


# Seed: "VLLM_USE_V2_MODEL_RUNNER=0 → V1, guard still 5/5, c=1 2/2" (acceptance on the exact published SHA);
# "Upstream vllm-project#51768 added _validate_mrv1_piecewise_cudagraph ... now fails to boot" (a later merge).
def test_k5_v1_with_piecewise_is_a_warning_on_the_pinned_engine_which_predates_51768() -> None:
    # The fork's facts (0.27.1's sources + overlay) hold no _validate_mrv1_piecewise_cudagraph marker.
    assert not channel_capabilities("jasl-sm120-20260809").refuses_v1_piecewise
    hits = _hits(_ctx("rtx-pro-6000-tp2", "engine.runner=v1"), "K5")
    assert [h.severity for h in hits] == ["warning"]
    assert "#51768" in hits[0].message and "FULL_DECODE_ONLY" in hits[0].fix


def test_k5_v1_with_piecewise_is_an_error_on_an_engine_that_carries_51768() -> None:
    """An engine whose sources hold the #51768 check (its marker found) refuses; the rule reads the facts."""
    ctx = _ctx("rtx-pro-6000-tp2", "engine.runner=v1")
    facts = replace(ctx.channel.facts, markers={**ctx.channel.facts.markers,
                                                "v1-piecewise-refusal": {"found": True}})
    later = replace(ctx, channel=type(ctx.channel).named(ctx.channel.name, facts))
    hits = _hits(later, "K5")
    assert [h.severity for h in hits] == ["error"] and "fails to boot" in hits[0].message


# --- item 1: provenance says what was validated, on what ----------------------------------------------------
# Seed: "This is the first head validated on both SM121 and SM120" (0f59188db1, tag ...-20260804, V1 the default);
# "The default now applies to every DSpark config, including shapes not measured here — ... single-node setups";
# "if you ... see something worse, VLLM_USE_V2_MODEL_RUNNER=0 returns you to V1".

def test_v2_on_sm120_single_node_warns_that_the_seed_measured_v1_and_names_the_fallback() -> None:
    hits = _hits(_ctx("rtx-pro-6000-tp2"), "P1")
    assert [h.severity for h in hits] == ["warning"]
    assert "0f59188db1" in hits[0].message and "runner v1" in hits[0].message and "guard existed" in hits[0].message
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in hits[0].fix
    # The seed's acceptance ran V2 on GB10, but at max_model_len 131072: "other context lengths" were not measured.
    gb10 = _hits(_ctx("gb10-tp2"), "P1")
    assert [(h.path, h.value) for h in gb10] == [("limits.max_model_len", 49152)] and "131072" in gb10[0].message
    assert not _hits(_ctx("gb10-tp2", "limits.max_model_len=131072"), "P1")


def test_profiles_show_head_runner_and_checks(capsys) -> None:
    import json

    from appliance.cli import main

    assert main(["profiles", "-o", "wide"]) == 0
    table = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "0f59188db1; runner v1; no guard" in table["rtx-pro-6000-tp2"]
    assert "d44e224ab9; runner v2; mml 131072" in table["gb10-tp2"]
    assert " partial " in table["rtx-pro-6000-tp2-nvfp4"] and "gsm8k" in table["rtx-pro-6000-tp2-nvfp4"]
    assert main(["profiles", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["rtx-pro-6000-tp2"]["provenance"]["measured"]["tag"] == "sm120-pr-41834-stable-preview-20260804"
    # Seed: "Running without speculation is also fully supported and validated."
    # It says so but reports no measurement of it: partial, with the quote.
    nospec = rows["rtx-pro-6000-tp2-nospec"]["provenance"]
    assert nospec["status"] == "partial" and "fully supported and validated" in nospec["measured"]["quote"]
    assert "ctx_tg (tg128 at depth)" in rows["gb10-tp2"]["provenance"]["measured"]["figures"]


# --- item 6: NVFP4 advice and the MoE backend in the log ----------------------------------------------------
# Seed: "The NVFP4 MoE auto-selects the FlashInfer CUTLASS backend"; "MXFP4 remains the better practical choice on
# consumer Blackwell".

def test_nvfp4_on_sm12x_is_advised_against_with_the_seeds_reasons() -> None:
    hits = [h for h in _hits(_ctx("gb10-tp2-nvfp4"), "K8") if h.path == "model.quantization"]
    assert [h.severity for h in hits] == ["warning"]
    assert "~4 GiB/GPU larger" in hits[0].message and "MXFP4" in hits[0].fix


def _logscan(tmp_path, backend: str):
    import json
    import subprocess
    import sys
    from pathlib import Path

    head = Path(__file__).parent / "fixtures" / "logs" / "deepseek" / "gb10-tp2-dspark-head.log"
    log = tmp_path / "nvfp4.log"
    moe = (f"(EngineCore pid=187) INFO 05-01 19:55:54 [nvfp4.py:243] Using '{backend}' NvFp4 MoE backend out of "
           f"potential backends: ['FLASHINFER_CUTLASS', 'MARLIN'].")
    log.write_text(head.read_text() + moe + "\n")
    out = subprocess.run([sys.executable, "-m", "appliance", "logscan", str(log), "--profile", "gb10-tp2-nvfp4",
                          "--json"], capture_output=True, text=True, timeout=60, check=False)
    findings = json.loads(out.stdout)["findings"]
    return next(f for f in findings if f["name"] == "nvfp4-moe-backend")


def test_nvfp4_serve_log_must_name_the_flashinfer_cutlass_moe_backend(tmp_path) -> None:
    assert _logscan(tmp_path, "FLASHINFER_CUTLASS")["status"] == "pass"
    other = _logscan(tmp_path, "MARLIN")
    assert other["status"] == "fail" and other["severity"] == "warning" and other["rule"] == "K8"


# --- item 7: what the checkpoint owns is derived; K20 calibrated on the seed's KV -----------------------------
# Seed: "a 3× smaller KV cache (6.25 GiB vs ~18.5 GiB)"; "The new checkpoint ships no MTP heads — enorm, hnorm,
# e_proj, h_proj and shared_head are absent from the weight index".

def test_k20_reproduces_the_seeds_two_kv_measurements() -> None:
    from appliance.rules.hardware import predicted_kv_gib

    assert abs(predicted_kv_gib(_ctx("rtx-pro-6000-tp2"))[0] - 6.25) < 0.1
    assert abs(predicted_kv_gib(_ctx("gb10-tp2"))[0] - 18.5) < 0.2


def test_a_quantization_that_contradicts_the_checkpoint_is_refused_and_k8_judges_the_checkpoint() -> None:
    hits = evaluate(_ctx("rtx-pro-6000-tp2-nvfp4", "model.quantization=mxfp4", "parallel.expert=true"))
    assert ("M1", "error") in {(h.rule, h.severity) for h in hits}
    assert ("K8", "parallel.expert") in {(h.rule, h.path) for h in hits}  # still an NVFP4 checkpoint


def test_mtp_heads_come_from_the_weight_index_not_config_json(tmp_path) -> None:
    import json

    from appliance.catalogue import load_catalogue
    from appliance.profile.checkpoint_facts import mtp_heads_from_index
    from appliance.run.model_location import read_facts

    dspark_0731 = ["mtp.0.main_norm.weight", "mtp.0.main_proj.weight", "mtp.1.main_proj.weight", "layers.0.x"]
    original = ["mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.e_proj.weight", "mtp.0.shared_head.head.weight"]
    assert mtp_heads_from_index(dspark_0731) == 0 and mtp_heads_from_index(original) == 1
    # A config that claims a next-n layer, over an index without head weights: no MTP heads, so K3 refuses mtp.
    (tmp_path / "config.json").write_text(json.dumps({"num_nextn_predict_layers": 1}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 160 * 10**9}, "weight_map": dict.fromkeys(dspark_0731, "a.safetensors")}))
    facts = read_facts(tmp_path, load_catalogue().checkpoint("nvidia/DeepSeek-V4-Flash-NVFP4"))
    assert facts.mtp_heads == 0
    p = load_profile("rtx-pro-6000-tp2-nvfp4-mtp").profile
    assert any(f.rule == "K3" and f.severity == "error" for f in evaluate(context_for(p, facts)))


def test_quantization_comes_from_the_checkpoints_config_when_it_says(tmp_path) -> None:
    import json

    from appliance.catalogue import load_catalogue
    from appliance.run.model_location import read_facts

    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_algo": "NVFP4"}}))
    facts = read_facts(tmp_path, load_catalogue().checkpoint("deepseek-ai/DeepSeek-V4-Flash-0731"))
    assert facts.quantization == "nvfp4"
    p = load_profile("rtx-pro-6000-tp2").profile
    assert any(f.rule == "M1" for f in evaluate(context_for(p, facts)))


# --- item 5: DSpark acceptance against the seed's reference ---------------------------------------------------
# Seed: "2.772 (V1) vs 2.710 (V2) on the same formula and sample size"; "the 7th draft position accepted 0.000".

def _spec_logscan(tmp_path, mean: float, positions: str):
    import json
    import subprocess
    import sys
    from pathlib import Path

    head = Path(__file__).parent / "fixtures" / "logs" / "deepseek" / "gb10-tp2-dspark-head.log"
    line = (f"(APIServer pid=211) INFO 08-09 10:20:00 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
            f"{mean}, Accepted throughput: 9.0 tokens/s, Drafted throughput: 20.0 tokens/s, Accepted: 900 tokens, "
            f"Drafted: 2000 tokens, Per-position acceptance rate: {positions}, Avg Draft acceptance rate: 35.5%")
    log = tmp_path / "spec.log"
    log.write_text(head.read_text() + line + "\n")
    out = json.loads(subprocess.run([sys.executable, "-m", "appliance", "logscan", str(log), "--profile", "gb10-tp2",
                                     "--json"], capture_output=True, text=True, timeout=60, check=False).stdout)
    return out["logs"][0]["facts"], next(f for f in out["findings"] if f["name"] == "dspark-acceptance-reference")


def test_dspark_acceptance_near_the_seeds_reference_passes_with_each_position_read(tmp_path) -> None:
    facts, finding = _spec_logscan(tmp_path, 2.71, "0.700, 0.450, 0.300, 0.160, 0.100")
    assert finding["status"] == "pass" and "per position 0.7, 0.45, 0.3, 0.16, 0.1" in finding["detail"]
    assert facts["spec_pos1_rate"] == 0.7 and facts["spec_pos5_rate"] == 0.1 and "spec_pos6_rate" not in facts


def test_dspark_acceptance_far_below_the_reference_warns(tmp_path) -> None:
    _, finding = _spec_logscan(tmp_path, 1.2, "0.150, 0.040, 0.010, 0.000, 0.000")
    assert finding["status"] == "fail" and finding["severity"] == "warning" and finding["rule"] == "K2"
    assert "metric unnamed: 2.772 V1 / 2.710 V2 at nst=5" in finding["detail"]


def test_v2_dspark_on_a_shape_the_seed_did_not_measure_warns_with_the_fallback() -> None:
    # Seed: "The default now applies to every DSpark config, including shapes not measured here — TP=4, other
    # context lengths, the NVFP4 checkpoint, single-node setups."
    for name, paths in (("gb10-tp2-nvfp4-dspark", ["engine.runner"]),
                        ("rtx-5090-tp8", ["engine.runner", "parallel.tensor"])):
        hits = _hits(_ctx(name), "P1")
        assert [h.path for h in hits] == paths and {h.severity for h in hits} == {"warning"}, name
        assert "VLLM_USE_V2_MODEL_RUNNER=0" in hits[0].fix
    assert not _hits(_ctx("gb10-tp2-nvfp4-dspark", "engine.runner=v1"), "P1")


# --- issue 21 item 2: provenance says only what was measured ------------------------------------------------
# Seed: "Everything above was measured on one configuration: 2-node TP=2, DeepSeek-V4-Flash-0731, DSpark
# num_speculative_tokens: 5, fp8 KV, max_model_len 131072, prefix caching on, GB10 (SM121)."

def test_no_profile_claims_validated_since_no_battery_passed_every_check_at_a_shipped_shape() -> None:
    # The harness: anything not PASS is a blocker. d44e224ab9's battery passed 17 of 18 (spec_decode wedged) at
    # max_model_len 131072, and gb10-tp2 ships 49152: accepted with blockers (partial), each one named.
    from appliance.profile import list_profiles

    status = {n: load_profile(n).profile.provenance for n in list_profiles()}
    assert not {n for n, p in status.items() if p.status == "validated"}
    gb10 = status["gb10-tp2"]
    assert gb10.status == "partial" and any("spec_decode" in b for b in gb10.blockers)
    assert any("131072" in b and "49152" in b for b in gb10.blockers)
    assert status["rtx-pro-6000-tp2"].status == "partial" and status["rtx-pro-6000-tp2"].measured.runner == "v1"
    assert status["gb10-tp2-nospec"].status == status["rtx-pro-6000-tp2-nospec"].status == "partial"


def test_the_spec_decode_wedge_is_recorded_as_unverified_coverage_not_a_pass() -> None:
    m = load_profile("gb10-tp2").profile.provenance.measured
    assert m is not None and any("tests/v1/spec_decode" in u for u in m.unverified)
    assert not any("spec_decode" in c for c in m.checks)


def test_v2_without_dspark_warns_that_the_seed_measured_v2_with_dspark_only() -> None:
    for name, what in (("gb10-tp2-nospec", "without speculative decoding"), ("gb10-tp2-nvfp4-mtp", "with MTP")):
        hits = [h for h in _hits(_ctx(name), "P1") if h.path == "engine.runner"]
        assert len(hits) == 1 and what in hits[0].message and "DSpark only" in hits[0].message, name
    assert not [h for h in _hits(_ctx("gb10-tp2-nospec", "engine.runner=v1", "engine.cudagraph_mode=FULL"), "P1")
                if h.path == "engine.runner"]


def test_a_tp_size_that_changes_heads_per_rank_warns_naming_the_num_heads_topk_gate() -> None:
    hits = [h for h in _hits(_ctx("rtx-5090-tp8"), "P1") if h.path == "parallel.tensor"]
    assert len(hits) == 1 and "8 heads per rank" in hits[0].message and "32 per rank" in hits[0].message
    assert "#50720" in hits[0].message
    assert not [h for h in _hits(_ctx("gb10-tp2"), "P1") if h.path == "parallel.tensor"]
