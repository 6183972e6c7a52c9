"""Pitfalls reported in public since the seed (issue 21 item 7), its missing signatures (item 4) and the rules
whose severity a source did not hold up (K3, K7, K9): each with the case that fires and the one that does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.catalogue import load_catalogue
from appliance.doctor.report import check_kernel, kernel_release
from appliance.health.context import lock_versions
from appliance.health.expect import Judge
from appliance.health.scan import scan_file
from appliance.health.table import load_table
from appliance.lock import ChannelLock, channel_lock, load_lock
from appliance.placement import resolve_placement
from appliance.profile import load_profile
from appliance.profile.graph_sizes import engine_largest_capture, profile_capture_sizes, widest_decode_batch
from appliance.render import Placement, build_plan
from appliance.rules import context_for, evaluate
from appliance.rules.base import Channel
from appliance.rules.pitfalls import FLASHINFER_DSV4_GAP, channel_package

GB10 = load_catalogue().gpus["gb10"]


def profile(name: str, *overrides: str):
    return load_profile(name, cli_overrides=list(overrides)).profile


def hits(name: str, rule: str, *overrides: str, lock: ChannelLock | None = None, checkpoint=None) -> list:
    """The findings of one rule; `lock`: the profile's channel with another lock (its facts unchanged)."""
    p = profile(name, *overrides)
    ctx = context_for(p, checkpoint)
    if lock is not None:
        from dataclasses import replace

        ctx = replace(ctx, channel=Channel(lock, ctx.channel.facts, ctx.channel.caps))
    return [f for f in evaluate(ctx) if f.rule == rule]


def plan(name: str, *overrides: str):
    p = profile(name, *overrides)
    return build_plan(p, resolve_placement(p, Placement(node_rank=0, master_addr="10.1.0.1")))


# --- K31 FlashInfer autotuning on multi-node TP -------------------------------------------------------------

def test_multi_node_tp_with_autotuning_at_the_engine_default_warns_and_off_renders_the_flag():
    found = hits("gb10-tp2", "K31")
    assert [(f.severity, f.path) for f in found] == [("warning", "engine.flashinfer_autotune")]
    assert "#52291" in found[0].reason and "2 nodes" in found[0].message
    assert not hits("gb10-tp2", "K31", "engine.flashinfer_autotune=false")
    assert "--no-enable-flashinfer-autotune" in plan("gb10-tp2", "engine.flashinfer_autotune=false").argv
    assert "--enable-flashinfer-autotune" in plan("gb10-tp2", "engine.flashinfer_autotune=true").argv
    # The default renders nothing: the seed's reference command stays flag for flag.
    assert not [a for a in plan("gb10-tp2").argv if "autotune" in a]


def test_one_node_shares_its_autotune_cache_between_ranks_so_k31_stays_quiet():
    assert not hits("rtx-pro-6000-tp2", "K31")


# --- K32 capture sizes --------------------------------------------------------------------------------------

def test_the_engine_default_covers_the_shipped_dspark_decode_batch():
    p = profile("gb10-tp2")  # 64 seqs x (1 + 5) = 384 <= min(768, 512, 8192)
    assert (widest_decode_batch(p), engine_largest_capture(p)) == (384, 512)
    assert not hits("gb10-tp2", "K32")


def test_a_decode_batch_past_the_engines_512_cap_warns_and_profile_mode_captures_every_width():
    found = hits("gb10-tp2", "K32", "limits.max_num_seqs=128")  # 128 x 6 = 768 > 512
    assert found and "768 tokens per decode step" in found[0].message and "up to 512" in found[0].message
    assert not hits("gb10-tp2", "K32", "limits.max_num_seqs=128", "engine.cudagraph_capture_sizes=profile")
    p = profile("gb10-tp2", "limits.max_num_seqs=128", "engine.cudagraph_capture_sizes=profile")
    sizes = profile_capture_sizes(p)
    assert {n * 6 for n in range(1, 129)} <= set(sizes) and max(sizes) == 768
    assert sizes == sorted(set(sizes)) and {1, 2, 4, 8, 248, 256, 272} <= set(sizes)
    argv = plan("gb10-tp2", "limits.max_num_seqs=128", "engine.cudagraph_capture_sizes=profile").argv
    config = json.loads(argv[argv.index("--compilation-config") + 1])
    assert config == {"cudagraph_capture_sizes": sizes}


def test_capture_sizes_never_exceed_max_num_batched_tokens():
    p = profile("gb10-tp2", "limits.max_num_seqs=256", "limits.max_num_batched_tokens=1024",
                "engine.cudagraph_capture_sizes=profile")
    assert max(profile_capture_sizes(p)) == 1024 == widest_decode_batch(p)


def test_v1_graph_mode_and_capture_list_share_one_compilation_config():
    argv = plan("gb10-tp2", "engine.runner=v1", "engine.cudagraph_mode=FULL_DECODE_ONLY",
                "engine.cudagraph_capture_sizes=profile").argv
    config = json.loads(argv[argv.index("--compilation-config") + 1])
    assert config["cudagraph_mode"] == "FULL_DECODE_ONLY" and max(config["cudagraph_capture_sizes"]) == 384
    assert argv.count("--compilation-config") == 1


# --- K33 fixed KV bytes -------------------------------------------------------------------------------------

def test_a_fixed_kv_size_on_a_gpu_profile_warns_but_the_cpu_smoke_profile_keeps_its_own():
    found = hits("gb10-tp2", "K33", "limits.kv_cache_memory_gib=12")
    assert found and "skips vLLM's memory profiling" in found[0].message and "#56698" in found[0].reason
    assert not hits("cpu-smoke", "K33")  # cpu-smoke sets 1 GiB on purpose; the CPU worker sizes it another way


# --- K34 nvfp4_ds_mla ---------------------------------------------------------------------------------------

def test_nvfp4_ds_mla_is_refused_on_sm12x_with_the_engine_code_it_rests_on():
    found = hits("rtx-pro-6000-tp2", "K34", "cache.kv_dtype=nvfp4_ds_mla")
    assert [(f.severity, f.path) for f in found] == [("error", "cache.kv_dtype")]
    assert "sparse_swa.py" in found[0].reason and "#22" in found[0].reason
    assert not hits("rtx-pro-6000-tp2", "K34")


# --- K36 dual HCA -------------------------------------------------------------------------------------------

def test_two_hcas_render_merge_nics_and_a_pinned_gid_index_warns():
    sets = ("distributed.nccl_ib_hca=rocep1s0f1,roceP2p1s0f1",)
    env = plan("gb10-tp2", *sets).env
    assert env["NCCL_IB_MERGE_NICS"] == "1" and "NCCL_IB_GID_INDEX" not in env
    assert not hits("gb10-tp2", "K36", *sets)
    pinned = hits("gb10-tp2", "K36", *sets, "distributed.nccl_ib_gid_index=3")
    assert [f.path for f in pinned] == ["distributed.nccl_ib_gid_index"] and "drift" in pinned[0].reason
    assert plan("gb10-tp2", *sets, "distributed.nccl_ib_gid_index=3").env["NCCL_IB_GID_INDEX"] == "3"
    kept_apart = hits("gb10-tp2", "K36", *sets, "distributed.nccl_ib_merge_nics=false")
    assert [f.path for f in kept_apart] == ["distributed.nccl_ib_merge_nics"]
    assert plan("gb10-tp2", *sets, "distributed.nccl_ib_merge_nics=false").env["NCCL_IB_MERGE_NICS"] == "0"


def test_one_hca_renders_no_merge_and_says_nothing():
    env = plan("gb10-tp2", "distributed.nccl_ib_hca=rocep1s0f0").env
    assert "NCCL_IB_MERGE_NICS" not in env
    assert not hits("gb10-tp2", "K36", "distributed.nccl_ib_hca=rocep1s0f0", "distributed.nccl_ib_gid_index=3")


# --- K37 FlashInfer 0.7.0: a fact of the stack ---------------------------------------------------------------

FORK = "jasl-sm120-20260809"


def _lock_with(flashinfer: str, channel: str = FORK) -> ChannelLock:
    lock = channel_lock(channel)
    packages = [p.model_copy(update={"version": flashinfer}) if p.name == "flashinfer-python" else p
                for p in lock.packages]
    return lock.model_copy(update={"packages": packages})


def test_a_channel_on_flashinfer_070_is_refused_and_its_post1_is_not():
    assert {"0.7.0"} == FLASHINFER_DSV4_GAP
    found = hits("gb10-tp2", "K37", lock=_lock_with("0.7.0"))
    assert [(f.severity, f.path) for f in found] == [("error", "engine.channel")] and "#58069" in found[0].reason
    assert f"channel {FORK}" in str(found[0].value)
    assert not hits("gb10-tp2", "K37", lock=_lock_with("0.7.0.post1"))
    assert not hits("gb10-tp2", "K37")  # the fork channel's lock: 0.6.16.post3
    assert channel_package(channel_lock(FORK), "flashinfer-python") == "0.6.16.post3"
    assert channel_package(channel_lock(FORK), "no-such-package") is None


def test_each_channel_is_judged_by_its_own_flashinfer_pin():
    # Upstream vLLM 0.32.0 pins 0.7.0.post1 (its wheel's metadata): the upstream DeepSeek channel passes as locked.
    upstream = [n for n, c in load_lock().channels.items()
                if c.target == "gpu" and c.engine.source == "pypi"]
    assert upstream
    for name in upstream:
        assert channel_package(channel_lock(name), "flashinfer-python") not in FLASHINFER_DSV4_GAP
        assert hits("gb10-tp2", "K37", lock=_lock_with("0.7.0", name))


# --- K38 V2 and structured output on this pin ----------------------------------------------------------------

def test_v2_on_the_pin_that_declined_50843_warns_and_v1_or_another_engine_does_not():
    found = hits("gb10-tp2", "K38")
    assert found and "#50843" in found[0].reason and "inert on our default" in found[0].reason
    assert not hits("gb10-tp2", "K38", "engine.runner=v1", "engine.cudagraph_mode=FULL_DECODE_ONLY")
    fork = channel_lock(FORK)
    later = fork.model_copy(update={"engine": fork.engine.model_copy(
        update={"ref": "sm120-pr-41834-stable-preview-20260901", "commit": "abcdef1234"})})
    assert not hits("gb10-tp2", "K38", lock=later)  # unknown whether it carries #50843: nothing claimed
    upstream = next(n for n, c in load_lock().channels.items() if c.target == "gpu" and c.engine.source == "pypi")
    assert not hits("gb10-tp2", "K38", lock=channel_lock(upstream))  # an upstream release: not the seed's account


# --- K35 the GB10 kernel -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("release", "cmdline", "status"), [
    ("7.0.0-1019-nvidia", "BOOT_IMAGE=/vmlinuz ro quiet", "fail"),
    ("7.0.0-1019-nvidia", "BOOT_IMAGE=/vmlinuz ro kho=off quiet", "ok"),
    ("7.0.0-31-generic", "ro", "fail"),
    ("6.17.0-1032-nvidia", "ro", "ok"),
    (None, None, "unknown"),
])
def test_doctor_refuses_a_gb10_kernel_nccl_over_roce_fails_on(release, cmdline, status):
    checks = check_kernel(profile("gb10-tp2"), GB10, release, cmdline)
    assert [(c.name, c.status, c.rule) for c in checks] == [("kernel", status, "K35")]
    if status == "fail":
        assert "ibv_reg_mr_iova2" in checks[0].detail and "kho=off" in (checks[0].fix or "")


def test_the_kernel_check_reads_the_hosts_procfs_and_skips_single_node_and_sockets(tmp_path: Path):
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "osrelease").write_text("7.0.0-1019-nvidia\n")
    (tmp_path / "cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz root=/dev/nvme0n1p2 ro\n")
    assert kernel_release(tmp_path) == ("7.0.0-1019-nvidia", "BOOT_IMAGE=/boot/vmlinuz root=/dev/nvme0n1p2 ro")
    assert check_kernel(profile("gb10-tp2", "distributed.nccl_ib_disable=true"), GB10, "7.0.0-1019-nvidia", "") == []
    rtx = load_catalogue().gpus["rtx-pro-6000"]
    assert check_kernel(profile("rtx-pro-6000-tp2"), rtx, "7.0.0-1019-nvidia", "") == []


# --- K3 NVFP4 + DSpark: a catalogue fact from outside the seed ----------------------------------------------

def test_nvfp4_with_dspark_is_a_warning_from_the_catalogue_and_a_refusal_from_the_checkpoints_config():
    sets = ("speculative.method=dspark", "speculative.num_tokens=5")
    found = hits("rtx-pro-6000-tp2-nvfp4", "K3", *sets)
    assert [f.severity for f in found] == ["warning"] and "outside the seed" in found[0].message
    on_disk = load_catalogue().checkpoint("nvidia/DeepSeek-V4-Flash-NVFP4").model_copy(
        update={"source": "config.json at /models/nvfp4", "unconfirmed": []})
    assert [f.severity for f in hits("rtx-pro-6000-tp2-nvfp4", "K3", *sets, checkpoint=on_disk)] == ["error"]
    # The seed's own fact stays a refusal: 0731 "ships no MTP heads".
    assert [f.severity for f in hits("gb10-tp2", "K3", "speculative.method=mtp", "speculative.num_tokens=2")] == [
        "error"]


# --- K9 and K7: what the seed says ---------------------------------------------------------------------------

@pytest.mark.parametrize("size", [64, 96, 128, 512])
def test_any_block_size_but_the_validated_256_is_a_warning(size: int):
    found = hits("gb10-tp2", "K9", f"cache.block_size={size}")
    assert [f.severity for f in found] == ["warning"] and "256" in found[0].message
    assert not hits("gb10-tp2", "K9")


@pytest.mark.parametrize(("sets", "path"), [(("engine.sm120_decode=false",), "engine.sm120_decode"),
                                            (("engine.sm120_prefill=false",), "engine.sm120_prefill")])
def test_a_mixed_sm120_setting_names_the_switch_that_is_off(sets, path):
    found = hits("gb10-tp2", "K7", *sets)
    assert [f.path for f in found] == [path] and "set either=0" in found[0].reason


# --- K30 NameError/AttributeError and the two fatal signatures ----------------------------------------------

TABLE = load_table()


def judge_text(tmp_path: Path, lines: list[str], name: str = "gb10-tp2"):
    """(facts, evaluation) of a log with these lines."""
    log = tmp_path / "serve.log"
    log.write_text("\n".join(lines) + "\n")
    facts = scan_file(log, TABLE)
    return facts, Judge(TABLE, profile(name), "head", lock_versions(channel_lock(FORK))).evaluate(facts)


READY = ["(APIServer pid=1) INFO 08-09 10:00:00 [api_server.py:1805] vLLM API server version 0.27.1",
         "INFO:     Application startup complete."]


def test_name_and_attribute_errors_are_counted_per_engine_run_and_warn(tmp_path: Path):
    facts, ev = judge_text(tmp_path, [*READY, "NameError: name 'maybe_prefix' is not defined",
                                      "AttributeError: 'Handler' object has no attribute '_mmap_region'",
                                      "AttributeError: 'Handler' object has no attribute '_mmap_region'"])
    assert facts.get("python_name_errors") == 3
    result = next(r for r in ev.results if r.name == "no-name-errors")
    assert (result.status, result.severity, result.rule) == ("fail", "warning", "K30")
    clean_facts, clean = judge_text(tmp_path, READY)
    assert clean_facts.get("python_name_errors") == 0
    assert next(r for r in clean.results if r.name == "no-name-errors").status == "pass"
    # A new engine run starts from zero: the errors of the run before do not count.
    assert judge_text(tmp_path, ["NameError: x", *READY])[0].get("python_name_errors") == 0


@pytest.mark.parametrize(("line", "signature"), [
    ("AssertionError: swa_metadata missing tile_sched entry for compress_ratio=128; "
     "DeepseekSparseSWAMetadataBuilder.build_tile_scheduler did not allocate one for this layer type.",
     "flashmla-sparse-dsv4-tile-sched"),
    ("RuntimeError: Global Function `tl.transform.Simplify` is already registered", "tvm-ffi-double-registration"),
    ("RuntimeError: Overriding tl.Layout, possible causes:", "tvm-ffi-double-registration"),
])
def test_the_two_missing_fatal_signatures_fail_at_once_naming_k14_and_the_version_check(tmp_path: Path, line: str,
                                                                                         signature: str):
    _, ev = judge_text(tmp_path, [*READY, line])
    assert ev.verdict == "fail"
    hit = next(h for h in ev.fatal if h.id == signature)
    assert hit.rule == "K17" and "K14" in hit.message and "appliance versions --check" in hit.message
