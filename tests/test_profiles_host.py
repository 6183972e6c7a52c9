"""`appliance profiles --host`: which shipped profile fits the machine. GPUs cannot be had here: `GpuProbe` values
stand in for NVML's answer (test doubles for GB10, RTX PRO 6000 and H200 hardware, named as such, as in
tests/test_doctor.py); procfs and sysfs are folders the test writes. The H200 double is read from the real H200
doctor run in docs/evidence/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from appliance.doctor.fit import Host, fit, host_report, read_host, recommend
from appliance.doctor.gpu import GpuInfo, GpuProbe
from appliance.profile import list_profiles, load_profile

ROOT = Path(__file__).resolve().parents[1]
GB10_DOUBLE = GpuProbe([GpuInfo(0, "NVIDIA GB10", "12.1", "580.95.05", 0.0)], "nvml")
RTX_PRO_DOUBLE = GpuProbe([GpuInfo(i, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", "580.1", 95.6)
                           for i in range(2)], "nvml")
CPU_DOUBLE = GpuProbe([], "none", "NVML: NVML Shared Library Not Found; nvidia-smi: not on PATH")


def h200_from_evidence() -> GpuProbe:
    """The GPU the real H200 doctor run saw (docs/evidence/doctor-h200-rtx-pro-6000-tp2.json)."""
    report = json.loads((ROOT / "docs" / "evidence" / "doctor-h200-rtx-pro-6000-tp2.json").read_text())
    detail = next(c["detail"] for c in report["checks"] if c["name"] == "gpu.arch")
    m = re.match(r"GPU (\d+) is (.+?), compute capability ([\d.]+) \(SM\d+\), driver ([\d.]+);", detail)
    assert m, detail
    return GpuProbe([GpuInfo(int(m[1]), m[2], m[3], m[4], 139.8)], "nvml")


def machine(tmp_path: Path, probe: GpuProbe, total_gib: float, available_gib: float,
            rdma: tuple[str, ...] = ()) -> Host:
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    kib = 1024 * 1024
    (proc / "meminfo").write_text(f"MemTotal: {int(total_gib * kib)} kB\nMemAvailable: {int(available_gib * kib)} kB\n")
    for dev in rdma:
        (sys_ / "class" / "infiniband" / dev / "ports" / "1").mkdir(parents=True)
    return read_host(proc, sys_, probe)


def verdicts(host: Host) -> tuple[dict[str, tuple[str, str | None, str]], str | None]:
    profiles = {n: load_profile(n).profile for n in list_profiles()}
    fits = [fit(p, host) for p in profiles.values()]
    best = recommend(fits, profiles)
    return {f.profile: (f.verdict, f.rule, f.reason) for f in fits}, best.profile if best else None


def test_a_dgx_spark_gets_the_gb10_reference_profile_with_its_blockers_named(tmp_path: Path) -> None:
    host = machine(tmp_path, GB10_DOUBLE, 119.7, 112.0, ("rocep1s0f0", "roceP2p1s0f0"))
    got, best = verdicts(host)
    assert best == "gb10-tp2"
    # Not "validated here": its battery passed 17 of 18 checks at another max_model_len (the harness's rule).
    assert got["gb10-tp2"][0] == "fits" and "as one of 2 nodes" in got["gb10-tp2"][2]
    assert "accepted with blockers" in got["gb10-tp2"][2] and "spec_decode" in got["gb10-tp2"][2]
    assert got["gb10-tp2-nvfp4"][0] == "fits"  # partial provenance: fits, not validated
    assert got["rtx-pro-6000-tp2"][:2] == ("refused", "H2")
    assert host.fabric == ["roceP2p1s0f0", "rocep1s0f0"]


def test_a_spark_short_of_memory_is_refused_by_admission(tmp_path: Path) -> None:
    got, best = verdicts(machine(tmp_path, GB10_DOUBLE, 119.7, 60.0, ("rocep1s0f0",)))
    assert got["gb10-tp2"][:2] == ("refused", "K23")
    assert best is not None and best.startswith("cpu-")  # nothing GPU fits: the CPU demo is what is left


def test_two_rtx_pro_6000_get_the_rtx_profile_and_one_is_refused_by_count(tmp_path: Path) -> None:
    got, best = verdicts(machine(tmp_path, RTX_PRO_DOUBLE, 251.0, 240.0))
    # Fits, not "validated here": the seed measured SM120 on another head with V1 and no guard (provenance partial).
    assert best == "rtx-pro-6000-tp2" and got[best][0] == "fits" and "partial" in got[best][2]
    assert got["gb10-tp2"][:2] == ("refused", "H2")
    assert got["rtx-5090-tp8"][:2] == ("refused", "H1")  # SM120 too, but 8 GPUs wanted


def test_the_real_h200_is_refused_by_the_arch_rule_not_a_crash(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    host = machine(tmp_path, h200_from_evidence(), 251.0, 125.4)
    got, best = verdicts(host)
    gpu_profiles = [n for n in got if not n.startswith("cpu-")]
    assert gpu_profiles and all(got[n][:2] == ("refused", "H2") for n in gpu_profiles)
    assert "NVIDIA H200 (SM90)" in got["rtx-pro-6000-tp2"][2]
    assert best == "cpu-smoke"
    assert host_report(False, host) == 0
    out = capsys.readouterr().out
    assert "recommended: cpu-smoke (no GPU profile fits these GPUs" in out


def test_a_cpu_machine_gets_the_demo_and_the_json_says_why_for_each(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    host = machine(tmp_path, CPU_DOUBLE, 23.5, 19.7)
    assert host_report(True, host) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recommended"] == "cpu-smoke"
    by_name = {p["profile"]: p for p in doc["profiles"]}
    assert by_name["gb10-tp2"]["verdict"] == "refused" and by_name["gb10-tp2"]["rule"] == "H1"
    assert all(p["rule"] for p in doc["profiles"] if p["verdict"] == "refused")  # every refusal names its check
    assert host.fabric == [] and "no RDMA device" in host.describe()[2]


def test_doctor_suggest_is_the_preflight_of_the_profile_profiles_host_recommends(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two purposes, two outputs: `profiles --host` lists every profile's verdict here; `doctor --suggest` runs the
    doctor's checks of the one it recommends (issue 37: they printed the same report)."""
    from appliance.cli import main

    assert main(["profiles", "--host", "--json"]) == 0
    host = json.loads(capsys.readouterr().out)
    code = main(["doctor", "--suggest", "--json"])
    suggested = json.loads(capsys.readouterr().out)
    assert suggested["recommended"] == host["recommended"] == "cpu-smoke"  # this machine: no GPU
    assert code == (0 if suggested["ok"] else 1)
    main(["doctor", "cpu-smoke", "--json"])
    doctor = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in suggested["checks"]] == [c["name"] for c in doctor["checks"]]  # its preflight
    assert "gpu" in [c["name"] for c in suggested["checks"]] and "profiles" not in suggested
    main(["doctor", "--suggest"])
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("recommended: cpu-smoke (fits; provenance test); its preflight")
    assert text[1].split() == ["STATUS", "RULE", "CHECK", "DETAIL"]
    main(["profiles", "--host"])
    listed = capsys.readouterr().out
    assert "gb10-tp2" in listed and not any("gb10-tp2" in line for line in text)  # the list is not repeated
    assert main(["doctor", "--suggest", "gb10-tp2"]) == 2
    assert "doctor --suggest picks the profile itself" in capsys.readouterr().err
