"""Kubernetes manifests: a view of the ServePlan, built as data and dumped, never templated.

Single-node profiles get a Deployment + Service; multi-node ones a LeaderWorkerSet (one pod per
node, the group recreated as a whole) + Service. Every container runs `appliance run` with
APPLIANCE_* env, the same entrypoint as Docker: it validates, runs the cross-node rendezvous and
renders the same argv in the pod. The engine env of the plan is written into every pod template
as well, so that a reviewer (and a test) sees that head and workers get the same engine behaviour.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from appliance.errors import ApplianceError
from appliance.multinode.rendezvous import rendezvous_port
from appliance.profile.model import Profile
from appliance.redact import SECRET_ENV
from appliance.render.plan import Placement, Role, ServePlan, build_plan

Manifest = dict[str, Any]
PROBE = "/opt/appliance/healthchecks/probe"
LWS_API = "leaderworkerset.x-k8s.io/v1"
# LWS puts these first in every container's env, so `$(VAR)` references to them expand.
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
# Per-node values: `appliance run` derives them in each pod (pod IP, fabric interface).
PER_NODE_ENV = frozenset({"VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
HF_HOME = "/var/cache/huggingface"
APPLIANCE_HOME = "/var/cache/appliance"  # compile/JIT caches (keyed by lock + engine digest) live under it
CONTAINER = "appliance"


@dataclass(frozen=True)
class ProbeBudget:
    startup_period_s: int
    startup_failures: int


# A ~160 GB DeepSeek checkpoint loads for many minutes before graph capture; the tiny CPU model ~1 min.
GPU_BUDGET = ProbeBudget(startup_period_s=10, startup_failures=240)  # 40 min
CPU_BUDGET = ProbeBudget(startup_period_s=5, startup_failures=60)  # 5 min


def probe_budget(profile: Profile) -> ProbeBudget:
    return CPU_BUDGET if profile.hardware.gpu == "cpu" else GPU_BUDGET


@dataclass(frozen=True)
class K8sOptions:
    image: str
    namespace: str | None = None
    name: str | None = None
    """Resource name; default appliance-PROFILE."""
    secret: str = "appliance-secrets"
    """Secret holding HF_TOKEN and VLLM_API_KEY (each optional)."""
    hf_cache_claim: str | None = None
    """PersistentVolumeClaim for the HF cache (weights); None = emptyDir (downloaded per pod start)."""
    appliance_cache_claim: str | None = None
    """PersistentVolumeClaim for the compile/JIT caches; None = emptyDir."""
    fabric_ifname: str | None = None
    """Fabric interface inside the pods (e.g. a secondary network); None = the pod network."""
    shm_size: str | None = None
    """sizeLimit of the memory-backed /dev/shm; default 16Gi on GPUs, 2Gi on the CPU build."""
    overrides: tuple[str, ...] = field(default_factory=tuple)
    """`a.b=v` overrides the manifests were rendered with; they reach the pods as APPLIANCE_SET."""


def resource_name(profile: Profile, opts: K8sOptions) -> str:
    return opts.name or f"appliance-{profile.name}"


def _labels(profile: Profile, opts: K8sOptions, lock_digest: str, profile_digest: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "appliance",
        "app.kubernetes.io/instance": resource_name(profile, opts),
        "appliance/profile": profile.name,
        "appliance/lock": lock_digest[:12],
        "appliance/profile-digest": profile_digest[:12],
    }


def _value(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _env(profile: Profile, plan: ServePlan, opts: K8sOptions, master_port: int) -> list[dict[str, Any]]:
    if any(";" in item for item in opts.overrides):
        raise ApplianceError("an override holds ';', which separates APPLIANCE_SET items in the pod",
                             field="--set", value=list(opts.overrides), fix="drop the ';' from the value")
    env = [_value("APPLIANCE_PROFILE", profile.name)]
    if opts.overrides:
        env.append(_value("APPLIANCE_SET", ";".join(opts.overrides)))
    if plan.role != "single":
        env += [
            _value("APPLIANCE_NODE_RANK", "0" if plan.role == "head" else WORKER_INDEX),
            _value("APPLIANCE_MASTER_ADDR", LEADER_ADDRESS),
            _value("APPLIANCE_MASTER_PORT", str(master_port)),
        ]
        # A named fabric gives each rank its address there (run-time, in the pod); without one, the pod's IP.
        # Never both: a given host IP wins, and VLLM_HOST_IP would then miss the fabric NCCL uses.
        env.append(_value("APPLIANCE_FABRIC_IFNAME", opts.fabric_ifname) if opts.fabric_ifname else
                   {"name": "APPLIANCE_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env += [_value(k, v) for k, v in sorted(plan.env.items()) if k not in PER_NODE_ENV]
    env += [_value("HF_HOME", HF_HOME), _value("APPLIANCE_HOME", APPLIANCE_HOME),
            _value("APPLIANCE_HEALTH_PORT", str(profile.server.health_port))]  # where the probe asks
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": opts.secret, "key": key, "optional": True}}}
            for key in SECRET_ENV]
    return env


def _probe(kind: str, period: int, failures: int) -> dict[str, Any]:
    return {"exec": {"command": [PROBE, kind]}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": 5}


def _volume(name: str, claim: str | None) -> dict[str, Any]:
    if claim:
        return {"name": name, "persistentVolumeClaim": {"claimName": claim}}
    return {"name": name, "emptyDir": {}}


def _pod_template(profile: Profile, opts: K8sOptions, plan: ServePlan, labels: dict[str, str],
                  master_port: int) -> Manifest:
    gpu = profile.hardware.gpu != "cpu"
    ports = [{"name": "metrics", "containerPort": profile.server.health_port, "protocol": "TCP"}]
    if plan.role != "worker":
        ports.insert(0, {"name": "http", "containerPort": profile.server.port, "protocol": "TCP"})
    if plan.role == "head":
        ports += [{"name": "dist-master", "containerPort": master_port, "protocol": "TCP"},
                  {"name": "rendezvous", "containerPort": rendezvous_port(profile, Placement(master_port=master_port)),
                   "protocol": "TCP"}]
    budget = probe_budget(profile)
    if gpu:
        count = str(profile.hardware.gpus_per_node)
        resources: dict[str, Any] = {"requests": {"nvidia.com/gpu": count}, "limits": {"nvidia.com/gpu": count}}
    else:
        resources = {"requests": {"cpu": "1", "memory": "4Gi"}}
    container = {
        "name": CONTAINER,
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["appliance", "run"],
        "env": _env(profile, plan, opts, master_port),
        "ports": ports,
        "resources": resources,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "hf-cache", "mountPath": HF_HOME},
                         {"name": "appliance-cache", "mountPath": APPLIANCE_HOME}],
        "startupProbe": _probe("startup", budget.startup_period_s, budget.startup_failures),
        # The exporter already debounces (progress window, engine polls): one failed probe means not ready,
        # so traffic leaves a wedged or dead engine within two periods.
        "readinessProbe": _probe("ready", 10, 1),
        "livenessProbe": _probe("live", 15, 4),
    }
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(profile.server.health_port),
                   "prometheus.io/path": "/metrics"}
    return {
        "metadata": {"labels": {**labels, "appliance/role": plan.role}, "annotations": annotations},
        "spec": {
            # Service links would put e.g. VLLM_PORT=tcp://… into the env of every pod in the namespace
            # that has a Service named vllm, and vLLM reads VLLM_PORT.
            "enableServiceLinks": False,
            # K22: a rank's process group needs time to stop; supervisord escalates to SIGKILL within it.
            "terminationGracePeriodSeconds": 120 if gpu else 60,
            "containers": [container],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory",
                                              "sizeLimit": opts.shm_size or ("16Gi" if gpu else "2Gi")}},
                _volume("hf-cache", opts.hf_cache_claim),
                _volume("appliance-cache", opts.appliance_cache_claim),
            ],
        },
    }


def _metadata(name: str, opts: K8sOptions, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    return meta


def _service(profile: Profile, opts: K8sOptions, labels: dict[str, str], role: Role) -> Manifest:
    name = resource_name(profile, opts)
    # "-api": an LWS already owns a headless Service named after itself (the pods' DNS).
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(f"{name}-api", opts, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/instance": name, "appliance/role": role},
            "ports": [{"name": "http", "port": profile.server.port, "targetPort": "http", "protocol": "TCP"},
                      {"name": "metrics", "port": profile.server.health_port, "targetPort": "metrics",
                       "protocol": "TCP"}],
        },
    }


def plans_for(profile: Profile, master_port: int | None = None) -> dict[Role, ServePlan]:
    """The plans the pods will render: single, or head + a worker (workers differ only in rank)."""
    if profile.hardware.nodes == 1:
        return {"single": build_plan(profile)}
    port = master_port or profile.distributed.master_port
    ranks: tuple[tuple[Role, int], ...] = (("head", 0), ("worker", 1))
    return {role: build_plan(profile, Placement(node_rank=rank, master_addr=LEADER_ADDRESS, master_port=port))
            for role, rank in ranks}


def render_manifests(profile: Profile, opts: K8sOptions, lock_digest: str, profile_digest: str) -> list[Manifest]:
    name = resource_name(profile, opts)
    labels = _labels(profile, opts, lock_digest, profile_digest)
    port = profile.distributed.master_port
    plans = plans_for(profile, port)
    if "single" in plans:
        template = _pod_template(profile, opts, plans["single"], labels, port)
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _metadata(name, opts, labels),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # a rolling update would need a second set of GPUs
                "selector": {"matchLabels": {"app.kubernetes.io/instance": name, "appliance/role": "single"}},
                "template": template,
            },
        }
        return [deployment, _service(profile, opts, labels, "single")]
    lws = {
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet",
        "metadata": _metadata(name, opts, labels),
        "spec": {
            "replicas": 1,
            # LeaderCreated, not LeaderReady: the leader only gets ready once its workers have joined.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": profile.hardware.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",  # one rank restarting alone would hang the rest
                "leaderTemplate": _pod_template(profile, opts, plans["head"], labels, port),
                "workerTemplate": _pod_template(profile, opts, plans["worker"], labels, port),
            },
        },
    }
    return [lws, _service(profile, opts, labels, "head")]


def dump(manifests: list[Manifest], fmt: Literal["yaml", "json"]) -> str:
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2) + "\n"
    return yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False)
