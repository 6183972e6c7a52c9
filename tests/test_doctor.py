"""Preflight. GPUs cannot be had here: `GpuProbe` values stand in for NVML's answer (test doubles for
SM12x/H200 hardware, named as such); the real NVML path runs on the lent H200 (see README)."""

from __future__ import annotations

import json

import pytest

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


# --- K27: memlock on RDMA profiles (issue 20, item 12) ---------------------------------------------

def memlock_checks(profile: str, limits: tuple[int | None, int | None], *overrides: str) -> list:
    from appliance.doctor.report import check_memlock

    p = load_profile(profile, cli_overrides=list(overrides)).profile
    return check_memlock(p, load_catalogue().gpus[p.hardware.gpu], limits)


def test_the_memlock_refusal_and_the_kubernetes_guide_name_the_same_containerd_fix() -> None:
    """The refusal points at docs/kubernetes.md (issue 33 item 6): the guide carries the drop-in that sets it."""
    from pathlib import Path

    from appliance.doctor.report import MEMLOCK_FIX

    guide = (Path(__file__).resolve().parent.parent / "docs" / "kubernetes.md").read_text()
    assert "containerd: LimitMEMLOCK=infinity" in MEMLOCK_FIX and "docs/kubernetes.md" in MEMLOCK_FIX
    assert "printf '[Service]\\nLimitMEMLOCK=infinity\\n'" in guide and "containerd.service.d" in guide
    assert "systemctl restart containerd" in guide and "recreate the pods" in guide


def test_an_rdma_profile_refuses_a_finite_memlock_with_the_fix_and_accepts_unlimited() -> None:
    (fail,) = memlock_checks("gb10-tp2", (8 * 1024**2, 8 * 1024**2))  # containerd's and Docker's usual 8 MiB
    assert (fail.name, fail.status, fail.rule) == ("memlock", "fail", "K27")
    assert "8 MiB" in fail.detail and "ibv_reg_mr" in fail.detail and "raise it too" in fail.detail
    assert "LimitMEMLOCK=infinity" in (fail.fix or "") and "memlock: -1" in (fail.fix or "")
    (ok,) = memlock_checks("gb10-tp2", (None, None))
    assert ok.status == "ok"
    (big,) = memlock_checks("gb10-tp2", (256 * 1024**3, None))  # at least the node's GPU memory
    assert big.status == "ok"


def test_memlock_is_not_asked_of_a_serve_without_rdma() -> None:
    assert memlock_checks("rtx-pro-6000-tp2", (65536, 65536)) == []  # one node: NCCL over NVLink/PCIe
    assert memlock_checks("gb10-tp2", (65536, 65536), "distributed.nccl_ib_disable=true") == []  # sockets, knowingly
    assert memlock_checks("cpu-smoke-2node", (65536, 65536)) == []


def _doctor_with_memlock(limit: int) -> dict:
    import json
    import resource
    import subprocess
    import sys

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))

    out = subprocess.run([sys.executable, "-m", "appliance", "doctor", "gb10-tp2", "--json"], capture_output=True,
                         text=True, timeout=120, check=False, preexec_fn=lower)
    assert out.returncode == 1, out.stderr  # no GPU here: doctor fails anyway, the memlock check is read below
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def test_doctor_reads_this_processes_real_memlock_limit() -> None:
    """The limit set on the real process (setrlimit, as a container runtime does), read back by `appliance doctor`.
    (Raising it to unlimited needs CAP_SYS_RESOURCE, which this sandbox lacks: the unlimited case is the pure check
    above.)"""
    checks = _doctor_with_memlock(64 * 1024)
    assert checks["memlock"]["status"] == "fail" and "65,536 bytes" in checks["memlock"]["detail"]
    assert checks["memlock"]["rule"] == "K27"


def test_the_engines_start_refuses_an_rdma_serve_under_a_finite_memlock(tmp_path) -> None:
    """`appliance run` (the container's entrypoint) runs the same check before anything starts: a finite memlock on
    an RDMA profile is a failed preflight, named with its fix, and nothing is started."""
    import resource
    import subprocess
    import sys

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))

    out = subprocess.run([sys.executable, "-m", "appliance", "run", "gb10-tp2", "--dry-run", "--node-rank", "1",
                          "--master-addr", "10.0.0.1", "--run-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120, check=False, preexec_fn=lower,
                         env={"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(tmp_path / "home")})
    assert out.returncode == 1, out.stderr
    assert "preflight failed" in out.stderr and "nothing started" in out.stderr
    text = out.stdout + out.stderr
    assert "memlock (ulimit -l) is 65,536 bytes on an RDMA profile" in text and "LimitMEMLOCK=infinity" in text
    assert not (tmp_path / "run" / "launch.json").exists()


def test_version_drift_lines_carry_their_rule_id() -> None:
    """This machine has the CPU stack, not the fork's: the K13/K14/K15 drifts of a GPU profile name their rule
    (doctor --json had `"rule": null` on them), as the parts of the one engine-missing finding."""
    from appliance.doctor.report import check_versions

    (missing,) = check_versions(load_profile("gb10-tp2").profile, {})

    def rule_of(package: str) -> str | None:
        return next(c.rule for c in missing.parts if f" {package}: " in f" {c.detail}")

    assert (rule_of("apache-tvm-ffi"), rule_of("nvidia-nccl-cu13"), rule_of("flashinfer-python")) == \
        ("K14", "K15", "K13")
    assert "K14 apache-tvm-ffi" in missing.detail and "K15 nvidia-nccl-cu13" in missing.detail


def test_doctor_on_a_host_says_run_it_in_the_image_in_one_version_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host (the fork's engine absent, no image channel set) the doctor of a GPU profile gave 11 version FAILs
    that buried its one real finding: now one line, which says to run the doctor inside the image (by its tag), and
    --json keeps each drift with its rule id."""
    from appliance import lockfile
    from appliance.container.buildargs import image_tag
    from appliance.doctor import checks_text, run_doctor
    from appliance.paths import versions_path

    monkeypatch.delenv("APPLIANCE_CHANNEL", raising=False)
    profile = load_profile("gb10-tp2").profile
    checks = run_doctor(profile)
    text = checks_text(checks, False, profile.name)
    versions = [line for line in text.splitlines() if line.split()[2:3] == ["versions"]]
    assert len(versions) == 1 and "is not on this host" in versions[0] and "K15 nvidia-nccl-cu13" in versions[0]
    tag = image_tag(lockfile.load(versions_path()), profile.engine.channel)
    assert f"run the doctor inside the image, `docker run --rm --gpus all --entrypoint appliance {tag} doctor " \
           "gb10-tp2`" in text
    (check,) = [c for c in json.loads(checks_text(checks, True, profile.name))["checks"] if c["name"] == "versions"]
    assert {p["rule"] for p in check["parts"]} >= {"K13", "K14", "K15"} and len(check["parts"]) > 3
