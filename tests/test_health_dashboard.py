"""The dashboard and the alert rules name only series that exist: the exporter's (built as `appliance exporter`
builds it, on the fixtures' logs), the real vLLM's (the CPU serve's /metrics, and the speculative-decoding series
vLLM's own code writes) and dcgm-exporter's default counters (the fixture written from its source). The real
Prometheus runs them against the CPU serve in tests/test_monitoring_engine.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.monitoring_series import dcgm_series_names, exporter_series_names, metric_names, queries, vllm_series_names

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((ROOT / "monitoring" / "grafana" / "dashboards" / "appliance.json").read_text())
RULES = yaml.safe_load((ROOT / "monitoring" / "prometheus" / "rules" / "appliance.rules.yml").read_text())


def used() -> set[str]:
    names = {n for _, expr in queries(DASHBOARD) for n in metric_names(expr)}
    names |= {n for g in RULES["groups"] for r in g["rules"] for n in metric_names(r["expr"])}
    names |= {n for v in DASHBOARD["templating"]["list"] for n in metric_names(str(v.get("query", "")))}
    return names


def test_every_appliance_series_on_the_dashboard_and_in_the_rules_is_exported() -> None:
    mine = {n for n in used() if n.startswith("appliance_")}
    exported = exporter_series_names()
    assert mine and mine <= exported, sorted(mine - exported)


def test_every_vllm_series_on_the_dashboard_and_in_the_rules_exists_in_the_real_engines_metrics() -> None:
    theirs = {n for n in used() if n.startswith("vllm:")}
    real = vllm_series_names()
    assert theirs and theirs <= real, sorted(theirs - real)


def test_every_gpu_series_on_the_dashboard_is_one_dcgm_exporter_serves_by_default() -> None:
    gpu = {n for n in used() if n.startswith("DCGM_")}
    served = dcgm_series_names()
    assert gpu and gpu <= served, sorted(gpu - served)


def test_the_dashboard_is_importable_grafana_json() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 36
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert {"datasource", "instance", "rank", "model_name"} <= names
