"""Kubernetes monitoring for a serve (`appliance k8s --monitoring`, off by default): a PodMonitor that scrapes both
ports of every pod (the exporter's `metrics`, and vLLM's own `http` where the pod serves the API), on a GPU profile
a second one that takes the serve's own GPUs from NVIDIA's dcgm-exporter (the dashboard's GPU row), and a
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


DCGM_SELECTOR = {"app": "nvidia-dcgm-exporter"}
"""The pods of the NVIDIA GPU Operator's dcgm-exporter DaemonSet, and the name of their port (NVIDIA/gpu-operator
assets/state-dcgm-exporter/0800_daemonset.yaml, which also sets DCGM_EXPORTER_KUBERNETES=true: each GPU's series
names the pod that holds the GPU in `pod` and `namespace`)."""
DCGM_PORT = "metrics"


def dcgm_pod_monitor(name: str, metadata: dict[str, Any], *, namespace: str | None,
                     multi_node: bool) -> Manifest:
    """The serve's GPUs from the node's dcgm-exporter, in whatever namespace it runs: only the series of GPUs held by
    this serve's pods are kept, labelled as the exporter's (`instance` = the pod, `rank` = the LWS worker index from
    the pod's name `NAME-GROUP-INDEX`, the leader's `NAME-GROUP` being 0, `component` = gpu). `honorLabels` keeps
    dcgm-exporter's `pod` and `namespace` (the GPU's holder) over the scrape's own (dcgm-exporter's pod)."""
    # This serve's pods only (another serve's name may extend this one's: appliance-gb10-tp2-nvfp4): an LWS names
    # them NAME-GROUP and NAME-GROUP-INDEX, a Deployment NAME-<template hash>-<5 characters>.
    pods = f"{name}-[0-9]+(-[0-9]+)?" if multi_node else f"{name}-[a-z0-9]+-[a-z0-9]{{5}}"
    keep = ({"sourceLabels": ["namespace", "pod"], "regex": f"{namespace};{pods}"} if namespace
            else {"sourceLabels": ["pod"], "regex": pods})
    relabel: list[dict[str, Any]] = [
        {"action": "keep", **keep},
        {"action": "replace", "sourceLabels": ["pod"], "targetLabel": "instance"},
        {"action": "replace", "targetLabel": "rank", "replacement": "0"},
    ]
    if multi_node:
        relabel.append({"action": "replace", "sourceLabels": ["pod"], "regex": f"{name}-[0-9]+-([0-9]+)",
                        "targetLabel": "rank", "replacement": "$1"})
    relabel.append({"action": "replace", "targetLabel": "component", "replacement": "gpu"})
    return {
        "apiVersion": MONITORING_API, "kind": "PodMonitor",
        "metadata": {**metadata, "name": f"{name}-gpu"},
        "spec": {
            "selector": {"matchLabels": DCGM_SELECTOR},
            "namespaceSelector": {"any": True},
            "podMetricsEndpoints": [{"port": DCGM_PORT, "path": "/metrics", "interval": SCRAPE_INTERVAL,
                                     "honorLabels": True, "metricRelabelings": relabel}],
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
