"""`appliance k8s PROFILE`: Kubernetes manifests (Deployment or LeaderWorkerSet, + Service)."""

from __future__ import annotations

import argparse

from appliance.cliargs import add_profile_args, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--image", help="container image (default appliance:TARGET-LOCK12, as the image build tags it)")
    parser.add_argument("--namespace", help="namespace of every resource (default: none, kubectl's current)")
    parser.add_argument("--format", choices=["yaml", "json"], default="yaml", help="yaml documents or a json List")
    parser.add_argument("--name", help="resource name (default appliance-PROFILE)")
    parser.add_argument("--secret", default="appliance-secrets",
                        help="Secret with the optional keys HF_TOKEN and VLLM_API_KEY (default %(default)s)")
    parser.add_argument("--hf-cache-pvc", metavar="CLAIM", help="PVC for the HF cache (default emptyDir)")
    parser.add_argument("--cache-pvc", metavar="CLAIM", help="PVC for the compile/JIT caches (default emptyDir)")
    parser.add_argument("--fabric-ifname", help="fabric interface inside the pods (default: the pod network)")
    parser.add_argument("--shm-size", help="sizeLimit of /dev/shm (default 16Gi on GPUs, 2Gi on cpu)")
    parser.add_argument("--rdma", nargs="?", const="rdma/rdma_shared_device_a", metavar="RESOURCE",
                        help="RDMA mode for multi-node NCCL over IB/RoCE: host network, IPC_LOCK and one RDMA "
                             "device-plugin RESOURCE per pod (default %(const)s)")
    parser.add_argument("--monitoring", action="store_true",
                        help="also a PodMonitor scraping both ports (exporter and vLLM) and a PrometheusRule with the "
                             "appliance's alert rules (prometheus-operator, e.g. kube-prometheus-stack)")
    parser.add_argument("--gpu-product", action="append", metavar="LABEL",
                        help="a nvidia.com/gpu.product node label the pods may run on (repeatable; default: the "
                             "profile GPU's product names)")


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
        namespace=args.namespace, name=args.name, secret=args.secret,
        hf_cache_claim=args.hf_cache_pvc, appliance_cache_claim=args.cache_pvc,
        fabric_ifname=args.fabric_ifname, shm_size=args.shm_size, rdma_resource=args.rdma,
        gpu_products=tuple(args.gpu_product or ()), monitoring=args.monitoring,
        overrides=(*settings.overrides(), *args.overrides),
    )
    check_options(opts, loaded.profile.name, multi_node=loaded.profile.hardware.nodes > 1)  # before any output
    digest = channel_digest(lock, str(loaded.profile.engine.channel))
    print(dump(render_manifests(loaded.profile, opts, digest, loaded.digest), args.format), end="")
    return 0
