"""The Grafana dashboard queries only series that exist: the exporter's and the real vLLM's."""

from __future__ import annotations

import json
import re
import socket
import tempfile
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.health.canary_state import CanaryState, write_state
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.profile.loader import load_profile

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((ROOT / "monitoring" / "grafana" / "dashboards" / "appliance.json").read_text())
LOGS = Path(__file__).parent / "fixtures" / "logs"
# vLLM's speculative-decoding counters exist only when a drafter runs (not in the CPU smoke serve).
SPEC_DECODE = {"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"}


def exprs() -> list[str]:
    return [t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", [])]


def exporter_series(profile: str = "gb10-tp2", log: Path = LOGS / "deepseek" / "illegal-memory-access.log") -> str:
    """/metrics of a head exporter after one poll of `log`, built as `appliance exporter` builds it."""
    # A head whose one worker's exporter is not there: the cross-rank series exist (unknown).
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    peer = f"http://127.0.0.1:{free.getsockname()[1]}"
    free.close()
    with tempfile.TemporaryDirectory() as tmp:
        # The canary's series: what an exporter with --canary-state shows once a round has passed.
        state = Path(tmp) / "canary.json"
        write_state(state, CanaryState(status="ok", last_success_unix=1.0, last_round_unix=1.0,
                                       failures_total={"repetition-loop": 1}))
        exporter = build_exporter(ExporterConfig(load_profile(profile), log, "head", peers={1: peer}, engine_timeout=1,
                                                 canary_state=state))
        try:
            exporter.monitor.poll()
            return generate_latest(exporter.server.registry).decode()
        finally:
            exporter.close()


def exporter_series_names() -> set[str]:
    return {s.name for f in text_string_to_metric_families(exporter_series()) for s in f.samples}


def test_every_appliance_series_on_the_dashboard_is_exported():
    exported = exporter_series_names()
    used = {m for e in exprs() for m in re.findall(r"\bappliance_[a-z0-9_]+", e)}
    assert used and used <= exported, used - exported


def test_every_vllm_series_on_the_dashboard_exists_in_the_real_engines_metrics():
    real = {line.split("{")[0].split(" ")[0] for line in (LOGS / "cpu-smoke-metrics.txt").read_text().splitlines()
            if line.startswith("vllm:")}
    used = {m for e in exprs() for m in re.findall(r"vllm:[a-z0-9_]+", e)}
    assert used and used - SPEC_DECODE <= real, (used - SPEC_DECODE) - real


def test_the_dashboard_is_importable_grafana_json():
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 36
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert {"datasource", "instance", "model_name"} <= names
