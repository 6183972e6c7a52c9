"""Prometheus' own linter passes the exporter's /metrics: counters alone end in _total, base units only.

promtool comes from Debian's `prometheus` package (scripts/test.sh installs it; the `promtool_exe` fixture).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.profile.loader import load_profile
from tests.conftest import wait_for_first_poll

LOGS = Path(__file__).parent / "fixtures" / "logs"
SERVES = {
    "cpu": ("cpu-smoke", "single", LOGS / "cpu-smoke-serve.log"),
    "deepseek": ("gb10-tp2", "head", LOGS / "deepseek" / "gb10-tp2-dspark-head.log"),
    "deepseek-fatal": ("gb10-tp2", "head", LOGS / "deepseek" / "illegal-memory-access.log"),
}


def scrape(profile: str, role: str, log: Path) -> str:
    """/metrics over HTTP from an exporter wired as `appliance exporter` wires it, after its first polls."""
    exporter = build_exporter(ExporterConfig(load_profile(profile), log, role, interval=0.05))  # type: ignore[arg-type]
    stop = threading.Event()
    thread = threading.Thread(target=exporter.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for_first_poll(exporter.monitor)  # a scrape before it would lint a judgement of nothing
        return httpx.get(f"{exporter.url}/metrics", timeout=5).text
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("serve", sorted(SERVES))
def test_promtool_finds_nothing_to_complain_about(serve: str, promtool_exe: str) -> None:
    text = scrape(*SERVES[serve])
    assert "appliance_state" in text
    lint = subprocess.run([promtool_exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30,
                          check=False)
    assert (lint.returncode, lint.stdout + lint.stderr) == (0, "")


def test_sizes_are_bytes_and_the_acceptance_rate_a_ratio() -> None:
    samples = {s.name: s.value for f in text_string_to_metric_families(scrape(*SERVES["deepseek"])) for s in f.samples}
    assert not [name for name in samples if name.endswith(("_gib", "_percent"))]
    assert samples["appliance_kv_cache_memory_bytes"] > 1024**3
    assert 0 <= samples["appliance_spec_decode_acceptance_ratio"] <= 1
    assert samples["appliance_engine_runs_total"] >= 1 and samples["appliance_log_read_bytes_total"] > 0
