"""Preflight. GPUs cannot be had here: `GpuProbe` values stand in for NVML's answer (test doubles for
SM12x/H200 hardware, named as such); the real NVML path runs on the lent H200 (see README)."""

from __future__ import annotations

from appliance.catalogue import load_catalogue
from appliance.doctor.gpu import GpuInfo, GpuProbe
from appliance.doctor.host import mem_available_gib, running_engines
from appliance.doctor.report import check_gpu, check_memory, check_stale_engine
from appliance.profile import load_profile

H200_DOUBLE = GpuProbe([GpuInfo(0, "NVIDIA H200", "9.0", "580.95.05", 139.8)], "nvml")
RTX_PRO_DOUBLE = GpuProbe([GpuInfo(i, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", "580.1", 95.6)
                           for i in range(2)], "nvml")


def gpu_checks(profile: str, probe: GpuProbe) -> dict[str, tuple[str, str]]:
    p = load_profile(profile).profile
    return {c.name: (c.status, c.detail) for c in check_gpu(p, load_catalogue().gpus[p.hardware.gpu], probe)}


def test_an_h200_is_identified_and_an_sm12x_profile_refused_with_the_reason() -> None:
    status, detail = gpu_checks("rtx-pro-6000-tp2", H200_DOUBLE)["gpu.arch"]
    assert status == "fail"
    assert "NVIDIA H200" in detail and "9.0 (SM90)" in detail and "SM120" in detail


def test_two_rtx_pro_6000_pass_the_rtx_profile_but_not_the_gb10_one() -> None:
    assert gpu_checks("rtx-pro-6000-tp2", RTX_PRO_DOUBLE)["gpu.arch"][0] == "ok"
    assert gpu_checks("gb10-tp2", RTX_PRO_DOUBLE)["gpu.arch"][0] == "fail"


def test_too_few_gpus_fail() -> None:
    one = GpuProbe(RTX_PRO_DOUBLE.gpus[:1], "nvml")
    assert gpu_checks("rtx-pro-6000-tp2", one)["gpu.count"][0] == "fail"


def test_no_gpu_fails_an_sm12x_profile_and_is_fine_for_cpu_smoke() -> None:
    none = GpuProbe([], "none", "NVML: not found")
    assert gpu_checks("gb10-tp2", none)["gpu"][0] == "fail"
    assert gpu_checks("cpu-smoke", none)["gpu"][0] == "ok"


def test_gb10_refuses_to_start_under_96_gib_available_and_warns_on_nv_err_no_memory() -> None:
    p = load_profile("gb10-tp2").profile
    gb10 = load_catalogue().gpus["gb10"]
    log = "[ 12.3] NVRM: nvAssertFailed ... NV_ERR_NO_MEMORY\n[ 13.0] other"
    checks = {c.name: c.status for c in check_memory(p, gb10, 80.0, log)}
    assert checks == {"memory": "fail", "kernel-log": "warn"}
    assert {c.name: c.status for c in check_memory(p, gb10, 110.0, "")} == {"memory": "ok", "kernel-log": "ok"}


def test_rtx_has_no_host_memory_floor_and_an_unreadable_kernel_log_is_unknown() -> None:
    p = load_profile("rtx-pro-6000-tp2").profile
    assert [c.status for c in check_memory(p, load_catalogue().gpus["rtx-pro-6000"], 20.0, None)] == ["ok", "unknown"]


def test_stale_engine_fails_on_gpu_and_warns_on_cpu() -> None:
    engines = [(42, "python -m vllm serve x")]
    assert [c.status for c in check_stale_engine(load_profile("gb10-tp2").profile, engines, False)] == ["fail"]
    assert [c.status for c in check_stale_engine(load_profile("cpu-smoke").profile, engines, False)] == ["warn"]
    assert [c.status for c in check_stale_engine(load_profile("cpu-smoke").profile, [], True)] == ["fail"]


def test_host_readers(tmp_path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:   104857600 kB\n")
    assert mem_available_gib(tmp_path / "meminfo") == 100.0
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cmdline").write_bytes(b"/venv/bin/python\0/venv/bin/vllm\0serve\0m\0")
    (proc / "78").mkdir()
    (proc / "78" / "cmdline").write_bytes(b"bash\0")
    assert [pid for pid, _ in running_engines(proc)] == [77]


def test_version_drift_lines_carry_their_rule_id() -> None:
    """This machine has the CPU stack, not the fork's: the K13/K14/K15 drifts of a GPU profile name their rule
    (doctor --json had `"rule": null` on them)."""
    from appliance.doctor.report import check_versions

    checks = check_versions(load_profile("gb10-tp2").profile, {})

    def rule_of(package: str) -> str | None:
        return next(c.rule for c in checks if f" {package}: " in f" {c.detail}")

    assert (rule_of("apache-tvm-ffi"), rule_of("nvidia-nccl-cu13"), rule_of("flashinfer-python")) == \
        ("K14", "K15", "K13")
