"""Host memory: readers over a fake procfs folder and kernel-log file the tests write, admission from the
profile's need (K23), the watchdog's ladder over time (K24), and the real `appliance exporter` and
`appliance doctor --json` reading a procfs root and a kernel log given by APPLIANCE_PROCFS / APPLIANCE_KMSG."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.hostmem.admission import admit
from appliance.hostmem.sources import KernelLog, load_kernel_checks, mem_available_gib, memory_pressure
from appliance.hostmem.watchdog import Ladder, Reading, Watchdog
from appliance.profile import load_profile
from appliance.profile.model import Memory
from tests.conftest import free_port, wait_for
from tests.in_process import run_main

ROOT = Path(__file__).resolve().parent.parent
XID = "NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. MMU Fault"
NO_MEM = "NVRM: nvAssertFailedNoLog: Assertion failed: status == NV_OK (NV_ERR_NO_MEMORY) @ mem_mgr.c:812"


class FakeProcfs:
    """A procfs root the test writes: meminfo and pressure/memory, as the kernel formats them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "pressure").mkdir(parents=True, exist_ok=True)

    def memory(self, available_gib: float, total_gib: float = 119.0) -> None:
        kib = int(available_gib * 1024 * 1024)
        (self.root / "meminfo").write_text(f"MemTotal:       {int(total_gib * 1024 * 1024)} kB\n"
                                           f"MemFree:        {kib} kB\nMemAvailable:   {kib} kB\n")

    def psi(self, some: float, full: float) -> None:
        (self.root / "pressure" / "memory").write_text(
            f"some avg10={some:.2f} avg60=0.00 avg300=0.00 total=123\n"
            f"full avg10={full:.2f} avg60=0.00 avg300=0.00 total=45\n")


@pytest.fixture
def procfs(tmp_path: Path) -> FakeProcfs:
    fake = FakeProcfs(tmp_path / "proc")
    fake.memory(100)
    fake.psi(0, 0)
    return fake


MEM = Memory(watchdog="stop", not_ready_below_gib=10, stop_below_gib=6, resume_above_gib=20, lead_s=2,
             recover_s=5, psi_some_not_ready=40, psi_full_stop=30)


def test_readers_take_a_procfs_root_and_say_none_for_what_is_missing(procfs: FakeProcfs, tmp_path: Path) -> None:
    procfs.psi(12.5, 3.25)
    assert mem_available_gib(procfs.root) == pytest.approx(100, abs=1e-3)
    p = memory_pressure(procfs.root)
    assert p is not None and (p.some_avg10, p.full_avg10) == (12.5, 3.25)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert mem_available_gib(empty) is None and memory_pressure(empty) is None
    assert KernelLog(tmp_path / "no-such-kern.log").read_new() is None


def test_the_kernel_log_file_is_read_incrementally_and_from_the_start_after_truncation(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text("a\nb\npart")
    log = KernelLog(path)
    assert log.read_new() == ["a", "b"]
    assert log.read_new() == []
    with path.open("a") as fh:
        fh.write("ial\nc\n")
    assert log.read_new() == ["partial", "c"]
    path.write_text("new\n")
    assert log.read_new() == ["new"]


def test_admission_names_both_numbers_and_the_knob_that_fits() -> None:
    rtx = load_profile("rtx-pro-6000-tp2").profile
    a = admit(rtx, 80.0, "NVML free memory")
    assert a.verdict == "fail" and a.rule == "K23"
    assert "81.3 GiB per GPU" in a.detail and "80.0 GiB" in a.detail
    assert a.fix is not None and "limits.gpu_memory_utilization <= 0.83" in a.fix
    gb10 = load_profile("gb10-tp2").profile
    short = admit(gb10, 100.0, "MemAvailable")
    assert short.verdict == "fail" and "101.5 GiB per node" in short.detail and "100.0 GiB" in short.detail
    assert short.fix is not None and "gpu_memory_utilization <= 0.83" in short.fix
    cpu = load_profile("cpu-smoke", cli_overrides=["memory.os_reserve_gib=1"]).profile
    tight = admit(cpu, 3.0, "MemAvailable")
    assert tight.verdict == "fail" and tight.fix is not None and "limits.kv_cache_memory_gib <= 0.2" in tight.fix
    assert admit(cpu, None, "MemAvailable").verdict == "unknown"
    assert admit(cpu, 20.0, "MemAvailable").verdict == "ok"


def reading(at: float, available: float | None, some: float = 0.0, full: float = 0.0,
            kernel: list[str] | None = None) -> Reading:
    from appliance.hostmem.sources import Pressure

    return Reading(at, available, Pressure(some, full), [] if kernel is None else kernel)


def test_ladder_goes_not_ready_then_stop_on_level_and_earlier_on_a_fast_fall() -> None:
    ladder = Ladder(MEM, load_kernel_checks())
    assert ladder.decide(reading(0, 30)).level == "ok"
    assert ladder.decide(reading(10, 12)).level == "ok"
    assert ladder.decide(reading(11, 11)).level == "ok"
    assert ladder.decide(reading(12, 9)).level == "not-ready"  # 1.5 GiB/s: 6.0 GiB in 2 s, not under the floor
    d = ladder.decide(reading(13, 5.5))
    assert d.level == "stop" and "under the floor 6 GiB" in d.reasons[0] and d.reasons[0].startswith("K24")
    fast = Ladder(MEM, load_kernel_checks())
    fast.decide(reading(0, 30))
    d = fast.decide(reading(1, 20))  # 10 GiB/s: crosses 6 GiB within 2 s -> stop while still 20 GiB
    assert d.level == "stop" and "falling at 10.00 GiB/s" in d.reasons[0]


def test_ladder_reads_psi_over_time() -> None:
    ladder = Ladder(MEM, load_kernel_checks())
    assert ladder.decide(reading(0, 50, some=10)).level == "ok"
    assert ladder.decide(reading(1, 50, some=45)).level == "not-ready"
    d = ladder.decide(reading(2, 50, some=80, full=31))
    assert d.level == "stop" and "PSI full avg10 31%" in d.reasons[0]
    assert ladder.decide(reading(3, 50, some=5, full=0)).level == "ok"


def test_kernel_lines_hold_for_their_window_then_clear() -> None:
    ladder = Ladder(MEM, load_kernel_checks())
    d = ladder.decide(reading(0, 50, kernel=[XID]))
    assert d.level == "not-ready" and "gpu-xid" in d.reasons[0]
    assert ladder.decide(reading(59, 50)).level == "not-ready"
    assert ladder.decide(reading(61, 50)).level == "ok"
    d = ladder.decide(reading(62, 50, kernel=[NO_MEM]))
    assert d.level == "stop" and "nvrm-no-memory" in d.reasons[0]


def test_unreadable_sources_are_unknown_not_healthy() -> None:
    d = Ladder(MEM, load_kernel_checks()).decide(Reading(0, None, None, None))
    assert d.level == "ok" and len(d.unknown) == 3


@dataclass
class EngineSwitch:
    """Test double for supervisord's stopProcess/startProcess (the real one is driven in
    test_memory_watchdog_engine.py); records what the watchdog asked."""

    calls: list[str]

    def stop(self) -> None:
        self.calls.append("stop")

    def start(self) -> None:
        self.calls.append("start")


def test_watchdog_stops_once_and_starts_again_only_after_memory_stayed_recovered(procfs: FakeProcfs,
                                                                                  tmp_path: Path) -> None:
    now = [0.0]
    switch = EngineSwitch([])
    kern = tmp_path / "kern.log"
    kern.write_text("boot\n")
    dog = Watchdog(MEM, load_kernel_checks(), procfs=procfs.root, kernel=KernelLog(kern), control=switch,
                   clock=lambda: now[0], wall=lambda: 1e9 + now[0], say=lambda _: None)
    for t, avail in ((0, 30), (10, 12), (20, 9), (30, 5), (40, 3), (50, 10), (60, 25), (62, 25), (64, 25),
                     (65.5, 25)):
        now[0] = t
        procfs.memory(avail)
        state = dog.step()
        if t == 20:
            assert state.level == "not-ready" and state.holds and switch.calls == []
        if t == 30:
            assert switch.calls == ["stop"] and state.engine_stopped
        if t == 64:
            assert switch.calls == ["stop"]  # recovered since 60, not yet for recover_s
    assert switch.calls == ["stop", "start"]  # started at 65.5: 25 GiB >= 20 since t=60, for 5.5 s >= recover_s
    assert not dog.state.engine_stopped and dog.state.stops == 1 and dog.state.restarts == 1
    actions = [e["action"] for e in dog.state.to_json()["events"]]
    assert actions.count("engine-stopped") == 1 and actions[-1] == "engine-started"


def test_warn_mode_reports_but_neither_holds_traffic_nor_stops(procfs: FakeProcfs, tmp_path: Path) -> None:
    switch = EngineSwitch([])
    dog = Watchdog(MEM.model_copy(update={"watchdog": "warn"}), load_kernel_checks(), procfs=procfs.root,
                   kernel=KernelLog(tmp_path / "kern.log"), control=switch, say=lambda _: None)
    procfs.memory(2)
    state = dog.step()
    assert state.level == "stop" and state.holds == [] and switch.calls == []
    assert "kernel log (unreadable)" in state.unknown


# --- the real exporter and doctor, reading files the test writes over time ----------------------------------

@pytest.fixture
def exporter(procfs: FakeProcfs, tmp_path: Path) -> Iterator[tuple[str, FakeProcfs, Path]]:
    port = free_port()
    kern = tmp_path / "kern.log"
    kern.write_text("[    0.000000] Linux version 6.x\n")
    log = tmp_path / "vllm.log"
    log.write_text("")
    sets = ";".join(["memory.watchdog=stop", "memory.not_ready_below_gib=10", "memory.stop_below_gib=6",
                     "memory.resume_above_gib=20", "memory.psi_some_not_ready=40", "memory.psi_full_stop=30"])
    env = {**os.environ, "APPLIANCE_PROCFS": str(procfs.root), "APPLIANCE_KMSG": str(kern), "APPLIANCE_SET": sets,
           "PYTHONPATH": str(ROOT)}
    env.pop("SUPERVISOR_SERVER_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "exporter", "--profile", "cpu-smoke", "--log",
                             str(log), "--port", str(port), "--no-engine", "--interval", "0.2",
                             "--memory-interval", "0.2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: httpx.get(f"{url}/live", timeout=2).status_code == 200, 30, 0.2), \
            proc.stdout.read1().decode() if proc.stdout else ""
        # The watchdog's first reading is in /status: before it, the memory section is empty (None, no unknown),
        # which a test waiting for "None" would mistake for its own change.
        assert wait_for(lambda: memory_status(url)["mem_available_gib"] is not None, 30, 0.2)
        yield url, procfs, kern
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def memory_status(url: str) -> dict:
    return httpx.get(f"{url}/status", timeout=3).json()["memory"]


def metric_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=3).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_exporter_follows_psi_and_kernel_lines_written_over_time(exporter) -> None:
    url, procfs, kern = exporter
    assert wait_for(lambda: memory_status(url)["level"] == "ok", 10, 0.2)
    procfs.psi(55, 2)
    assert wait_for(lambda: memory_status(url)["level"] == "not-ready", 10, 0.2)
    ready = httpx.get(f"{url}/ready", timeout=3).json()
    assert any(r.startswith("K24 memory PSI some avg10 55%") for r in ready["reasons"])
    m = metric_samples(url)
    assert m[("appliance_host_memory_pressure_avg10_ratio", (("kind", "some"),))] == pytest.approx(0.55)
    assert m[("appliance_memory_watchdog_level", (("level", "not-ready"), ("mode", "stop"), ("rule", "K24")))] == 1
    procfs.psi(0, 0)
    assert wait_for(lambda: memory_status(url)["level"] == "ok", 10, 0.2)
    with kern.open("a") as fh:
        fh.write(f"[ 1234.5] {NO_MEM}\n")
    assert wait_for(lambda: memory_status(url)["level"] == "stop", 10, 0.2)
    status = memory_status(url)
    assert "nvrm-no-memory" in status["reasons"][0]
    # Not under supervisord: it says it cannot stop the engine rather than pretending it did.
    assert any(e["action"] == "stop-unavailable" for e in status["events"])
    assert status["sources"]["kernel_log"] == str(kern)
    assert m[("appliance_memory_source_readable", (("source", "kernel_log"),))] == 1


def test_the_exporter_reports_a_missing_procfs_as_unknown(exporter) -> None:
    url, procfs, _ = exporter
    (procfs.root / "meminfo").unlink()
    assert wait_for(lambda: memory_status(url)["mem_available_gib"] is None, 10, 0.2)
    status = memory_status(url)
    assert "MemAvailable (meminfo unreadable)" in status["unknown"], status
    assert metric_samples(url)[("appliance_memory_source_readable", (("source", "meminfo"),))] == 0


def test_doctor_json_reads_the_procfs_and_kernel_log_it_is_given(procfs: FakeProcfs, tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text(f"[ 10.0] {NO_MEM}\n[ 11.0] {XID}\n")
    procfs.memory(100)
    env = {"APPLIANCE_PROCFS": str(procfs.root), "APPLIANCE_KMSG": str(kern)}
    out = run_main(["doctor", "gb10-tp2", "--json"], env=env, limit_s=120)  # in-process (tests/in_process.py)
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert out.returncode == 1
    assert checks["memory"]["status"] == "fail" and checks["memory"]["rule"] == "K23"
    assert "101.5 GiB per node" in checks["memory"]["detail"] and "100.0 GiB" in checks["memory"]["detail"]
    assert str(procfs.root) in checks["memory"]["detail"]
    assert "gpu_memory_utilization <= 0.83" in checks["memory"]["fix"]
    assert checks["kernel-log"]["status"] == "warn" and "nvrm-no-memory" in checks["kernel-log"]["detail"]
    (procfs.root / "meminfo").unlink()
    out = run_main(["doctor", "gb10-tp2", "--json"], env={**env, "APPLIANCE_KMSG": str(tmp_path / "absent.log")},
                   limit_s=120)
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["memory"]["status"] == "unknown" and checks["kernel-log"]["status"] == "unknown"
