"""The Grafana dashboard queries only series that exist: the exporter's and the real vLLM's."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.canary.metrics import CanaryCollector
from appliance.canary.status import CanaryState
from appliance.health.build import HealthContext, lock_versions
from appliance.health.metrics import make_registry
from appliance.health.monitor import Identity, Monitor
from appliance.health.peers import PeerWatch, compared_facts
from appliance.health.tail import LogTailer
from appliance.profile.loader import load_profile

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((ROOT / "healthchecks" / "grafana-dashboard.json").read_text())
LOGS = Path(__file__).parent / "fixtures" / "logs"
# vLLM's speculative-decoding counters exist only when a drafter runs (not in the CPU smoke serve).
SPEC_DECODE = {"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"}


def exprs() -> list[str]:
    return [t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", [])]


def exporter_series() -> set[str]:
    loaded = load_profile("gb10-tp2")
    ctx = HealthContext.load(loaded)
    identity = Identity("gb10-tp2", loaded.digest, ctx.lock_digest, ctx.lock.stack, "head", "x", None,
                        lock_versions(ctx.lock))
    # A head whose one worker's exporter is not there: the cross-rank series exist (unknown).
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    peers = PeerWatch({1: f"http://127.0.0.1:{free.getsockname()[1]}"}, compared_facts(ctx.table),
                      clock=time.monotonic, timeout=1)
    free.close()
    monitor = Monitor(judge=ctx.judge("head"), tailer=LogTailer(LOGS / "deepseek" / "illegal-memory-access.log"),
                      identity=identity, clock=time.monotonic, peers=peers)
    try:
        monitor.poll()
    finally:
        peers.close()
    registry = make_registry(lambda: monitor.snapshot, identity)
    # The canary's series: what an exporter with --canary-state shows once a round has passed.
    canary = CanaryState(status="ok", last_success_unix=1.0, last_round_unix=1.0, failures_total={"repetition-loop": 1})
    registry.register(CanaryCollector(lambda: canary))
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_appliance_series_on_the_dashboard_is_exported():
    exported = exporter_series()
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
