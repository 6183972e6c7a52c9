"""`appliance k8s --monitoring`: a PodMonitor over both ports and a PrometheusRule with the bundle's alerts, valid
against the prometheus-operator's own CRD schemas (vendored, appliance/render/schemas/) and Kubernetes' ObjectMeta,
selecting the workload's pods by ports they have; off by default."""

from __future__ import annotations

import json
import subprocess
import sys
from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from appliance.lock import lock_digest
from appliance.profile import list_profiles, load_profile
from appliance.render import k8s
from appliance.render.k8s import K8sOptions, render_manifests
from appliance.render.k8s_monitoring import rules_path

SCHEMAS = Path(k8s.__file__).parent / "schemas"
OPTS = K8sOptions(image="appliance:test", monitoring=True)


def strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it, made to reject what it would silently prune: an object that
    lists its properties takes no others (a misspelt key fails here instead of vanishing in the cluster)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


VALIDATORS = {kind: jsonschema.Draft202012Validator(strict(json.loads(
    (SCHEMAS / f"{kind.lower()}.monitoring.coreos.com-v1.schema.json").read_text())))
    for kind in ("PodMonitor", "PrometheusRule")}


def docs(name: str, opts: K8sOptions = OPTS) -> list[dict[str, Any]]:
    loaded = load_profile(name)
    return render_manifests(loaded.profile, opts, lock_digest(), loaded.digest)


def validate(doc: dict[str, Any]) -> None:
    VALIDATORS[doc["kind"]].validate(doc)
    # The CRDs leave metadata to the API server: hold it to Kubernetes' ObjectMeta.
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, "1.33",
                                 strict=True)


def pods(workload: dict[str, Any]) -> list[dict[str, Any]]:
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]]
    lwt = workload["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"], lwt["workerTemplate"]]


@pytest.mark.parametrize("name", list_profiles())
def test_every_profile_gets_a_pod_monitor_and_rules_the_operator_accepts(name: str) -> None:
    rendered = docs(name)
    assert [d["kind"] for d in rendered[-2:]] == ["PodMonitor", "PrometheusRule"]
    for doc in rendered[-2:]:
        validate(doc)


def test_monitoring_is_off_by_default() -> None:
    assert {d["kind"] for d in docs("gb10-tp2", K8sOptions(image="appliance:test"))} == {"LeaderWorkerSet", "Service"}


@pytest.mark.parametrize("name", ["cpu-smoke", "gb10-tp2"])
def test_the_pod_monitor_scrapes_both_ports_of_the_workloads_own_pods(name: str) -> None:
    workload, _, monitor, *_ = docs(name)
    spec = monitor["spec"]
    endpoints = {e["port"]: e for e in spec["podMetricsEndpoints"]}
    assert set(endpoints) == {"metrics", "http"}
    for template in pods(workload):
        assert spec["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        ports = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
        # Every pod has the exporter; only the one serving the API (head, single) has vLLM's port.
        assert "metrics" in ports
        assert ("http" in ports) == (template["metadata"]["labels"]["appliance/role"] != "worker")
    for port, component in (("metrics", "exporter"), ("http", "engine")):
        relabel = {r["targetLabel"]: r for r in endpoints[port]["relabelings"]}
        assert relabel["instance"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]
        assert relabel["component"]["replacement"] == component
        ranks = [r for r in endpoints[port]["relabelings"] if r["targetLabel"] == "rank"]
        # 0 unless the pod carries LWS's worker index (the leader's is 0 too).
        assert ranks[0]["replacement"] == "0"
        assert ranks[1]["sourceLabels"] == ["__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_worker_index"]


@pytest.mark.parametrize("name", list_profiles())
def test_a_gpu_profile_gets_a_pod_monitor_for_dcgm_exporter_and_a_cpu_profile_none(name: str) -> None:
    profile = load_profile(name).profile
    gpu = [d for d in docs(name) if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-gpu")]
    assert len(gpu) == (profile.hardware.target == "gpu"), [d["metadata"]["name"] for d in docs(name)]
    for doc in gpu:
        validate(doc)
        assert doc["spec"]["selector"]["matchLabels"] == {"app": "nvidia-dcgm-exporter"}
        assert doc["spec"]["namespaceSelector"] == {"any": True}
        (endpoint,) = doc["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True


def relabel(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus' keep/replace relabelling (anchored regexes, `;`-joined source labels, $1), for the two actions
    the dcgm PodMonitor uses; None = dropped."""
    import re

    out = dict(labels)
    for r in rules:
        value = ";".join(out.get(k, "") for k in r.get("sourceLabels", []))
        match = re.fullmatch(r.get("regex", "(.*)"), value)
        if r["action"] == "keep":
            if not match:
                return None
        elif match:
            out[r["targetLabel"]] = match.expand(r.get("replacement", "$1").replace("$1", r"\1"))
    return out


@pytest.mark.parametrize(("name", "namespace", "pod", "expected"), [
    ("gb10-tp2", "serve", "appliance-gb10-tp2-0", {"instance": "appliance-gb10-tp2-0", "rank": "0"}),
    ("gb10-tp2", "serve", "appliance-gb10-tp2-0-1", {"instance": "appliance-gb10-tp2-0-1", "rank": "1"}),
    ("gb10-tp2", "serve", "appliance-gb10-tp2-nvfp4-0-1", None),  # another serve whose name extends this one's
    ("gb10-tp2", "other", "appliance-gb10-tp2-0-1", None),  # the same name in another namespace
    ("gb10-tp2", "serve", "", None),  # a GPU no pod holds
    ("rtx-pro-6000-tp2", "serve", "appliance-rtx-pro-6000-tp2-7d9c5b8f6b-x2kq4",
     {"instance": "appliance-rtx-pro-6000-tp2-7d9c5b8f6b-x2kq4", "rank": "0"}),
    ("rtx-pro-6000-tp2", "serve", "appliance-rtx-pro-6000-tp2-nvfp4-7d9c5b8f6b-x2kq4", None),
])
def test_the_dcgm_pod_monitor_keeps_only_this_serves_gpus_labelled_as_its_exporter(
        name: str, namespace: str, pod: str, expected: dict[str, str] | None) -> None:
    (monitor,) = [d for d in docs(name, K8sOptions(image="appliance:test", monitoring=True, namespace="serve"))
                  if d["metadata"]["name"].endswith("-gpu")]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    # A series as dcgm-exporter --kubernetes writes it (the fixture's labels, plus the holder's pod attributes).
    series = {"gpu": "0", "UUID": "GPU-x", "modelName": "m", "pod": pod, "namespace": namespace, "container": "serve"}
    got = relabel(endpoint["metricRelabelings"], series)
    shown = None if got is None else {k: got[k] for k in ("instance", "rank", "component")}
    assert shown == (None if expected is None else {**expected, "component": "gpu"}), got


def test_the_prometheus_rule_carries_the_bundles_rules_unchanged() -> None:
    rule = docs("gb10-tp2")[-1]
    assert rule["spec"]["groups"] == yaml.safe_load(rules_path().read_text())["groups"]
    assert rule["metadata"]["name"] == "appliance-gb10-tp2"


@pytest.mark.parametrize(("mutate", "complaint"), [
    (lambda d: d["spec"].update(podMetricEndpoints=d["spec"].pop("podMetricsEndpoints")),
     "Additional properties are not allowed"),
    (lambda d: d["spec"]["podMetricsEndpoints"][0].update(interval="15 seconds"), "does not match"),
    (lambda d: d["spec"]["podMetricsEndpoints"][0]["relabelings"][0].update(action="rename"), "is not one of"),
])
def test_the_vendored_schema_rejects_a_wrong_pod_monitor(mutate: Any, complaint: str) -> None:
    monitor = deepcopy(docs("cpu-smoke")[2])
    mutate(monitor)
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        VALIDATORS["PodMonitor"].validate(monitor)


def test_the_vendored_schema_rejects_a_rule_without_an_expression() -> None:
    rule = deepcopy(docs("cpu-smoke")[3])
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    with pytest.raises(jsonschema.ValidationError, match="'expr' is a required property"):
        VALIDATORS["PrometheusRule"].validate(rule)


def test_the_command_takes_monitoring_and_a_missing_rules_file_is_exit_2(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "appliance", "k8s", "cpu-smoke", "--monitoring"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert [d["kind"] for d in yaml.safe_load_all(done.stdout)][-2:] == ["PodMonitor", "PrometheusRule"]
    root = tmp_path / "root"
    root.mkdir()
    for src in Path(k8s.__file__).resolve().parents[2].iterdir():  # the data root without monitoring/
        if src.name not in ("monitoring", ".git", ".venv"):
            (root / src.name).symlink_to(src)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          env={"APPLIANCE_ROOT": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "alert rules" in done.stderr and "Traceback" not in done.stderr, done.stderr
