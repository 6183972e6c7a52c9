"""Kubernetes manifests: a view of the ServePlan, built as data and dumped, never templated.

Single-node profiles get a Deployment + Service; multi-node ones a LeaderWorkerSet (one pod per
node, the group recreated as a whole) + Service. Every container runs `appliance run` with
APPLIANCE_* env, the same entrypoint as Docker: it validates, runs the cross-node rendezvous and
renders the same argv in the pod. The engine env of the plan is written into every pod template
as well, so that a reviewer (and a test) sees that head and workers get the same engine behaviour.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from appliance.bounds import EXPORTER_BIND_ALL
from appliance.catalogue import load_catalogue
from appliance.errors import ApplianceError
from appliance.profile.model import Profile
from appliance.profile.topology import Role
from appliance.redact import SECRET_ENV
from appliance.render.managed import SOCKET_IFNAME_ENV
from appliance.render.plan import build_plan
from appliance.render.serveplan import ResolvedPlacement, ServePlan, rank_placements

Manifest = dict[str, Any]
Storage = Literal["per-rank", "host", "ephemeral"]
Rollout = Literal["recreate", "surge"]
PROBE = "/opt/appliance/healthchecks/probe"
LWS_API = "leaderworkerset.x-k8s.io/v1"
# LWS puts these first in every container's env, so `$(VAR)` references to them expand.
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
# Per-node values: `appliance run` derives them in each pod (pod IP, fabric interface).
PER_NODE_ENV = frozenset({"VLLM_HOST_IP", *SOCKET_IFNAME_ENV})
HF_HOME = "/var/cache/huggingface"
APPLIANCE_HOME = "/var/cache/appliance"  # compile/JIT caches (keyed by lock + engine digest) live under it
CONTAINER = "appliance"
UID = 10001  # the image's user (Dockerfile); fsGroup makes a PVC's files writable by it
# RDMA mode: the resource the RDMA device plugin advertises (k8s-rdma-shared-dev-plugin's default name).
DEFAULT_RDMA_RESOURCE = "rdma/rdma_shared_device_a"
GIB = 1024**3
COMPILE_CACHE_GIB = 20  # JIT/compile caches of one stack (FlashInfer, TileLang, Triton, inductor, CUDA)
# Node labels set by NVIDIA GPU feature discovery (the GPU operator): the product name with spaces as dashes.
# Unconfirmed for these products here (no SM12x node): `--gpu-product` replaces them.
GPU_PRODUCTS = {
    "gb10": ("NVIDIA-GB10",),
    "rtx-pro-6000": ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
                     "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
                     "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"),
    "rtx-5090": ("NVIDIA-GeForce-RTX-5090",),
}
# Host memory a GPU pod asks for: GB10's memory is unified (the harness's serve script refuses to start under
# MIN_AVAILABLE_MEM_GIB=96 of MemAvailable, jasl/vllm-ds4-sm120-harness scripts/dgx_spark_start_mp_serve.sh: not a
# figure of the seed); a discrete-GPU node needs host memory for the loader's buffers, CUDA graphs' host side and the
# API server.
DISCRETE_HOST_MEMORY_GIB = 32
# GPU operator and cloud GPU node pools taint GPU nodes `nvidia.com/gpu:NoSchedule`: without this toleration a GPU
# pod stays Pending there.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CACHES = {"hf-cache": HF_HOME, "appliance-cache": APPLIANCE_HOME}
HOST_SUBDIRS = {"hf-cache": "hf", "appliance-cache": "cache"}


@dataclass(frozen=True)
class ProbeBudget:
    startup_period_s: int
    startup_failures: int


# A ~160 GB DeepSeek checkpoint loads for many minutes before graph capture; the tiny CPU model ~1 min.
GPU_BUDGET = ProbeBudget(startup_period_s=10, startup_failures=240)  # 40 min
CPU_BUDGET = ProbeBudget(startup_period_s=5, startup_failures=60)  # 5 min
READY_PERIOD_S = 10


def probe_budget(profile: Profile) -> ProbeBudget:
    return CPU_BUDGET if profile.hardware.target == "cpu" else GPU_BUDGET


@dataclass(frozen=True)
class K8sOptions:
    image: str
    namespace: str | None = None
    name: str | None = None
    """Resource name; default appliance-PROFILE."""
    secret: str = "appliance-secrets"
    """Secret holding HF_TOKEN and VLLM_API_KEY (each optional)."""
    hf_cache_claim: str | None = None
    """One PersistentVolumeClaim for the HF cache (weights) of every pod; multi-node needs it ReadWriteMany."""
    appliance_cache_claim: str | None = None
    """One PersistentVolumeClaim for the compile/JIT caches; multi-node: each rank in its own subPath of it."""
    storage: Storage | None = None
    """Where the caches live when no claim is given: per-rank PVCs (volumeClaimTemplates, the multi-node default),
    host folders (hostPath, pre-staged weights), or emptyDir. None = per-rank on multi-node GPU, else emptyDir."""
    storage_class: str | None = None
    """StorageClass of the per-rank (or single-node) PVCs; None = the cluster's default class. A local class with
    WaitForFirstConsumer binding gives node-affine local volumes."""
    host_cache: str | None = None
    """storage=host: the folder on every node holding hf/ (an HF cache) and cache/ (the compile caches)."""
    prestaged: bool = False
    """The weights are already in the cache (host folders, a synced snapshot): no download init container, and the
    engine runs with HF_HUB_OFFLINE=1."""
    download_mbps: float = 50.0
    """The slowest node's download rate floor (MB/s): the rendezvous waits long enough for the slower rank's
    checkpoint download to finish (K28)."""
    tolerations: tuple[str, ...] = ()
    """Extra tolerations, `KEY[=VALUE][:EFFECT]`; GPU pods always tolerate the nvidia.com/gpu taint."""
    runtime_class: str | None = None
    """spec.runtimeClassName (e.g. nvidia) for clusters whose GPU runtime is not the default one."""
    fabric_ifname: str | None = None
    """Fabric interface inside the pods (e.g. a secondary network), or one per rank `0=IF,1=IF` (GB10 pairs often
    name their ConnectX ports differently); None = the pod network."""
    shm_size: str | None = None
    """sizeLimit of the memory-backed /dev/shm; default 16Gi on GPUs, 2Gi on the CPU build."""
    rdma_resource: str | None = None
    """RDMA mode: host network and this RDMA device-plugin resource, so NCCL can use IB/RoCE (K10)."""
    gpu_products: tuple[str, ...] = ()
    """nvidia.com/gpu.product values the pods may run on; default GPU_PRODUCTS of the profile's GPU."""
    monitoring: bool = False
    """Add a PodMonitor (both ports) and a PrometheusRule (the bundle's alerts) for prometheus-operator."""
    overrides: tuple[str, ...] = field(default_factory=tuple)
    """`a.b=v` overrides the manifests were rendered with; they reach the pods as APPLIANCE_SET."""
    rollout: Rollout = "recreate"
    """How a new template replaces the running pod: `recreate` stops it first (one set of GPUs, out of service
    while the new one starts); `surge` starts the new pod beside it and stops the old one once the new is ready and
    the old has drained (zero downtime where the cluster has room for a second pod). Single-node profiles only."""
    drain_s: float | None = None
    """surge: how long a stopping pod waits for its running requests (`appliance drain`, the preStop hook); None =
    DEFAULT_DRAIN_S. Refused with recreate, where no hook runs."""

    @property
    def drain_bound_s(self) -> float:
        return DEFAULT_DRAIN_S if self.drain_s is None else self.drain_s


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
        # On the host network (RDMA) the pod's IP is the node's InternalIP, often the management network: there
        # each pod resolves its own interface, address and RDMA device at start (`appliance run`, K39), so one
        # manifest serves every node.
        if opts.fabric_ifname:
            env.append(_value("APPLIANCE_FABRIC_IFNAME", opts.fabric_ifname))
        elif not (opts.rdma_resource and profile.hardware.target != "cpu"):  # a GPU rank: netident.needs_identity
            env.append({"name": "APPLIANCE_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env += [_value(k, v) for k, v in sorted(plan.env.items()) if k not in PER_NODE_ENV]
    env += [_value("HF_HOME", HF_HOME), _value("APPLIANCE_HOME", APPLIANCE_HOME),
            _value("APPLIANCE_HEALTH_PORT", str(profile.server.health_port)),  # where the probe asks
            # Prometheus scrapes the pod IP (PodMonitor), and the leader's exporter asks each worker's at its pod or
            # fabric address: every interface of the pod (the probes use the probe socket, whatever this says).
            _value("APPLIANCE_EXPORTER_HOST", EXPORTER_BIND_ALL)]
    if opts.prestaged:
        env.append(_value("HF_HUB_OFFLINE", "1"))  # the weights are in the cache: never ask the hub
    wait = rendezvous_wait_s(profile, opts) if plan.role != "single" else None
    if wait:
        env.append(_value("APPLIANCE_RENDEZVOUS_TIMEOUT_S", str(wait)))
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": opts.secret, "key": key, "optional": True}}}
            for key in SECRET_ENV]
    return env


SETTLE_S = 5
DEFAULT_DRAIN_S = 60.0
"""surge: seconds a stopping pod keeps serving while the Service's proxies drop it (kube-proxy and most ingress
controllers follow an EndpointSlice change within a second or two)."""


def progress_deadline_s(profile: Profile) -> int:
    """A Deployment's progressDeadlineSeconds: a new pod may take its whole startup budget (a GPU pod's checkpoint
    load is minutes) and one readiness period before the rollout counts as stalled. The default 600 s would call a
    normal GPU start a failed rollout (`kubectl rollout status` exits 1)."""
    budget = probe_budget(profile)
    return budget.startup_period_s * budget.startup_failures + READY_PERIOD_S + 60


def termination_grace_s(profile: Profile, opts: K8sOptions) -> int:
    """K22: a rank's process group needs time to stop, and supervisord escalates to SIGKILL within it; a surge pod's
    drain (preStop) runs first, inside the same grace period."""
    base = 120 if profile.hardware.target != "cpu" else 60
    return base + (SETTLE_S + math.ceil(opts.drain_bound_s) if opts.rollout == "surge" else 0)


def _drain_hook(opts: K8sOptions, place: ResolvedPlacement) -> dict[str, Any]:
    """The preStop hook of a surge pod: keep serving while the proxies drop the pod, then wait for the requests."""
    return {"preStop": {"exec": {"command": ["appliance", "drain", "--url", str(place.engine_url),
                                             "--settle-s", str(SETTLE_S),
                                             "--max-s", f"{opts.drain_bound_s:g}"]}}}


def _probe(kind: str, period: int, failures: int) -> dict[str, Any]:
    return {"exec": {"command": [PROBE, kind]}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": 5}


def storage_of(profile: Profile, opts: K8sOptions) -> Storage:
    """Where the caches live. Multi-node GPU serves default to per-rank PVCs: one claimName in every pod cannot
    attach ReadWriteOnce storage on two nodes, and an emptyDir with RecreateGroupOnPodRestart downloads the whole
    checkpoint again on every node after any restart (about 2 x 160 GB on two GB10s)."""
    if opts.storage:
        return opts.storage
    if opts.host_cache:
        return "host"
    multi_gpu = profile.hardware.nodes > 1 and profile.hardware.target != "cpu"
    return "per-rank" if multi_gpu or opts.storage_class else "ephemeral"


def cache_gib(profile: Profile, name: str) -> int | None:
    gpu = profile.hardware.target != "cpu"
    if name == "hf-cache":
        return hf_cache_gib(profile) if gpu else None
    return COMPILE_CACHE_GIB if gpu else None


def _claim(opts: K8sOptions, name: str) -> str | None:
    return opts.hf_cache_claim if name == "hf-cache" else opts.appliance_cache_claim


def _cache_volume(profile: Profile, opts: K8sOptions, name: str) -> dict[str, Any] | None:
    """The pod-spec volume of one cache; None when a per-rank claim template provides it."""
    claim, storage = _claim(opts, name), storage_of(profile, opts)
    if claim:
        return {"name": name, "persistentVolumeClaim": {"claimName": claim}}
    if storage == "host":
        # type Directory: the folder must exist (pre-staged, owned by uid 10001): a kubelet-made one is root's.
        return {"name": name, "hostPath": {"path": f"{opts.host_cache}/{HOST_SUBDIRS[name]}", "type": "Directory"}}
    if storage == "per-rank":
        return None if profile.hardware.nodes > 1 else \
            {"name": name, "persistentVolumeClaim": {"claimName": f"{_single_claim(profile, opts, name)}"}}
    size = cache_gib(profile, name)
    return {"name": name, "emptyDir": {"sizeLimit": f"{size}Gi"} if size else {}}


def _single_claim(profile: Profile, opts: K8sOptions, name: str) -> str:
    return f"{resource_name(profile, opts)}-{name}"


def _claim_spec(profile: Profile, opts: K8sOptions, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": f"{cache_gib(profile, name) or 1}Gi"}}}
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    return spec


def per_rank_claims(profile: Profile, opts: K8sOptions) -> list[dict[str, Any]]:
    """LWS volumeClaimTemplates: one claim of each cache per pod (`<cache>-<pod name>`), kept across group restarts
    and deletes, so a restarted rank resumes where its own download and JIT caches stopped."""
    return [{"metadata": {"name": name}, "spec": _claim_spec(profile, opts, name)}
            for name in CACHES if not _claim(opts, name)]


def _cache_mounts(profile: Profile, opts: K8sOptions) -> list[dict[str, Any]]:
    mounts = []
    for name, path in CACHES.items():
        mount: dict[str, Any] = {"name": name, "mountPath": path}
        if name == "appliance-cache" and _claim(opts, name) and profile.hardware.nodes > 1:
            # One shared claim: each rank writes its own JIT caches (two writers of one Triton/FlashInfer cache race).
            mount["subPathExpr"] = "rank-$(APPLIANCE_NODE_RANK)"
        mounts.append(mount)
    return mounts


def hf_cache_gib(profile: Profile) -> int | None:
    """The checkpoint's size on disk plus 10 %, in GiB (None when the catalogue does not know it)."""
    facts = load_catalogue().checkpoints.get(profile.model.checkpoint)
    return -(-int(facts.size_bytes * 1.1) // GIB) if facts else None


def host_memory_gib(profile: Profile) -> int:
    gpu = load_catalogue().gpus[profile.hardware.gpu]
    if gpu.unified_memory and gpu.min_mem_available_gib:
        return int(gpu.min_mem_available_gib)
    return DISCRETE_HOST_MEMORY_GIB


def rendezvous_wait_s(profile: Profile, opts: K8sOptions) -> int | None:
    """K28: how long the group's rendezvous waits, when each rank downloads the checkpoint in its own init
    container: the ranks start their engines as their downloads finish, possibly tens of minutes apart, and a
    rendezvous that gives up first restarts the whole group (RecreateGroupOnPodRestart), over and over. The wait
    covers the whole checkpoint at the floor rate `download_mbps`; None = no download in the pod, the default
    wait (APPLIANCE_RENDEZVOUS_TIMEOUT_S, 900 s) holds."""
    facts = load_catalogue().checkpoints.get(profile.model.checkpoint)
    if profile.hardware.nodes < 2 or profile.hardware.target == "cpu" or opts.prestaged or not facts:
        return None
    wait = max(DEFAULT_RENDEZVOUS_S, -(-int(facts.size_bytes / (opts.download_mbps * 1e6)) // 60) * 60)
    if wait > MAX_RENDEZVOUS_S:
        raise ApplianceError(
            f"--download-mbps={opts.download_mbps:g}: the {facts.size_bytes / 1e9:.0f} GB checkpoint would take "
            f"{wait / 3600:.1f} h, longer than a rendezvous may wait ({MAX_RENDEZVOUS_S // 3600} h)",
            field="--download-mbps", value=opts.download_mbps,
            fix="pre-stage the weights (--host-cache DIR --prestaged, or appliance fetch-model into the claims first)",
            reason="the ranks would start their engines too far apart for the group's rendezvous (K28)")
    return wait


DEFAULT_RENDEZVOUS_S = 900
"""settings.rendezvous_timeout_s's default."""
MAX_RENDEZVOUS_S = 86_400
"""settings.rendezvous_timeout_s's bound."""


def parse_toleration(text: str) -> dict[str, str]:
    """`KEY[=VALUE][:EFFECT]` -> a Kubernetes toleration (Exists without a value, Equal with one)."""
    rest, _, effect = text.partition(":")
    key, eq, value = rest.partition("=")
    out = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out


def _scheduling(profile: Profile, opts: K8sOptions) -> dict[str, Any]:
    """GPU pods land only on nodes of the profile's CPU architecture and GPU product (a GB10 image is arm64), and
    tolerate the GPU taint those nodes usually carry."""
    gpu = load_catalogue().gpus[profile.hardware.gpu]
    products = list(opts.gpu_products or GPU_PRODUCTS.get(profile.hardware.gpu, ()))
    out: dict[str, Any] = {"nodeSelector": {"kubernetes.io/arch": gpu.host_arch.split("/", 1)[1]}}
    if products:
        term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": products}]}
        out["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}
    extra = [parse_toleration(t) for t in opts.tolerations]
    out["tolerations"] = [GPU_TOLERATION, *(t for t in extra if t != GPU_TOLERATION)]
    if opts.runtime_class:
        out["runtimeClassName"] = opts.runtime_class
    return out


def _fetch_model(profile: Profile, opts: K8sOptions, env: list[dict[str, Any]]) -> dict[str, Any]:
    """Init container: the weights into the HF cache before the engine starts, so the startup probe's budget
    covers only load + JIT; a restarted pod resumes the download instead of starting the probe clock."""
    keep = {"APPLIANCE_PROFILE", "APPLIANCE_SET", "HF_HOME", "HF_TOKEN", "APPLIANCE_HOME"}
    return {
        "name": "fetch-model",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["appliance", "fetch-model"],
        "env": [e for e in env if e["name"] in keep],
        # The appliance home keeps the hashes fetch-model checked (weights/stamps.py): the engine container's check
        # of the same files (W3) then reads 160 GB only once.
        "volumeMounts": [{"name": "hf-cache", "mountPath": HF_HOME},
                         {"name": "appliance-cache", "mountPath": APPLIANCE_HOME}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }


def _pod_template(profile: Profile, opts: K8sOptions, plan: ServePlan, labels: dict[str, str],
                  place: ResolvedPlacement) -> Manifest:
    gpu = profile.hardware.target != "cpu"
    ports = [{"name": "metrics", "containerPort": profile.server.health_port, "protocol": "TCP"}]
    if plan.role != "worker":
        ports.insert(0, {"name": "http", "containerPort": place.api_port, "protocol": "TCP"})
    if plan.role == "head":
        ports += [{"name": "dist-master", "containerPort": place.master_port, "protocol": "TCP"},
                  {"name": "rendezvous", "containerPort": place.rendezvous_port, "protocol": "TCP"}]
        if profile.distributed.sync_model:  # W4: the workers take the leader's verified snapshot from here
            ports.append({"name": "model-sync", "containerPort": place.model_sync_port, "protocol": "TCP"})
    budget = probe_budget(profile)
    volumes = {name: _cache_volume(profile, opts, name) for name in CACHES}
    if gpu:
        count = str(profile.hardware.gpus_per_node)
        requests = {"nvidia.com/gpu": count, "memory": f"{host_memory_gib(profile)}Gi"}
        limits = {"nvidia.com/gpu": count}
        local = sum(cache_gib(profile, name) or 0 for name, v in volumes.items() if v and "emptyDir" in v)
        if local:  # emptyDir caches live on the node's ephemeral storage
            requests["ephemeral-storage"] = f"{local}Gi"
        if opts.rdma_resource:
            requests[opts.rdma_resource] = limits[opts.rdma_resource] = "1"
        resources: dict[str, Any] = {"requests": requests, "limits": limits}
    else:
        resources = {"requests": {"cpu": "1", "memory": "4Gi"}}
    env = _env(profile, plan, opts, place.master_port)
    wait_s = rendezvous_wait_s(profile, opts) if plan.role != "single" else None
    container = {
        "name": CONTAINER,
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["appliance", "run"],
        "env": env,
        "ports": ports,
        "resources": resources,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *_cache_mounts(profile, opts)],
        # The rendezvous (K28) runs before the exporter, inside the startup budget: it is added to it.
        "startupProbe": _probe("startup", budget.startup_period_s,
                               budget.startup_failures + -(-(wait_s or 0) // budget.startup_period_s)),
        # The exporter already debounces (progress window, engine polls): one failed probe means not ready,
        # so traffic leaves a wedged or dead engine within two periods.
        "readinessProbe": _probe("ready", READY_PERIOD_S, 1),
        "livenessProbe": _probe("live", 15, 4),
    }
    if opts.rollout == "surge":
        container["lifecycle"] = _drain_hook(opts, place)
    # RDMA registers (pins) NCCL's buffers, bounded by RLIMIT_MEMLOCK. No IPC_LOCK here: a capability added to a
    # non-root container (uid 10001) is never effective, so it lifts nothing; the memlock limit is the container
    # runtime's (containerd: LimitMEMLOCK in its unit, docs/kubernetes.md), and `appliance run` refuses to start
    # an RDMA serve under a finite one, naming that fix (doctor's memlock check, K27).
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(profile.server.health_port),
                   "prometheus.io/path": "/metrics"}
    spec: dict[str, Any] = {
        # The image runs as uid 10001; fsGroup makes a PVC (HF cache, compile cache) writable by it, and
        # OnRootMismatch skips the recursive chown of a 160 GB cache at every start once it is right.
        "securityContext": {"runAsUser": UID, "runAsGroup": UID, "runAsNonRoot": True, "fsGroup": UID,
                            "fsGroupChangePolicy": "OnRootMismatch"},
    }
    if gpu:
        spec |= _scheduling(profile, opts)
        # With distributed.sync_model a worker's weights come from the leader when it starts (W4): one download.
        if not opts.prestaged and not (profile.distributed.sync_model and plan.role == "worker"):
            spec["initContainers"] = [_fetch_model(profile, opts, env)]
    if opts.rdma_resource:
        # RDMA mode: the node's own network and RDMA devices; on the pod network NCCL silently uses sockets.
        spec |= {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    return {
        "metadata": {"labels": {**labels, "appliance/role": plan.role}, "annotations": annotations},
        "spec": {
            **spec,
            # Service links would put e.g. VLLM_PORT=tcp://… into the env of every pod in the namespace
            # that has a Service named vllm, and vLLM reads VLLM_PORT.
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": termination_grace_s(profile, opts),
            "containers": [container],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory",
                                              "sizeLimit": opts.shm_size or ("16Gi" if gpu else "2Gi")}},
                # Per-rank claims (LWS volumeClaimTemplates) are not listed: the claim template of that name
                # provides the volume of each pod.
                *(v for v in volumes.values() if v),
            ],
        },
    }


def _metadata(name: str, opts: K8sOptions, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    return meta


def _service(profile: Profile, opts: K8sOptions, labels: dict[str, str], place: ResolvedPlacement) -> Manifest:
    name = resource_name(profile, opts)
    # "-api": an LWS already owns a headless Service named after itself (the pods' DNS).
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(f"{name}-api", opts, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/instance": name, "appliance/role": place.role},
            "ports": [{"name": "http", "port": place.api_port, "targetPort": "http", "protocol": "TCP"},
                      {"name": "metrics", "port": profile.server.health_port, "targetPort": "metrics",
                       "protocol": "TCP"}],
        },
    }


def placements_for(profile: Profile) -> dict[Role, ResolvedPlacement]:
    """Where the pods stand: single, or head + a worker (workers differ only in rank), at the leader's address: a
    render for every rank, on no node (placement.rank_placements)."""
    out: dict[Role, ResolvedPlacement] = {}
    for place in rank_placements(profile, LEADER_ADDRESS, "k8s:LWS_LEADER_ADDRESS"):
        out.setdefault(place.role, place)
    return out


def render_manifests(profile: Profile, opts: K8sOptions, lock_digest: str, profile_digest: str) -> list[Manifest]:
    docs = _workload(profile, opts, lock_digest, profile_digest)
    if opts.monitoring:
        from appliance.render.k8s_monitoring import dcgm_pod_monitor, pod_monitor, prometheus_rule

        name = resource_name(profile, opts)
        meta = _metadata(name, opts, _labels(profile, opts, lock_digest, profile_digest))
        gpus = [dcgm_pod_monitor(name, meta, namespace=opts.namespace, multi_node=profile.hardware.nodes > 1)
                ] if profile.hardware.target == "gpu" else []
        docs += [pod_monitor(name, meta, {"app.kubernetes.io/instance": name}), *gpus, prometheus_rule(name, meta)]
    return docs


def _workload(profile: Profile, opts: K8sOptions, lock_digest: str, profile_digest: str) -> list[Manifest]:
    name = resource_name(profile, opts)
    labels = _labels(profile, opts, lock_digest, profile_digest)
    places = placements_for(profile)
    plans = {role: build_plan(profile, place) for role, place in places.items()}
    if "single" in plans:
        template = _pod_template(profile, opts, plans["single"], labels, places["single"])
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _metadata(name, opts, labels),
            "spec": {
                "replicas": 1,
                # Recreate by default: a rolling update needs room for a second pod (a GPU profile: its GPUs again)
                "strategy": ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
                             if opts.rollout == "surge" else {"type": "Recreate"}),
                "progressDeadlineSeconds": progress_deadline_s(profile),
                "selector": {"matchLabels": {"app.kubernetes.io/instance": name, "appliance/role": "single"}},
                "template": template,
            },
        }
        claims = [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": _metadata(_single_claim(profile, opts, name), opts, labels),
                   "spec": _claim_spec(profile, opts, name)}
                  for name in CACHES if storage_of(profile, opts) == "per-rank" and not _claim(opts, name)]
        return [deployment, _service(profile, opts, labels, places["single"]), *claims]
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
                "leaderTemplate": _pod_template(profile, opts, plans["head"], labels, places["head"]),
                "workerTemplate": _pod_template(profile, opts, plans["worker"], labels, places["worker"]),
            },
        },
    }
    if storage_of(profile, opts) == "per-rank" and (claims := per_rank_claims(profile, opts)):
        lwt = lws["spec"]["leaderWorkerTemplate"]
        lwt["volumeClaimTemplates"] = claims
        # Kept when the group is recreated or the LWS deleted: the weights are the expensive part (delete the
        # claims by hand to free the space).
        lwt["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Retain", "whenScaled": "Retain"}
    return [lws, _service(profile, opts, labels, places["head"])]


def dump(manifests: list[Manifest], fmt: Literal["yaml", "json"]) -> str:
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2) + "\n"
    return yaml.dump_all(manifests, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)


class _PlainDumper(yaml.SafeDumper):
    """No anchors and aliases (`&id001` / `*id001`) where two pod templates share a value: kubectl reads them, but a
    person reading or diffing the manifests, and many tools that template them, do not."""

    def ignore_aliases(self, data: object) -> bool:
        return True
