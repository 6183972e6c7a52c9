"""Every line the doctor can print names the rule or doctor check it rests on (issue 25, item 5), and the id is one
`appliance rules` explains. GPUs cannot be had here: `GpuProbe` values stand in for NVML's answer (test doubles for
SM12x/H200 hardware, named as such, as in tests/test_doctor.py); the installed-packages double of the drift branch
stands in for an engine venv that drifted from its pins."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from appliance import rulebook
from appliance.catalogue import load_catalogue
from appliance.doctor import Check, checks_text
from appliance.doctor import report as doctor
from appliance.doctor.gpu import GpuInfo, GpuProbe
from appliance.profile import load_profile

H200_DOUBLE = GpuProbe([GpuInfo(0, "NVIDIA H200", "9.0", "580.95.05", 139.8)], "nvml")
RTX_PRO_DOUBLE = GpuProbe([GpuInfo(i, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", "580.1", 95.6)
                           for i in range(2)], "nvml")
RTX_5090_DOUBLE = GpuProbe([GpuInfo(i, "NVIDIA GeForce RTX 5090", "12.0", "580.1", 31.8) for i in range(2)], "nvml")
NO_GPU = GpuProbe([], "none", "NVML: not found")
GIB = 1024**3


def every_check(monkeypatch: pytest.MonkeyPatch) -> list[Check]:
    """Each check function of appliance/doctor/report.py driven down each of its branches."""
    cat = load_catalogue().gpus
    cpu, gb10, rtx = (load_profile(n).profile for n in ("cpu-smoke", "gb10-tp2", "rtx-pro-6000-tp2"))
    out: list[Check] = []
    for profile, probe in ((cpu, NO_GPU), (gb10, NO_GPU), (rtx, H200_DOUBLE), (rtx, RTX_PRO_DOUBLE),
                           (rtx, GpuProbe(RTX_PRO_DOUBLE.gpus[:1], "nvml")), (rtx, RTX_5090_DOUBLE)):
        out += doctor.check_gpu(profile, cat[profile.hardware.gpu], probe)
    nvrm = "[ 12.3] NVRM: nvAssertFailed ... NV_ERR_NO_MEMORY"
    for available, log in ((80.0, nvrm), (110.0, ""), (None, None)):
        out += doctor.check_memory(gb10, cat["gb10"], available, log)
    out += doctor.check_memory(rtx, cat["rtx-pro-6000"], 20.0, None, device_free=(10.0, "NVML free"))
    out += doctor.check_memory(rtx, cat["rtx-pro-6000"], None, "", device_free=(None, "NVML free"))
    out += doctor.check_memory(cpu, cat["cpu"], 20.0, None)
    engines = [(42, "python -m vllm serve x")]
    for profile, running, busy in ((gb10, engines, True), (cpu, engines, None), (cpu, [], False)):
        out += doctor.check_stale_engine(profile, running, busy)
    for limits in ((None, None), (65536, 65536), (200 * GIB, None)):
        out += doctor.check_memlock(gb10, cat["gb10"], limits)
    for release, cmdline in ((None, None), ("7.0.0-1019-nvidia", ""), ("7.0.0-1019-nvidia", "ro kho=off"),
                             ("6.17.0-1032-nvidia", "")):
        out += doctor.check_kernel(gb10, cat["gb10"], release, cmdline)
    out += doctor.check_versions(gb10, {})  # the fork's engine is not here: one finding, its drifts as parts
    out += doctor.check_versions(cpu, {"APPLIANCE_CHANNEL": "another-channel"})
    out += doctor.check_versions(cpu, {})  # this environment is the CPU channel's engine
    from appliance.channels import engines as channel_engines

    monkeypatch.setattr(channel_engines, "engine_versions", lambda _install, names: dict.fromkeys(names, "0.0.0"))
    out += doctor.check_versions(cpu, {})
    from appliance.health.provable import profile_unprovable
    from appliance.health.table import load_table

    upstream = profile_unprovable(load_table(), load_profile("gb10-tp2-upstream").profile)
    out += doctor.check_provable(upstream)  # K7's engagement line: off its path
    assert profile_unprovable(load_table(), cpu) == []  # a CPU channel records no DeepSeek-V4 path
    return out


def flattened(checks: list[Check]) -> list[Check]:
    return [x for c in checks for x in (c, *c.parts)]


def names_in_source() -> set[str]:
    """Every check name a `Check(...)` of the doctor is built with (its first argument)."""
    tree = ast.parse(Path(doctor.__file__).read_text())
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Check"
            and node.args and isinstance(node.args[0], ast.Constant)}


def test_every_doctor_check_names_a_rule_appliance_rules_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = every_check(monkeypatch)
    walked = {c.name for c in flattened(checks)}
    assert walked >= names_in_source(), f"not walked: {names_in_source() - walked}"
    assert {c.status for c in checks} >= {"ok", "warn", "fail", "unknown"}
    known = {e.id for e in rulebook.build()}
    unnamed = [(c.name, c.status, c.detail[:60]) for c in flattened(checks) if not c.rule or c.rule not in known]
    assert not unnamed


def test_the_gpu_and_engine_lines_carry_their_check_ids(monkeypatch: pytest.MonkeyPatch, vllm_engine: Path) -> None:
    """`versions` is ok only where the channel's engine stack is installed: this needs the engine."""
    by = {(c.name, c.status): c.rule for c in every_check(monkeypatch)}
    assert by[("gpu", "ok")] == by[("gpu", "fail")] == by[("gpu.count", "fail")] == "H1"
    assert by[("gpu.arch", "fail")] == by[("gpu.arch", "ok")] == "H2"
    assert by[("gpu.model", "warn")] == "H3"
    assert (by[("engine.port", "fail")], by[("engine", "fail")], by[("engine", "ok")]) == ("H4", "H5", "H5")
    assert by[("versions", "ok")] == "H6" and by[("memory", "ok")] == "K23"


def test_the_text_and_json_reports_show_each_id(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = every_check(monkeypatch)
    header, *text = checks_text(checks, False, "x").splitlines()  # piped: one line a check, one a fix
    assert header.split() == ["STATUS", "RULE", "CHECK", "DETAIL"]
    rows = [line for line in text if not line.lstrip().startswith("fix:")]
    assert len(text) - len(rows) == sum(1 for c in checks if c.fix and c.status == "fail")
    assert len(rows) == len(checks)
    for check, row in zip(checks, rows, strict=True):
        assert row.split()[:3] == [check.status.upper(), check.rule, check.name]
    doc = json.loads(checks_text(checks, True, "x"))
    assert all(c["rule"] and all(p["rule"] for p in c["parts"]) for c in doc["checks"])


def test_the_doctor_ids_are_documented_in_docs_rules_md() -> None:
    text = (Path(__file__).parents[1] / "docs" / "rules.md").read_text()
    for rule_id in (doctor.GPUS_VISIBLE, doctor.GPU_ARCH, doctor.GPU_MODEL, doctor.PORT_FREE, doctor.NO_OTHER_ENGINE,
                    doctor.STACK_AS_LOCKED):
        assert f"## {rule_id}: " in text and "  - doctor: doctor / run preflight" in text.split(f"## {rule_id}: ")[1]
