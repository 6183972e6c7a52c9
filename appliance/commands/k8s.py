"""`appliance k8s PROFILE`: Kubernetes manifests (Deployment or LeaderWorkerSet, + Service)."""

from __future__ import annotations

import argparse

from appliance.cliargs import add_profile_args, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--image", help="container image (default appliance:TARGET-LOCK12, as the image build tags it)")
    parser.add_argument("--format", choices=["yaml", "json"], default="yaml", help="yaml documents or a json List")
    add_k8s_options(parser)


def add_k8s_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, prefix: str = "") -> None:
    """The manifests' options; `prefix` ("k8s-") where another command has flags of these names (`appliance upgrade
    promote --k8s-out` re-renders with the same options as `appliance k8s`)."""
    def add(flag: str, **kw: object) -> None:
        parser.add_argument(f"--{prefix}{flag}", dest=f"{prefix}{flag}".replace("-", "_"), **kw)  # type: ignore[arg-type]

    add("namespace", help="namespace of every resource (default: none, kubectl's current)")
    add("name", help="resource name (default appliance-PROFILE)")
    add("secret", default="appliance-secrets",
        help="Secret with the optional keys HF_TOKEN and VLLM_API_KEY (default %(default)s)")
    add("hf-cache-pvc", metavar="CLAIM", help="PVC for the HF cache (default emptyDir)")
    add("cache-pvc", metavar="CLAIM", help="PVC for the compile/JIT caches (default emptyDir)")
    add("fabric-ifname", help="fabric interface inside the pods (default: the pod network)")
    add("shm-size", help="sizeLimit of /dev/shm (default 16Gi on GPUs, 2Gi on cpu)")
    add("rdma", nargs="?", const="rdma/rdma_shared_device_a", metavar="RESOURCE",
        help="RDMA mode for multi-node NCCL over IB/RoCE: host network, IPC_LOCK and one RDMA device-plugin "
             "RESOURCE per pod (default %(const)s)")
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
            "gpu_products": tuple(get("gpu-product") or ())}  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    from appliance.container.buildargs import image_tag
    from appliance.lockfile import channel_digest, load
    from appliance.paths import versions_path
    from appliance.render.k8s import K8sOptions, dump, render_manifests
    from appliance.render.k8s_names import check_options
    from appliance.rules import context_for, require_valid
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    require_valid(context_for(loaded.profile), "no manifests rendered")
    lock = load(versions_path())
    opts = K8sOptions(
        image=args.image or image_tag(lock, str(loaded.profile.engine.channel)),  # the tag the image build gives
        overrides=(*settings.overrides(), *args.overrides), **k8s_options(args),  # type: ignore[arg-type]
    )
    check_options(opts, loaded.profile.name, multi_node=loaded.profile.hardware.nodes > 1)  # before any output
    digest = channel_digest(lock, str(loaded.profile.engine.channel))
    print(dump(render_manifests(loaded.profile, opts, digest, loaded.digest), args.format), end="")
    return 0
