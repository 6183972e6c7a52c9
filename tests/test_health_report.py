"""One verdict: `logscan` on a finished log and the exporter's /status on the same log say the same thing,
both from health.report.LogReport; only a log that never said ready differs (fail when finished, K12;
unknown while it may still come)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.profile.loader import load_profile
from tests.in_process import run_main

LOGS = Path(__file__).parent / "fixtures" / "logs"
CASES = [  # (log, profile, expected logscan verdict)
    ("cpu-smoke-serve.log", "cpu-smoke", "pass"),
    ("deepseek/gb10-tp2-dspark-head.log", "gb10-tp2", "pass"),
    ("deepseek/illegal-memory-access.log", "gb10-tp2", "fail"),
    ("deepseek/guard-2-of-5.log", "gb10-tp2", "fail"),
]


def status_of(log: Path, profile: str) -> dict:
    role = "single" if profile == "cpu-smoke" else "head"
    exporter = build_exporter(ExporterConfig(load_profile(profile), log, role))  # type: ignore[arg-type]
    try:
        for _ in range(50):  # the tailer reads in bounded chunks: poll until the whole log is in
            exporter.monitor.poll()
            if exporter.monitor.snapshot.bytes_read >= log.stat().st_size:
                break
        return exporter.monitor.snapshot.to_json(exporter.identity, 0.0)
    finally:
        exporter.close()


@pytest.mark.parametrize(("log", "profile", "expected"), CASES)
def test_logscan_and_the_exporter_give_one_verdict(log: str, profile: str, expected: str) -> None:
    path = LOGS / log
    scan = run_main(["logscan", str(path), "--profile", profile, "--json"], limit_s=60)
    out = json.loads(scan.stdout)
    status = status_of(path, profile)
    assert (out["verdict"], out["logs"][0]["verdict"], status["verdict"]) == (expected, expected, expected)
    blocking = {f["name"] for f in out["findings"] if f["status"] == "fail" and f["severity"] == "error"}
    exported = {e["name"] for e in status["expectations"] if e["status"] == "fail" and e["severity"] == "error"}
    assert blocking == exported | {f"fatal:{h['id']}" for h in status["fatal"]}


def test_a_log_that_never_said_ready_fails_when_finished_and_is_unknown_while_live(tmp_path: Path) -> None:
    text = (LOGS / "cpu-smoke-serve.log").read_text()
    log = tmp_path / "loading.log"
    log.write_text(text[:2000])
    scan = run_main(["logscan", str(log), "--profile", "cpu-smoke", "--json"], limit_s=60)
    out = json.loads(scan.stdout)
    assert (scan.returncode, out["verdict"]) == (1, "fail")
    assert [f["rule"] for f in out["findings"] if f["name"] == "log-ready"] == ["K12"]
    assert status_of(log, "cpu-smoke")["verdict"] == "unknown"
