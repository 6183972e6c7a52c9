"""Arguments and loading shared by the profile-taking subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the loader and settings pull in pydantic: only a command that loads a profile pays for it
    from appliance.placement import Placement
    from appliance.profile.loader import LoadedProfile
    from appliance.settings import ApplianceSettings


def seconds_up_to(high: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds above 0 and at most `high` (argparse names the flag in its
    refusal: exit 2). `nan`, `inf`, 0 and negatives are no duration a client can wait."""
    import math

    from appliance.redact import clip

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{clip(text, 40)!r} is not a number of seconds") from None
        if not math.isfinite(value) or not 0 < value <= high:
            raise argparse.ArgumentTypeError(f"{clip(text, 40)!r} must be more than 0 and at most {high:g} seconds")
        return value

    return seconds


PROFILE_HELP = "profile name (appliance profiles lists them) or a YAML file's path; default $APPLIANCE_PROFILE"


def add_profile_args(parser: argparse.ArgumentParser, *, positional: bool = True) -> None:
    """PROFILE (positional, and as --profile; else $APPLIANCE_PROFILE) and --set; `positional=False` where the
    positionals are other things (logscan's logs)."""
    if positional:
        parser.add_argument("profile", nargs="?", help=PROFILE_HELP)
    parser.add_argument("--profile", dest="profile_option" if positional else "profile", metavar="PROFILE",
                        help="same as PROFILE" if positional else PROFILE_HELP)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=VALUE",
                        help="override one field (repeatable; applied after APPLIANCE_SET)")


def add_placement_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-rank", type=int, help="this node's rank (default $APPLIANCE_NODE_RANK or 0)")
    parser.add_argument("--master-addr", help="head's fabric address (default $APPLIANCE_MASTER_ADDR)")
    parser.add_argument("--master-port", type=int, help="rendezvous port (default distributed.master_port)")
    parser.add_argument("--fabric-ifname", help="fabric interface (default $APPLIANCE_FABRIC_IFNAME)")
    parser.add_argument("--model-dir", type=Path, help="local checkpoint folder (default $APPLIANCE_MODEL_DIR)")


def profile_name_from_args(args: argparse.Namespace, settings: ApplianceSettings, *,
                           fix: str = "name one (appliance profiles lists them) or set APPLIANCE_PROFILE") -> str:
    """The profile add_profile_args took: PROFILE or --profile (the same one if both), else $APPLIANCE_PROFILE."""
    from appliance.errors import ApplianceError

    given, option = getattr(args, "profile", None), getattr(args, "profile_option", None)
    if given and option and given != option:
        raise ApplianceError(f"two profiles given: {given} and --profile {option}", field="--profile", value=option,
                             fix="name the profile once")
    name = given or option or settings.profile
    if not name:
        raise ApplianceError("no profile given", field="profile", fix=fix)
    return str(name)


def load_from_args(args: argparse.Namespace, settings: ApplianceSettings | None = None) -> LoadedProfile:
    from appliance.profile.loader import load_profile
    from appliance.settings import load_settings

    settings = settings or load_settings()
    name = profile_name_from_args(args, settings)
    return load_profile(name, env_overrides=settings.overrides(), cli_overrides=args.overrides,
                        cli_extra_args=list(getattr(args, "passthrough", None) or []))


# Placement field -> the flag and the APPLIANCE_* variable that give it (a command registers the flags it has).
PLACEMENT_FLAGS = {"node_rank": "--node-rank", "master_addr": "--master-addr", "master_port": "--master-port",
                   "fabric_ifname": "--fabric-ifname", "model_dir": "--model-dir", "health_port": "--port",
                   "engine_url": "--engine-url"}
PLACEMENT_ENV = ("node_rank", "master_addr", "master_port", "host_ip", "fabric_ifname", "model_dir", "health_port")


def placement_from_args(args: argparse.Namespace, settings: ApplianceSettings | None = None) -> Placement:
    """What this node was given: CLI flags over APPLIANCE_* settings (that precedence, written once), each value
    with its origin. The profile's values come in at `appliance.placement.resolve_placement`."""
    from appliance.placement import Placement
    from appliance.settings import load_settings

    s = settings or load_settings()
    check_placement_flags(args)
    given: dict[str, object] = {}
    origins: dict[str, str] = {}
    for name in PLACEMENT_FLAGS.keys() | set(PLACEMENT_ENV):
        flag = getattr(args, name, None)
        if flag is not None:
            given[name], origins[name] = flag, f"cli:{PLACEMENT_FLAGS[name]}"
        elif name in PLACEMENT_ENV and name in s.model_fields_set and getattr(s, name) is not None:
            given[name], origins[name] = getattr(s, name), f"env:APPLIANCE_{name.upper()}"
    if given.get("fabric_ifname") is not None:  # one name for every rank, or RANK=IF pairs: this rank's
        from appliance.bounds import fabric_ifname_for

        given["fabric_ifname"] = fabric_ifname_for(origins["fabric_ifname"].split(":", 1)[1], given["fabric_ifname"],
                                                   given.get("node_rank") or 0)
    return Placement(**given, origins=origins)


def check_placement_flags(args: argparse.Namespace) -> None:
    """The placement flags keep the bounds the APPLIANCE_* variables and the profile keep (appliance/bounds.py)."""
    from appliance.bounds import MAX_NODES, check_fabric_ifnames, check_host, check_master_port, check_text
    from appliance.errors import ApplianceError

    rank = getattr(args, "node_rank", None)
    if rank is not None and not 0 <= rank < MAX_NODES:
        raise ApplianceError(f"--node-rank={rank}: outside 0-{MAX_NODES - 1}", field="--node-rank", value=rank,
                             fix="give this node's rank: 0 for the head, 1..nodes-1 for the workers",
                             reason=f"a serve has at most {MAX_NODES} nodes and rank 0 is the head")
    if getattr(args, "master_addr", None) is not None:
        check_host("--master-addr", args.master_addr)
    if getattr(args, "master_port", None) is not None:
        check_master_port("--master-port", args.master_port)
    if getattr(args, "fabric_ifname", None) is not None:
        check_fabric_ifnames("--fabric-ifname", args.fabric_ifname)
    if getattr(args, "model_dir", None) is not None:
        check_text("--model-dir", str(args.model_dir))


def add_k8s_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, prefix: str = "") -> None:
    """The manifests' options; `prefix` ("k8s-") where another command has flags of these names (`appliance upgrade
    promote --k8s-out` re-renders with the same options as `appliance k8s`)."""
    def add(flag: str, **kw: object) -> None:
        parser.add_argument(f"--{prefix}{flag}", dest=f"{prefix}{flag}".replace("-", "_"), **kw)  # type: ignore[arg-type]

    add("namespace", help="namespace of every resource (default: none, kubectl's current)")
    add("name", help="resource name (default appliance-PROFILE)")
    add("secret", default="appliance-secrets",
        help="Secret with the optional keys HF_TOKEN and VLLM_API_KEY (default %(default)s)")
    add("hf-cache-pvc", metavar="CLAIM",
        help="one PVC for the HF cache of every pod (multi-node: it must be ReadWriteMany)")
    add("cache-pvc", metavar="CLAIM",
        help="one PVC for the compile/JIT caches (multi-node: each rank writes its own subPath)")
    add("storage-class", metavar="CLASS",
        help="StorageClass of the per-rank PVCs (K28; default: the cluster's default class; a local class with "
             "WaitForFirstConsumer gives node-affine volumes)")
    add("host-cache", metavar="DIR",
        help="per-node host folders: DIR/hf (HF cache) and DIR/cache, owned by uid 10001 on every node (a "
             "pre-staged or synced checkpoint is mounted so)")
    add("ephemeral-cache", action="store_true",
        help="emptyDir caches even on multi-node: every group restart downloads the checkpoint again on every node")
    add("prestaged", action="store_true",
        help="the weights are already in the cache (--host-cache or --hf-cache-pvc): no download init container, "
             "HF_HUB_OFFLINE=1")
    add("download-mbps", type=float, default=50.0, metavar="MB_S",
        help="the slowest node's download rate floor: the rendezvous waits for the slower rank's download "
             "(default %(default)s MB/s)")
    add("fabric-ifname", help="fabric interface inside the pods, or one per rank: 0=IF,1=IF (default: the pod network)")
    add("shm-size", help="sizeLimit of /dev/shm (default 16Gi on GPUs, 2Gi on cpu)")
    add("rdma", nargs="?", const="rdma/rdma_shared_device_a", metavar="RESOURCE",
        help="RDMA mode for multi-node NCCL over IB/RoCE: host network and one RDMA device-plugin RESOURCE per pod "
             "(default %(const)s; on by default for multi-node profiles that use IB)")
    add("no-rdma", action="store_true",
        help="no RDMA mode on a multi-node profile (then set distributed.nccl_ib_disable=true, or NCCL's fallback to "
             "sockets fails K10)")
    add("toleration", action="append", metavar="KEY[=VALUE][:EFFECT]",
        help="an extra toleration (repeatable); GPU pods always tolerate nvidia.com/gpu:NoSchedule")
    add("runtime-class", metavar="NAME", help="spec.runtimeClassName, e.g. nvidia")
    add("monitoring", action="store_true",
        help="also a PodMonitor scraping both ports (exporter and vLLM) and a PrometheusRule with the appliance's "
             "alert rules (prometheus-operator, e.g. kube-prometheus-stack)")
    add("rollout", choices=["recreate", "surge"], default="recreate",
        help="how a changed template replaces the pod: recreate (stop it, then start the new one: the default, one "
             "set of GPUs) or surge (start the new one beside it, stop the old once the new is ready and the old "
             "has drained: no downtime where the cluster has room for a second pod; single-node profiles)")
    add("drain-s", type=float, metavar="S",
        help="with --rollout surge: how long a stopping pod waits for its running requests before vLLM's stop "
             "aborts them (default 60)")
    add("gpu-product", action="append", metavar="LABEL",
        help="a nvidia.com/gpu.product node label the pods may run on (repeatable; default: the profile GPU's "
             "product names)")


def k8s_options(args: argparse.Namespace, prefix: str = "") -> dict[str, object]:
    """K8sOptions' fields from add_k8s_options' flags (the image and overrides are the caller's)."""
    def get(name: str) -> object:
        return getattr(args, f"{prefix}{name}".replace("-", "_"))

    return {"namespace": get("namespace"), "name": get("name"), "secret": get("secret"),
            "hf_cache_claim": get("hf-cache-pvc"), "appliance_cache_claim": get("cache-pvc"),
            "fabric_ifname": get("fabric-ifname"), "shm_size": get("shm-size"), "rdma_resource": get("rdma"),
            "gpu_products": tuple(get("gpu-product") or ()), "monitoring": get("monitoring"),  # type: ignore[arg-type]
            "storage": "ephemeral" if get("ephemeral-cache") else None, "storage_class": get("storage-class"),
            "host_cache": get("host-cache"), "prestaged": get("prestaged"), "download_mbps": get("download-mbps"),
            "tolerations": tuple(get("toleration") or ()), "runtime_class": get("runtime-class"),  # type: ignore[arg-type]
            "rollout": get("rollout"), "drain_s": get("drain-s")}


def k8s_manifests(loaded: Any, options: dict[str, object], *, image: str | None, overrides: tuple[str, ...],
                  no_rdma: bool = False, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The manifests `appliance k8s` prints and `upgrade promote --k8s-out` writes, one way for both: the profile
    checked, RDMA mode on by default where K10 wants NCCL on IB (a multi-node GPU serve that keeps IB), the image
    tag the build gives its channel, and the options checked against the storage they imply, before any output."""
    from appliance.doctor.report import uses_rdma
    from appliance.errors import ApplianceError
    from appliance.lock import lock_document
    from appliance.lockfile import channel_digest, image_tag
    from appliance.render.k8s import DEFAULT_RDMA_RESOURCE, K8sOptions, render_manifests, storage_of
    from appliance.render.k8s_names import check_options
    from appliance.rules import context_for, require_valid
    from appliance.rules.caveats import to_show

    profile = loaded.profile
    shown, caveats = to_show(require_valid(context_for(profile), "no manifests rendered"), profile)
    if warn is not None:  # what validate and render say, said here too
        for line in [*(f.render() for f in shown), *([caveats] if caveats else [])]:
            warn(line)
    given = options.get("rdma_resource")
    if given and no_rdma:
        raise ApplianceError("--no-rdma: not allowed with --rdma", field="--no-rdma", value=given,
                             fix="pass one of them", reason="RDMA mode is on or off")
    rdma = given or (DEFAULT_RDMA_RESOURCE if uses_rdma(profile) and not no_rdma else None)
    lock = lock_document()
    channel = str(profile.engine.channel)
    opts = K8sOptions(image=image or image_tag(lock, channel), overrides=overrides,
                      **(options | {"rdma_resource": rdma}))  # type: ignore[arg-type]
    check_options(opts, profile.name, multi_node=profile.hardware.nodes > 1, storage=storage_of(profile, opts))
    return render_manifests(profile, opts, channel_digest(lock, channel), loaded.digest)
