"""`appliance k8s`: manifests of every profile validate offline against the Kubernetes schemas
(kubernetes-validate ships them per version) and the LeaderWorkerSet against our schema of its CRD."""

from __future__ import annotations

import json
import os
import re
from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # the test extra kubernetes-validate: k8s schemas per version, offline
import pytest
import yaml

from appliance.lock import channel_lock
from appliance.profile import list_profiles, load_profile
from appliance.render import k8s
from appliance.render.k8s import K8sOptions, render_manifests
from tests.in_process import CliRun, run_main

K8S_VERSIONS = ("1.29", "1.33")  # an older supported minor and a recent one; schemas are bundled, no network
SCHEMA = json.loads((Path(k8s.__file__).parent / "schemas" / "leaderworkerset.schema.json").read_text())
LOCK = channel_lock(None, "cpu").digest


def _lock_of(profile) -> str:
    """The digest of the profile's channel lock: what its images and labels are named by."""
    return channel_lock(profile.engine.channel, profile.hardware.target).digest
OPTS = K8sOptions(image="appliance:test")


def manifests(name: str, opts: K8sOptions = OPTS, *overrides: str) -> list[dict[str, Any]]:
    loaded = load_profile(name, cli_overrides=list(overrides))
    return render_manifests(loaded.profile, opts, _lock_of(loaded.profile), loaded.digest)


def pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]]
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"], lwt["workerTemplate"]]


def k8s_validate(doc: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("name", list_profiles())
def test_every_profile_validates_against_the_kubernetes_and_lws_schemas(name: str) -> None:
    docs = manifests(name)
    nodes = load_profile(name).profile.hardware.nodes
    assert [d["kind"] for d in docs] == (["Deployment", "Service"] if nodes == 1 else ["LeaderWorkerSet", "Service"])
    for doc in docs:
        if doc["kind"] == "LeaderWorkerSet":
            jsonschema.Draft202012Validator(SCHEMA).validate(doc)
            for template in pod_templates(doc):  # the pod templates against Kubernetes' own PodTemplateSpec
                k8s_validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                              "template": template})
        else:
            k8s_validate(doc)


@pytest.mark.parametrize("mutate,complaint", [
    (lambda d: d["spec"]["leaderWorkerTemplate"].pop("size"), "'size' is a required property"),
    (lambda d: d["spec"]["leaderWorkerTemplate"].update(size="2"), "is not of type 'integer'"),
    (lambda d: d["spec"]["leaderWorkerTemplate"].update(restartPolicy="RecreateGroup"), "is not one of"),
    (lambda d: d["spec"]["leaderWorkerTemplate"].update(restartpolicy="None"), "Additional properties"),
    (lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].update(containers=[]), "non-empty"),
    (lambda d: d.update(apiVersion="leaderworkerset.x-k8s.io/v1beta1"), "was expected"),
])
def test_our_lws_schema_rejects_a_wrong_shape(mutate: Any, complaint: str) -> None:
    doc = deepcopy(manifests("gb10-tp2")[0])
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    mutate(doc)
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        jsonschema.Draft202012Validator(SCHEMA).validate(doc)


def test_the_kubernetes_schemas_can_fail_too() -> None:
    doc = manifests("cpu-smoke")[0]
    doc["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        k8s_validate(doc)


def test_a_multi_node_profile_is_one_leaderworkerset_group_of_nodes_recreated_as_a_whole() -> None:
    lws, svc = manifests("gb10-tp2")
    spec = lws["spec"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert spec["startupPolicy"] == "LeaderCreated"  # LeaderReady would wait for a leader that waits for workers
    for template in pod_templates(lws):
        container = template["spec"]["containers"][0]
        assert container["command"] == ["appliance", "run"]  # the Docker entrypoint, not a raw vllm argv
        env = {e["name"]: e for e in container["env"]}
        assert env["APPLIANCE_PROFILE"]["value"] == "gb10-tp2"
        assert env["APPLIANCE_MASTER_ADDR"]["value"] == "$(LWS_LEADER_ADDRESS)"
        assert env["APPLIANCE_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert svc["spec"]["selector"]["appliance/role"] == "head"
    assert svc["metadata"]["name"] != lws["metadata"]["name"]  # LWS owns a headless Service of its own name
    leader_ports = {p["name"]: p["containerPort"] for p in pod_templates(lws)[0]["spec"]["containers"][0]["ports"]}
    assert leader_ports == {"http": 8000, "metrics": 8470, "dist-master": 29501, "rendezvous": 29502}


def test_a_single_node_profile_is_a_deployment_that_never_needs_two_sets_of_gpus() -> None:
    deploy, svc = manifests("rtx-pro-6000-tp2")
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"  # (+ memory, ephemeral-storage: below)
    names = [e["name"] for e in container["env"]]
    assert "APPLIANCE_NODE_RANK" not in names and "APPLIANCE_MASTER_ADDR" not in names
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("name", ["cpu-smoke", "rtx-pro-6000-tp2"])
def test_a_surge_rollout_starts_the_new_pod_beside_the_old_which_drains_before_it_stops(name: str) -> None:
    """--rollout surge: a rolling update that never leaves the Service without a ready pod (maxUnavailable 0), and an
    old pod that keeps serving while the proxies drop it and until its requests are done (`appliance drain`), all
    inside its termination grace period. The manifests are what the Kubernetes schemas accept."""
    from appliance.render.supervisord import STOP_WAIT_S

    profile = load_profile(name).profile
    deploy, _ = manifests(name, K8sOptions(image="appliance:test", rollout="surge", drain_s=90))
    k8s_validate(deploy)
    assert deploy["spec"]["strategy"] == {"type": "RollingUpdate",
                                          "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = deploy["spec"]["template"]["spec"]
    hook = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook == ["appliance", "drain", "--url", f"http://127.0.0.1:{profile.server.port}", "--settle-s",
                    str(k8s.SETTLE_S), "--max-s", "90"]
    # the drain, then supervisord's own bound on the engine's stop, before the kubelet's SIGKILL
    assert pod["terminationGracePeriodSeconds"] > k8s.SETTLE_S + 90 + STOP_WAIT_S[profile.hardware.target]
    startup = pod["containers"][0]["startupProbe"]
    assert deploy["spec"]["progressDeadlineSeconds"] > startup["periodSeconds"] * startup["failureThreshold"]


def test_recreate_stays_the_default_without_a_hook_and_a_multi_node_surge_is_refused() -> None:
    deploy, _ = manifests("cpu-smoke")
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert "lifecycle" not in deploy["spec"]["template"]["spec"]["containers"][0]
    refused = cli("gb10-tp2", "--image", "appliance:x", "--rollout", "surge")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--rollout surge: a multi-node profile's group is recreated as a whole" in refused.stderr
    assert "fix: drop --rollout surge" in refused.stderr
    alone = cli("cpu-smoke", "--image", "appliance:x", "--drain-s", "30")
    assert alone.returncode == 2 and alone.stdout == "" and "--drain-s=30 without --rollout surge" in alone.stderr
    bound = cli("cpu-smoke", "--image", "appliance:x", "--rollout", "surge", "--drain-s", "7200")
    assert bound.returncode == 2 and bound.stdout == "" and "--drain-s=7200: outside 0-3600" in bound.stderr
    for flags, bound_s in ((["--drain-s", "15"], "15"), ([], "60")):
        given = cli("cpu-smoke", "--image", "appliance:x", "--rollout", "surge", *flags)
        assert given.returncode == 0, given.stderr
        container = next(yaml.safe_load_all(given.stdout))["spec"]["template"]["spec"]["containers"][0]
        assert container["lifecycle"]["preStop"]["exec"]["command"][-2:] == ["--max-s", bound_s]


@pytest.mark.parametrize("name", ["cpu-smoke", "rtx-pro-6000-tp2", "gb10-tp2"])
def test_a_pods_termination_grace_outlasts_its_engines_stop_wait(name: str) -> None:
    """The kubelet's SIGKILL must come after supervisord's own (STOP_WAIT_S of the profile's target), or a stop that
    runs to supervisord's bound loses the process group's teardown; compose's stop grace covers the longest wait."""
    from appliance.render.supervisord import STOP_WAIT_S

    target = load_profile(name).profile.hardware.target
    graces = [t["spec"]["terminationGracePeriodSeconds"] for d in manifests(name)
              if d["kind"] in ("Deployment", "LeaderWorkerSet") for t in pod_templates(d)]
    assert graces and all(g > STOP_WAIT_S[target] for g in graces), (graces, STOP_WAIT_S[target])
    compose = yaml.safe_load((Path(__file__).resolve().parents[1] / "compose.yaml").read_text())
    grace = compose["x-service"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > max(STOP_WAIT_S.values())


@pytest.mark.parametrize("name", list_profiles())
def test_every_pod_has_shm_caches_probes_scrape_annotations_and_secret_refs_only(name: str) -> None:
    profile = load_profile(name).profile
    templates = pod_templates(manifests(name)[0])
    assert templates, f"{name}: no pod template"
    for template in templates:
        spec, meta = template["spec"], template["metadata"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        if profile.hardware.nodes > 1 and profile.hardware.gpu != "cpu":  # per-rank claims (K28)
            claims = manifests(name)[0]["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"]
            assert [c["metadata"]["name"] for c in claims] == ["hf-cache", "appliance-cache"]
            assert "hf-cache" not in volumes and "appliance-cache" not in volumes
        else:
            assert "emptyDir" in volumes["hf-cache"] and "emptyDir" in volumes["appliance-cache"]
        container = spec["containers"][0]
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/dev/shm", k8s.HF_HOME, k8s.APPLIANCE_HOME}
        for kind, key in (("startup", "startupProbe"), ("ready", "readinessProbe"), ("live", "livenessProbe")):
            assert container[key]["exec"]["command"] == ["/opt/appliance/healthchecks/probe", kind]
        startup = container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"]
        if profile.hardware.gpu == "cpu":
            assert startup <= 600
        else:
            assert startup >= 30 * 60  # a DeepSeek load takes many minutes
        assert meta["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics",
                                       "prometheus.io/port": str(profile.server.health_port)}
        assert meta["labels"]["appliance/profile"] == name
        assert meta["labels"]["appliance/lock"] == _lock_of(profile)[:12]
        env = {e["name"]: e for e in container["env"]}
        for secret in ("HF_TOKEN", "VLLM_API_KEY"):
            assert "value" not in env[secret]
            assert env[secret]["valueFrom"] == {"secretKeyRef": {"name": "appliance-secrets", "key": secret,
                                                                 "optional": True}}
        assert spec["enableServiceLinks"] is False


def test_cache_claims_namespace_and_overrides_are_parameters() -> None:
    opts = K8sOptions(image="a:b", namespace="llm", hf_cache_claim="hf", appliance_cache_claim="jit",
                      fabric_ifname="enp1s0f0np0", overrides=("limits.max_model_len=32768",))
    docs = manifests("gb10-tp2", opts, "limits.max_model_len=32768")
    assert {d["metadata"]["namespace"] for d in docs} == {"llm"}
    template = pod_templates(docs[0])[1]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["hf-cache"]["persistentVolumeClaim"] == {"claimName": "hf"}
    assert volumes["appliance-cache"]["persistentVolumeClaim"] == {"claimName": "jit"}
    env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
    assert env["APPLIANCE_SET"] == "limits.max_model_len=32768" and env["APPLIANCE_FABRIC_IFNAME"] == "enp1s0f0np0"
    # The fabric's address is read in the pod; a pod-IP APPLIANCE_HOST_IP beside it would win over it.
    assert "APPLIANCE_HOST_IP" not in env
    plain = {e["name"]: e for e in pod_templates(manifests("gb10-tp2")[0])[1]["spec"]["containers"][0]["env"]}
    assert plain["APPLIANCE_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "APPLIANCE_FABRIC_IFNAME" not in plain
    assert docs[0]["metadata"]["labels"]["appliance/profile-digest"] != manifests("gb10-tp2")[0]["metadata"][
        "labels"]["appliance/profile-digest"]


def cli(*args: str, env: dict[str, str] | None = None, replace_env: bool = False) -> CliRun:
    """`appliance k8s ARGS` in-process (tests/in_process.py): these tests are about the manifests, not the process."""
    return run_main(["k8s", *args], env=env, replace_env=replace_env, limit_s=120)


def test_the_command_prints_yaml_documents_or_a_json_list() -> None:
    y = cli("gb10-tp2", "--image", "appliance:x", "--namespace", "llm")
    assert y.returncode == 0, y.stderr
    docs = list(yaml.safe_load_all(y.stdout))
    assert [d["kind"] for d in docs] == ["LeaderWorkerSet", "Service"]
    assert "&id0" not in y.stdout and "*id0" not in y.stdout  # each pod's env and tolerations read whole
    j = cli("cpu-smoke", "--format", "json", "--set", "limits.max_model_len=1024")
    assert j.returncode == 0, j.stderr
    listing = json.loads(j.stdout)
    assert listing["kind"] == "List" and [d["kind"] for d in listing["items"]] == ["Deployment", "Service"]
    container = listing["items"][0]["spec"]["template"]["spec"]["containers"][0]
    # The default image is the tag the image build gives the CPU target (scripts/build-cpu-image.sh).
    assert container["image"] == f"appliance:vllm-cpu-0.32.0-{LOCK[:12]}"  # the image of the profile's channel
    assert {"name": "APPLIANCE_SET", "value": "limits.max_model_len=1024"} in container["env"]


def test_the_profile_may_come_as_an_option_or_from_the_environment_like_every_command() -> None:
    by_option = cli("--profile", "cpu-smoke")
    assert by_option.returncode == 0, by_option.stderr
    by_env = cli(env={"APPLIANCE_PROFILE": "cpu-smoke"})
    assert by_env.returncode == 0 and by_env.stdout == by_option.stdout, by_env.stderr
    none = cli(env={k: v for k, v in os.environ.items() if k != "APPLIANCE_PROFILE"}, replace_env=True)
    assert none.returncode == 2 and "no profile given" in none.stderr and "Traceback" not in none.stderr


def test_the_command_refuses_an_invalid_profile_with_exit_2() -> None:
    r = cli("gb10-tp2", "--set", "cache.kv_dtype=auto")
    assert r.returncode == 2 and "K1" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


# --- what a real cluster needs (issue 10) ------------------------------------------------------------

GPU_PROFILES = [n for n in list_profiles() if load_profile(n).profile.hardware.gpu != "cpu"]


@pytest.mark.parametrize("name", list_profiles())
def test_every_pod_runs_as_the_image_user_with_a_volume_group_it_can_write(name: str) -> None:
    templates = pod_templates(manifests(name)[0])
    assert templates, f"{name}: no pod template"
    for template in templates:
        assert template["spec"]["securityContext"] == {
            "runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True, "fsGroup": 10001,
            "fsGroupChangePolicy": "OnRootMismatch"}


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_pods_prefetch_the_weights_and_ask_for_memory_and_storage_sized_for_the_checkpoint(name: str) -> None:
    profile = load_profile(name).profile
    templates = pod_templates(manifests(name)[0])
    assert templates, f"{name}: no pod template"
    for template in templates:
        spec = template["spec"]
        init = spec["initContainers"]
        assert [c["name"] for c in init] == ["fetch-model"]
        assert init[0]["command"] == ["appliance", "fetch-model"] and init[0]["image"] == "appliance:test"
        assert init[0]["volumeMounts"] == [{"name": "hf-cache", "mountPath": k8s.HF_HOME},
                                           {"name": "appliance-cache", "mountPath": k8s.APPLIANCE_HOME}]
        init_env = {e["name"]: e for e in init[0]["env"]}
        assert init_env["APPLIANCE_PROFILE"]["value"] == name and "value" not in init_env["HF_TOKEN"]
        requests = spec["containers"][0]["resources"]["requests"]
        size = k8s.hf_cache_gib(profile)
        assert size is not None and size * k8s.GIB >= 1.1 * 160e9  # the ~160 GB checkpoint fits
        volumes = {v["name"]: v for v in spec["volumes"]}
        if profile.hardware.nodes > 1:  # per-rank claims of that size, nothing on the node's ephemeral storage
            claims = {c["metadata"]["name"]: c for c in
                      manifests(name)[0]["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"]}
            assert claims["hf-cache"]["spec"]["resources"]["requests"]["storage"] == f"{size}Gi"
            assert "ephemeral-storage" not in requests
        else:
            assert volumes["hf-cache"]["emptyDir"] == {"sizeLimit": f"{size}Gi"}
            assert requests["ephemeral-storage"] == f"{size + k8s.COMPILE_CACHE_GIB}Gi"
        assert requests["memory"] == ("96Gi" if profile.hardware.gpu == "gb10" else "32Gi")


def test_with_sync_model_only_the_leader_downloads_and_it_serves_the_workers_on_the_model_sync_port() -> None:
    docs = manifests("gb10-tp2", K8sOptions(image="a:b"), "distributed.sync_model=true")
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert [c["name"] for c in leader["initContainers"]] == ["fetch-model"] and "initContainers" not in worker
    ports = {p["name"]: p["containerPort"] for p in leader["containers"][0]["ports"]}
    assert ports["model-sync"] == ports["dist-master"] + 3
    jsonschema.Draft202012Validator(SCHEMA).validate(lws)
    for template in pod_templates(lws):
        k8s_validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})


def test_with_pvcs_nothing_big_lands_on_the_nodes_ephemeral_storage() -> None:
    docs = manifests("rtx-pro-6000-tp2", K8sOptions(image="a:b", hf_cache_claim="hf", appliance_cache_claim="jit"))
    spec = docs[0]["spec"]["template"]["spec"]
    assert "ephemeral-storage" not in spec["containers"][0]["resources"]["requests"]
    k8s_validate(docs[0])


def test_gb10_pods_land_only_on_arm64_nodes_with_a_gb10_and_discrete_gpus_on_amd64() -> None:
    for template in pod_templates(manifests("gb10-tp2")[0]):
        spec = template["spec"]
        assert spec["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                "values": ["NVIDIA-GB10"]}]}]
    spec = manifests("rtx-pro-6000-tp2")[0]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    own = manifests("rtx-pro-6000-tp2", K8sOptions(image="a:b", gpu_products=("My-Label",)))[0]
    expr = own["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr["values"] == ["My-Label"]
    assert "nodeSelector" not in manifests("cpu-smoke")[0]["spec"]["template"]["spec"]


def test_rdma_mode_gives_every_rank_the_host_network_and_an_rdma_device() -> None:
    docs = manifests("gb10-tp2", K8sOptions(image="a:b", rdma_resource=k8s.DEFAULT_RDMA_RESOURCE))
    jsonschema.Draft202012Validator(SCHEMA).validate(docs[0])
    for template in pod_templates(docs[0]):
        k8s_validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})
        spec = template["spec"]
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        container = spec["containers"][0]
        # No IPC_LOCK: a capability is never effective for the non-root uid 10001, so it lifts no memlock limit;
        # the runtime's limit is what NCCL gets, and `appliance run` refuses a finite one (doctor, K27).
        assert "securityContext" not in container
        assert container["resources"]["requests"]["rdma/rdma_shared_device_a"] == "1"
        assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_DEBUG"] == "INFO"
    plain = pod_templates(manifests("gb10-tp2")[0])[0]["spec"]
    assert "hostNetwork" not in plain


def test_the_command_takes_rdma_mode_and_gpu_products() -> None:
    r = cli("gb10-tp2", "--rdma", "--gpu-product", "NVIDIA-DGX-Spark")
    assert r.returncode == 0, r.stderr
    lws = next(yaml.safe_load_all(r.stdout))
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1", "rdma/rdma_shared_device_a": "1"}
    expr = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr["values"] == ["NVIDIA-DGX-Spark"]
    custom = cli("gb10-tp2", "--rdma", "rdma/hca_shared_devices_a")
    assert "rdma/hca_shared_devices_a" in custom.stdout


# --- storage, rendezvous and scheduling for two nodes (issue 20, items 13-14; K28) ----------------------

def validate_lws(lws: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(lws)
    for template in pod_templates(lws):
        k8s_validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})
    for claim in lws["spec"]["leaderWorkerTemplate"].get("volumeClaimTemplates", []):
        k8s_validate({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim})


def env_of(template: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}


def test_multi_node_caches_are_one_claim_per_rank_kept_across_group_restarts() -> None:
    """One claimName in both pods cannot attach ReadWriteOnce storage on two nodes, and an emptyDir with
    RecreateGroupOnPodRestart downloads the checkpoint again on every node: per-rank claims by default."""
    lws = manifests("gb10-tp2", K8sOptions(image="a:b", storage_class="local-path"))[0]
    validate_lws(lws)
    lwt = lws["spec"]["leaderWorkerTemplate"]
    claims = {c["metadata"]["name"]: c["spec"] for c in lwt["volumeClaimTemplates"]}
    assert set(claims) == {"hf-cache", "appliance-cache"}
    assert all(c["accessModes"] == ["ReadWriteOnce"] and c["storageClassName"] == "local-path"
               for c in claims.values())
    assert lwt["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    for template in pod_templates(lws):
        spec = template["spec"]
        assert {v["name"] for v in spec["volumes"]} == {"dshm"}  # the claim templates provide the caches
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["hf-cache"]["mountPath"] == k8s.HF_HOME and "subPathExpr" not in mounts["appliance-cache"]
        assert "ephemeral-storage" not in spec["containers"][0]["resources"]["requests"]
    default = manifests("gb10-tp2")[0]["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"]
    assert all("storageClassName" not in c["spec"] for c in default)  # the cluster's default class


def test_one_shared_claim_on_two_nodes_gives_each_rank_its_own_jit_cache_folder() -> None:
    lws = manifests("gb10-tp2", K8sOptions(image="a:b", hf_cache_claim="hf-rwx", appliance_cache_claim="jit-rwx"))[0]
    validate_lws(lws)
    assert "volumeClaimTemplates" not in lws["spec"]["leaderWorkerTemplate"]
    ranks = []
    for template in pod_templates(lws):
        mounts = {m["name"]: m for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["appliance-cache"]["subPathExpr"] == "rank-$(APPLIANCE_NODE_RANK)"
        assert "subPathExpr" not in mounts["hf-cache"]  # the weights are read by both ranks
        ranks.append(env_of(template)["APPLIANCE_NODE_RANK"])
    assert ranks == ["0", "$(LWS_WORKER_INDEX)"]  # so the two folders differ: rank-0, rank-1
    single = manifests("rtx-pro-6000-tp2", K8sOptions(image="a:b", appliance_cache_claim="jit"))[0]
    assert all("subPathExpr" not in m for m in single["spec"]["template"]["spec"]["containers"][0]["volumeMounts"])


def test_host_folders_per_node_mount_a_prestaged_checkpoint_without_a_download() -> None:
    lws = manifests("gb10-tp2", K8sOptions(image="a:b", host_cache="/srv/appliance", prestaged=True))[0]
    validate_lws(lws)
    assert "volumeClaimTemplates" not in lws["spec"]["leaderWorkerTemplate"]
    for template in pod_templates(lws):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["hf-cache"]["hostPath"] == {"path": "/srv/appliance/hf", "type": "Directory"}
        assert volumes["appliance-cache"]["hostPath"] == {"path": "/srv/appliance/cache", "type": "Directory"}
        assert "initContainers" not in template["spec"]  # nothing to download
        env = env_of(template)
        assert env["HF_HUB_OFFLINE"] == "1" and "APPLIANCE_RENDEZVOUS_TIMEOUT_S" not in env
    staged_by_download = manifests("gb10-tp2", K8sOptions(image="a:b", host_cache="/srv/appliance"))[0]
    assert all(t["spec"]["initContainers"][0]["name"] == "fetch-model" for t in pod_templates(staged_by_download))


def test_prestaged_per_rank_claims_are_mounted_by_name_and_never_downloaded_into() -> None:
    """A sync job or bundle (issue 27) may create and fill each rank's claim by its LWS name before the group starts;
    an emptyDir can hold nothing pre-staged."""
    lws = manifests("gb10-tp2", K8sOptions(image="a:b", prestaged=True))[0]
    validate_lws(lws)
    assert [c["metadata"]["name"] for c in lws["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"]] == \
        ["hf-cache", "appliance-cache"]
    for template in pod_templates(lws):
        assert "initContainers" not in template["spec"] and env_of(template)["HF_HUB_OFFLINE"] == "1"
        assert "APPLIANCE_RENDEZVOUS_TIMEOUT_S" not in env_of(template)  # no download skew to wait for
    single = cli("rtx-pro-6000-tp2", "--prestaged")  # one node, no claim: an emptyDir
    assert single.returncode == 2 and "--prestaged with an emptyDir HF cache" in single.stderr
    assert cli("rtx-pro-6000-tp2", "--prestaged", "--storage-class", "fast").returncode == 0


def test_the_rendezvous_outlasts_the_slower_ranks_download_and_the_startup_budget_covers_it() -> None:
    """Each rank's init container downloads ~167 GB; they can finish tens of minutes apart, and a rendezvous that
    gives up first restarts the group (and, with emptyDir, the downloads) over and over."""
    profile = load_profile("gb10-tp2").profile
    size = k8s.load_catalogue().checkpoints[profile.model.checkpoint].size_bytes
    for mbps in (50.0, 200.0):
        lws = manifests("gb10-tp2", K8sOptions(image="a:b", download_mbps=mbps))[0]
        want = max(900, -(-int(size / (mbps * 1e6)) // 60) * 60)
        for template in pod_templates(lws):
            env = env_of(template)
            assert int(env["APPLIANCE_RENDEZVOUS_TIMEOUT_S"]) == want >= size / (mbps * 1e6)
            probe = template["spec"]["containers"][0]["startupProbe"]
            assert probe["periodSeconds"] * probe["failureThreshold"] >= 40 * 60 + want
    assert "APPLIANCE_RENDEZVOUS_TIMEOUT_S" not in env_of(manifests("rtx-pro-6000-tp2")[0]["spec"]["template"])
    from appliance.settings import ApplianceSettings

    assert ApplianceSettings(rendezvous_timeout_s=int(env["APPLIANCE_RENDEZVOUS_TIMEOUT_S"])) is not None
    too_slow = cli("gb10-tp2", "--download-mbps", "1")
    assert too_slow.returncode == 2 and "--download-mbps" in too_slow.stderr and "--prestaged" in too_slow.stderr


def test_emptydir_on_two_nodes_is_an_explicit_choice_and_single_node_claims_are_objects() -> None:
    lws = manifests("gb10-tp2", K8sOptions(image="a:b", storage="ephemeral"))[0]
    validate_lws(lws)
    for template in pod_templates(lws):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert "emptyDir" in volumes["hf-cache"] and "ephemeral-storage" in \
            template["spec"]["containers"][0]["resources"]["requests"]
    docs = manifests("rtx-pro-6000-tp2", K8sOptions(image="a:b", storage_class="fast"))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "PersistentVolumeClaim", "PersistentVolumeClaim"]
    for doc in docs:
        k8s_validate(doc)
    volumes = {v["name"]: v for v in docs[0]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["hf-cache"]["persistentVolumeClaim"]["claimName"] == docs[2]["metadata"]["name"]
    assert docs[2]["spec"]["storageClassName"] == "fast"


@pytest.mark.parametrize(("argv", "named"), [
    (["--storage-class", "fast", "--host-cache", "/srv/a"], "--host-cache"),
    (["--ephemeral-cache", "--storage-class", "fast"], "--ephemeral-cache"),
    (["--prestaged", "--ephemeral-cache"], "--prestaged"),
    (["--host-cache", "srv/relative"], "--host-cache"),
    (["--host-cache", "/srv/../etc"], "--host-cache"),
    (["--toleration", "nvidia.com/gpu:Sometimes"], "--toleration"),
    (["--runtime-class", "Not_A_Name"], "--runtime-class"),
    (["--fabric-ifname", "0=enp1s0f1np1,0=eth1"], "--fabric-ifname"),
    (["--rdma", "--no-rdma"], "not allowed with"),
])
def test_storage_scheduling_and_fabric_options_are_checked_before_any_output(argv: list[str], named: str) -> None:
    r = cli("gb10-tp2", *argv)
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


def test_gpu_pods_tolerate_the_gpu_taint_and_take_more_tolerations_and_a_runtime_class() -> None:
    docs = manifests("rtx-pro-6000-tp2", K8sOptions(image="a:b", tolerations=("dedicated=llm:NoExecute",
                                                                              "nvidia.com/gpu:NoSchedule"),
                                                    runtime_class="nvidia"))
    k8s_validate(docs[0])
    spec = docs[0]["spec"]["template"]["spec"]
    assert spec["tolerations"] == [k8s.GPU_TOLERATION, {"key": "dedicated", "operator": "Equal", "value": "llm",
                                                        "effect": "NoExecute"}]
    assert spec["runtimeClassName"] == "nvidia"
    for template in pod_templates(manifests("gb10-tp2")[0]):
        assert template["spec"]["tolerations"] == [k8s.GPU_TOLERATION] and "runtimeClassName" not in template["spec"]
    assert "tolerations" not in manifests("cpu-smoke")[0]["spec"]["template"]["spec"]


def test_rdma_is_the_default_for_multi_node_profiles_that_use_ib_and_can_be_turned_off() -> None:
    default = next(yaml.safe_load_all(cli("gb10-tp2").stdout))
    for template in pod_templates(default):
        spec = template["spec"]
        assert spec["hostNetwork"] is True
        assert spec["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    off = next(yaml.safe_load_all(cli("gb10-tp2", "--no-rdma").stdout))
    assert all("hostNetwork" not in t["spec"] for t in pod_templates(off))
    sockets = next(yaml.safe_load_all(cli("gb10-tp2", "--set", "distributed.nccl_ib_disable=true").stdout))
    assert all("hostNetwork" not in t["spec"] for t in pod_templates(sockets))  # IB off knowingly: no RDMA
    assert "hostNetwork" not in cli("rtx-pro-6000-tp2").stdout  # one node: no fabric


def test_each_rank_finds_its_own_fabric_interface_by_name() -> None:
    """GB10 pairs often name their ConnectX ports differently: `0=IF,1=IF` reaches every pod, and each rank's
    `appliance run` takes its own (appliance/cliargs.py placement)."""
    lws = manifests("gb10-tp2", K8sOptions(image="a:b", fabric_ifname="0=enp1s0f1np1,1=enP2p1s0f1np1"))[0]
    validate_lws(lws)
    assert {env_of(t)["APPLIANCE_FABRIC_IFNAME"] for t in pod_templates(lws)} == {"0=enp1s0f1np1,1=enP2p1s0f1np1"}
    import argparse

    from appliance.cliargs import placement_from_args
    from appliance.errors import ApplianceError
    from appliance.settings import ApplianceSettings

    for rank, want in ((0, "enp1s0f1np1"), (1, "enP2p1s0f1np1")):
        s = ApplianceSettings(fabric_ifname="0=enp1s0f1np1,1=enP2p1s0f1np1", node_rank=rank)
        assert placement_from_args(argparse.Namespace(), s).fabric_ifname == want
    with pytest.raises(ApplianceError, match="names no interface for rank 2"):
        placement_from_args(argparse.Namespace(), ApplianceSettings(fabric_ifname="0=a,1=b", node_rank=2))
    assert placement_from_args(argparse.Namespace(), ApplianceSettings(fabric_ifname="eth9")).fabric_ifname == "eth9"


def test_yaml_output_has_no_anchors_or_aliases_and_reads_back_equal() -> None:
    """The LWS leader and worker templates share values: PyYAML would write them once as &id001 and refer back."""
    docs = manifests("gb10-tp2")
    text = k8s.dump(docs, "yaml")
    assert not re.search(r"[&*]id\d{3}", text)
    assert list(yaml.safe_load_all(text)) == docs
