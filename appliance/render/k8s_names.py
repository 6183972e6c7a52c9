"""Kubernetes' own rules for the names, quantities and image references `appliance k8s` writes, checked before
any manifest is printed: the API server would refuse them later, one `kubectl apply` at a time.

Rules (Kubernetes API conventions, "Object Names and IDs"; the container image reference grammar):
- RFC 1123 label (namespace): at most 63 of a-z 0-9 '-', starting and ending alphanumeric;
- RFC 1035 label (Service; the resource name, since a Service `<name>-api` and, for a LeaderWorkerSet, a headless
  Service `<name>` are derived from it): the same, starting with a letter;
- DNS subdomain (Secret, PersistentVolumeClaim): at most 253, dot-separated RFC 1123 labels;
- label value: at most 63 of A-Z a-z 0-9 '-', '_', '.', starting and ending alphanumeric;
- quantity: a decimal number with an SI (k M G T P E, m) or binary (Ki Mi Gi Ti Pi Ei) suffix or an exponent;
- image: [host[:port]/]path[:tag][@algorithm:hex], path components lower case.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import TYPE_CHECKING

from appliance.bounds import MAX_DRAIN_S, check_fabric_ifnames, control_char, show
from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.render.k8s import K8sOptions

_RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_RFC1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d{1,3})?$")

_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_PART}(?:/{_PATH_PART})*)"
                    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
                    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$")

SERVICE_SUFFIX = "-api"
STATEFULSET_NAME_MAX = 52
"""A LeaderWorkerSet runs StatefulSets; their pods carry `controller-revision-hash: <name>-<10 chars>`, a label
value of at most 63 characters, so the name keeps to 52."""

_WHY = "the Kubernetes API server refuses the object, after the manifests were applied in part"


def _refuse(flag: str, value: str, rule: str, fix: str) -> ApplianceError:
    return ApplianceError(f"{flag}={show(value)}: not {rule}", field=flag, value=show(value), fix=fix, reason=_WHY)


def _text(flag: str, value: str) -> str:
    if control_char(value) is not None or len(value) > 512:
        raise _refuse(flag, value, "one short line of printable text", "remove the control characters")
    return value


def check_resource_name(flag: str, name: str, *, multi_node: bool) -> str:
    """The Deployment/LeaderWorkerSet name: an RFC 1035 label with room for the Service suffix (and, for a
    LeaderWorkerSet, the StatefulSet revision hash)."""
    limit = STATEFULSET_NAME_MAX if multi_node else 63 - len(SERVICE_SUFFIX)
    if not _RFC1035_LABEL.match(_text(flag, name)) or len(name) > limit:
        raise _refuse(flag, name, f"an RFC 1035 label of at most {limit} characters",
                      f"use lower-case letters, digits and '-', starting with a letter, at most {limit} "
                      f"(the Service is <name>{SERVICE_SUFFIX})")
    return name


def check_namespace(flag: str, value: str) -> str:
    if not _RFC1123_LABEL.match(_text(flag, value)):
        raise _refuse(flag, value, "an RFC 1123 label (a namespace name)",
                      "use at most 63 lower-case letters, digits and '-', starting and ending alphanumeric")
    return value


def check_subdomain(flag: str, value: str) -> str:
    """Secret and PersistentVolumeClaim names."""
    _text(flag, value)
    if not value or len(value) > 253 or not all(_RFC1123_LABEL.match(p) for p in value.split(".")):
        raise _refuse(flag, value, "a DNS subdomain name (Secret / PersistentVolumeClaim)",
                      "use at most 253 lower-case letters, digits, '-' and '.', each part starting and ending "
                      "alphanumeric")
    return value


def check_label_value(flag: str, value: str) -> str:
    if not _LABEL_VALUE.match(_text(flag, value)):
        raise _refuse(flag, value, "a label value",
                      "use at most 63 letters, digits, '-', '_' and '.', starting and ending alphanumeric")
    return value


_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": Decimal("0.001"),
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_value(value: str) -> Decimal | None:
    """What a quantity amounts to (`16Gi` -> 17179869184), exactly; None when it is no quantity."""
    m = _QUANTITY.match(value)
    if not m:
        return None
    number, suffix = Decimal(m.group(1)), m.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIX.get(suffix, 1)


def check_quantity(flag: str, value: str, *, low: int = 1, high: int = 2**62) -> str:
    """A resource quantity (e.g. 16Gi, 500M) of at least `low` and at most `high` (bytes, for a size): `1e999` is a
    quantity by its grammar, and no size a node has."""
    amount = quantity_value(_text(flag, value))
    if amount is None or not low <= amount <= high:
        raise _refuse(flag, value, f"a Kubernetes quantity from {low:,} to {high:,}", "write e.g. 16Gi, 2Gi or 512Mi")
    return value


_EXTENDED_RESOURCE = re.compile(r"^(?P<domain>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
                                r"(?P<name>[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


def check_extended_resource(flag: str, value: str) -> str:
    """A device-plugin resource name, `domain/name` (e.g. rdma/rdma_shared_device_a): what a pod may request."""
    m = _EXTENDED_RESOURCE.match(_text(flag, value))
    if not m or len(m.group("domain")) > 253 or m.group("domain").endswith("kubernetes.io"):
        raise _refuse(flag, value, "an extended resource name (domain/name)",
                      "give the RDMA device plugin's resource, e.g. rdma/rdma_shared_device_a")
    return value


def check_image(flag: str, value: str) -> str:
    if not _IMAGE.match(_text(flag, value)) or len(value.split("@")[0].rsplit(":", 1)[0]) > 255:
        raise _refuse(flag, value, "a container image reference",
                      "write [registry[:port]/]name[:tag][@sha256:digest], the name in lower case")
    return value


_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def check_toleration(flag: str, value: str) -> str:
    """`KEY[=VALUE][:EFFECT]`: a qualified label key, a label value, one of the three taint effects."""
    rest, colon, effect = _text(flag, value).partition(":")
    key, _, label = rest.partition("=")
    if not _QUALIFIED.match(key) or not _LABEL_VALUE.match(label) or (colon and effect not in _EFFECTS):
        raise _refuse(flag, value, "a toleration KEY[=VALUE][:EFFECT]",
                      f"write e.g. nvidia.com/gpu:NoSchedule or dedicated=llm:NoExecute "
                      f"(effects: {', '.join(_EFFECTS)})")
    return value


def check_host_dir(flag: str, value: str) -> str:
    if not value.startswith("/") or "/../" in f"{_text(flag, value)}/" or value.rstrip("/") == "" or "\\" in value:
        raise _refuse(flag, value, "an absolute folder on the nodes", "write e.g. /srv/appliance (no '..')")
    return value


def check_storage(opts: K8sOptions, storage: str) -> None:
    """One place for each cache, and pre-staged weights only where something can have staged them: host folders,
    a shared claim, or per-rank claims created and filled by name before the group starts (docs/kubernetes.md);
    never an emptyDir. `storage`: render.k8s.storage_of's answer."""
    chosen = [f for f, v in (("--storage-class", opts.storage_class), ("--host-cache", opts.host_cache),
                             ("--ephemeral-cache", opts.storage == "ephemeral")) if v]
    if len(chosen) > 1:
        raise ApplianceError(f"{' and '.join(chosen)} both say where the caches live", field=chosen[1],
                             fix="choose one: per-rank PVCs (--storage-class), host folders (--host-cache) or "
                                 "emptyDir (--ephemeral-cache)", reason="each cache has one home")
    if opts.prestaged and storage == "ephemeral" and not opts.hf_cache_claim:
        raise ApplianceError("--prestaged with an emptyDir HF cache", field="--prestaged",
                             fix="pre-stage the weights into host folders (--host-cache DIR), one claim "
                                 "(--hf-cache-pvc CLAIM) or per-rank claims (--storage-class CLASS, claims created "
                                 "and filled by name first), or drop --prestaged",
                             reason="an emptyDir starts empty with every pod: the engine would find nothing")
    if not opts.download_mbps > 0 or opts.download_mbps > 1e6:
        raise ApplianceError(f"--download-mbps={opts.download_mbps:g}: not a rate in MB/s", field="--download-mbps",
                             fix="give the slowest node's download rate, e.g. 50",
                             reason="it sizes the rendezvous wait")


def check_options(opts: K8sOptions, profile_name: str, multi_node: bool, storage: str = "ephemeral") -> None:
    """Every name and quantity of K8sOptions (and the labels derived from the profile), before rendering."""
    check_image("--image", opts.image)
    if opts.namespace is not None:
        check_namespace("--namespace", opts.namespace)
    name_flag = "--name" if opts.name else "--name (default appliance-PROFILE)"
    check_resource_name(name_flag, opts.name or f"appliance-{profile_name}", multi_node=multi_node)
    check_label_value("profile name (label appliance/profile)", profile_name)
    check_subdomain("Secret name (--secret)", opts.secret)  # not `--secret=`: redaction would mask the name
    if opts.hf_cache_claim is not None:
        check_subdomain("--hf-cache-pvc", opts.hf_cache_claim)
    if opts.appliance_cache_claim is not None:
        check_subdomain("--cache-pvc", opts.appliance_cache_claim)
    if opts.shm_size is not None:
        check_quantity("--shm-size", opts.shm_size, low=2**20, high=2**50)  # 1 MiB .. 1 PiB of memory
    if opts.rdma_resource is not None:
        check_extended_resource("--rdma", opts.rdma_resource)
    for product in opts.gpu_products:
        check_label_value("--gpu-product", product)
    if opts.fabric_ifname is not None:
        check_fabric_ifnames("--fabric-ifname", opts.fabric_ifname)
    if opts.storage_class is not None:
        check_subdomain("--storage-class", opts.storage_class)
    if opts.runtime_class is not None:
        check_subdomain("--runtime-class", opts.runtime_class)
    for toleration in opts.tolerations:
        check_toleration("--toleration", toleration)
    if opts.host_cache is not None:
        check_host_dir("--host-cache", opts.host_cache)
    check_storage(opts, storage)
    check_rollout(opts, multi_node)


def check_rollout(opts: K8sOptions, multi_node: bool) -> None:
    """--rollout surge: a single-node Deployment's rolling update; --drain-s within what a stop may wait."""
    if opts.rollout == "surge" and multi_node:
        raise ApplianceError(
            "--rollout surge: a multi-node profile's group is recreated as a whole", field="--rollout",
            value=opts.rollout, fix="drop --rollout surge (the default recreate), or serve a single-node profile",
            reason="a surge would start a second group of every node (their GPUs again), and its per-rank claims "
                   "would download the checkpoint again on each of them; this is not offered")
    if opts.drain_s is None:
        return
    if opts.rollout != "surge":
        raise ApplianceError(f"--drain-s={opts.drain_s:g} without --rollout surge", field="--drain-s",
                             value=opts.drain_s, fix="add --rollout surge, or drop --drain-s",
                             reason="only a surge pod drains before it stops (its preStop hook); a recreate stops "
                                    "the pod at once")
    if not (math.isfinite(opts.drain_s) and 0 <= opts.drain_s <= MAX_DRAIN_S):
        raise ApplianceError(f"--drain-s={opts.drain_s:g}: outside 0-{MAX_DRAIN_S:g}", field="--drain-s",
                             value=opts.drain_s, fix="give the seconds a stopping pod may wait for its requests",
                             reason="the pod's termination grace period holds the wait, and a stop waits at most "
                                    "an hour")
