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
    storage = parser.add_argument_group("storage (K28; default: per-rank PVCs on multi-node GPU profiles, "
                                        "emptyDir otherwise)")
    storage.add_argument("--hf-cache-pvc", metavar="CLAIM",
                         help="one PVC for the HF cache of every pod (multi-node: it must be ReadWriteMany)")
    storage.add_argument("--cache-pvc", metavar="CLAIM",
                         help="one PVC for the compile/JIT caches (multi-node: each rank writes its own subPath)")
    storage.add_argument("--storage-class", metavar="CLASS",
                         help="StorageClass of the per-rank PVCs (default: the cluster's default class; a local "
                              "class with WaitForFirstConsumer gives node-affine volumes)")
    storage.add_argument("--host-cache", metavar="DIR",
                         help="per-node host folders: DIR/hf (HF cache) and DIR/cache, owned by uid 10001 on every "
                              "node (a pre-staged or synced checkpoint is mounted so)")
    storage.add_argument("--ephemeral-cache", action="store_true",
                         help="emptyDir caches even on multi-node: every group restart downloads the checkpoint "
                              "again on every node")
    storage.add_argument("--prestaged", action="store_true",
                         help="the weights are already in the cache (--host-cache or --hf-cache-pvc): no download "
                              "init container, HF_HUB_OFFLINE=1")
    storage.add_argument("--download-mbps", type=float, default=50.0, metavar="MB_S",
                         help="the slowest node's download rate floor: the rendezvous waits for the slower rank's "
                              "download (default %(default)s MB/s)")
    parser.add_argument("--fabric-ifname",
                        help="fabric interface inside the pods, or one per rank: 0=IF,1=IF (default: the pod network)")
    parser.add_argument("--shm-size", help="sizeLimit of /dev/shm (default 16Gi on GPUs, 2Gi on cpu)")
    rdma = parser.add_mutually_exclusive_group()
    rdma.add_argument("--rdma", nargs="?", const="rdma/rdma_shared_device_a", metavar="RESOURCE",
                      help="RDMA mode for multi-node NCCL over IB/RoCE: host network and one RDMA device-plugin "
                           "RESOURCE per pod (default %(const)s; on by default for multi-node profiles that use IB)")
    rdma.add_argument("--no-rdma", action="store_true",
                      help="no RDMA mode on a multi-node profile (then set distributed.nccl_ib_disable=true, or "
                           "NCCL's fallback to sockets fails K10)")
    parser.add_argument("--toleration", action="append", metavar="KEY[=VALUE][:EFFECT]",
                        help="an extra toleration (repeatable); GPU pods always tolerate nvidia.com/gpu:NoSchedule")
    parser.add_argument("--runtime-class", metavar="NAME", help="spec.runtimeClassName, e.g. nvidia")
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
    from appliance.render.k8s import K8sOptions, dump, render_manifests, storage_of
    from appliance.render.k8s_names import check_options
    from appliance.rules import context_for, require_valid
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    require_valid(context_for(loaded.profile), "no manifests rendered")
    lock = load(versions_path())
    from appliance.doctor.report import uses_rdma
    from appliance.render.k8s import DEFAULT_RDMA_RESOURCE

    # RDMA by default where the profile's K10 expectation wants NCCL on IB anyway (multi-node, IB not disabled).
    rdma = args.rdma or (DEFAULT_RDMA_RESOURCE if uses_rdma(loaded.profile) and not args.no_rdma else None)
    opts = K8sOptions(
        image=args.image or image_tag(lock, str(loaded.profile.engine.channel)),  # the tag the image build gives
        namespace=args.namespace, name=args.name, secret=args.secret,
        hf_cache_claim=args.hf_cache_pvc, appliance_cache_claim=args.cache_pvc,
        storage="ephemeral" if args.ephemeral_cache else None, storage_class=args.storage_class,
        host_cache=args.host_cache, prestaged=args.prestaged, download_mbps=args.download_mbps,
        tolerations=tuple(args.toleration or ()), runtime_class=args.runtime_class,
        fabric_ifname=args.fabric_ifname, shm_size=args.shm_size, rdma_resource=rdma,
        gpu_products=tuple(args.gpu_product or ()), monitoring=args.monitoring,
        overrides=(*settings.overrides(), *args.overrides),
    )
    check_options(opts, loaded.profile.name, multi_node=loaded.profile.hardware.nodes > 1,
                  storage=storage_of(loaded.profile, opts))  # before any output
    digest = channel_digest(lock, str(loaded.profile.engine.channel))
    print(dump(render_manifests(loaded.profile, opts, digest, loaded.digest), args.format), end="")
    return 0
