"""Kubernetes monitoring for a serve (`appliance k8s --monitoring`, off by default): a PodMonitor that scrapes both
ports of every pod (the exporter's `metrics`, and vLLM's own `http` where the pod serves the API), and a
PrometheusRule holding the bundle's alert rules (monitoring/prometheus/rules/: one source for compose and
Kubernetes). kube-prometheus-stack ignores `prometheus.io/*` annotations; these are the prometheus-operator's
resources (monitoring.coreos.com/v1, validated against its CRD schemas in the tests).

The relabelling gives the series the labels the rules and the dashboard join on: `instance` = the pod (both ports of
a pod share it), `rank` = the LeaderWorkerSet worker index (0 for the leader and a single pod), `component` =
exporter | engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.paths import data_root
from appliance.yamlstrict import load_file

Manifest = dict[str, Any]
MONITORING_API = "monitoring.coreos.com/v1"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
SCRAPE_INTERVAL = "15s"
COMPONENTS = {"metrics": "exporter", "http": "engine"}
"""Container port name (k8s.py) -> the `component` label the bundle's rules and dashboard use."""


def rules_path() -> Path:
    return data_root() / "monitoring" / "prometheus" / "rules" / "appliance.rules.yml"


def _meta_label(label: str) -> str:
    """Prometheus' name for a pod label in service discovery: every character outside [a-zA-Z0-9_] becomes `_`."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in label)


def _relabelings(component: str) -> list[dict[str, Any]]:
    return [
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "instance"},
        {"action": "replace", "targetLabel": "rank", "replacement": "0"},
        {"action": "replace", "sourceLabels": [_meta_label(LWS_WORKER_INDEX)], "regex": "(.+)",
         "targetLabel": "rank", "replacement": "$1"},
        {"action": "replace", "targetLabel": "component", "replacement": component},
    ]


def pod_monitor(name: str, metadata: dict[str, Any], selector: dict[str, str]) -> Manifest:
    """Both ports of the serve's pods; a headless worker has no `http` port, so only its exporter is scraped."""
    return {
        "apiVersion": MONITORING_API, "kind": "PodMonitor",
        "metadata": {**metadata, "name": name},
        "spec": {
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [
                {"port": port, "path": "/metrics", "interval": SCRAPE_INTERVAL, "relabelings": _relabelings(comp)}
                for port, comp in COMPONENTS.items()
            ],
        },
    }


def prometheus_rule(name: str, metadata: dict[str, Any], path: Path | None = None) -> Manifest:
    """The bundle's rule groups, as they are (promtool tests them in that file)."""
    source = path or rules_path()
    if not source.is_file():
        raise ApplianceError(f"the alert rules {source} are not there", field="--monitoring", value=str(source),
                             fix="run from the repository or an image that carries monitoring/ (APPLIANCE_ROOT "
                                 "names the folder holding it)")
    doc = load_file(source)
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list) or not groups:
        raise ApplianceError(f"{source} holds no rule groups", field="--monitoring", value=str(source),
                             fix="give a Prometheus rules file (`groups:`), as promtool check rules accepts")
    return {"apiVersion": MONITORING_API, "kind": "PrometheusRule", "metadata": {**metadata, "name": name},
            "spec": {"groups": groups}}
