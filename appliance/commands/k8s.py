"""`appliance k8s PROFILE`: Kubernetes manifests (Deployment or LeaderWorkerSet, + Service)."""

from __future__ import annotations

import argparse

from appliance.cliargs import add_k8s_options, add_profile_args, k8s_options, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--image", help="container image (default appliance:TARGET-LOCK12, as the image build tags it)")
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="a JSON List instead of YAML documents (the spelling every command takes)")
    parser.add_argument("--format", choices=["yaml", "json"],
                        help="yaml documents (default) or a json List; `--format json` is the old spelling of --json, "
                             "kept for a release")
    parser.set_defaults(format="yaml")  # two actions share the dest: argparse would keep --json's None
    add_k8s_options(parser)


def run(args: argparse.Namespace) -> int:
    from appliance.container.buildargs import image_tag
    from appliance.lock import lock_document
    from appliance.lockfile import channel_digest
    from appliance.render.k8s import K8sOptions, dump, render_manifests, storage_of
    from appliance.render.k8s_names import check_options
    from appliance.rules import context_for, require_valid
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    require_valid(context_for(loaded.profile), "no manifests rendered")
    lock = lock_document()
    from appliance.doctor.report import uses_rdma
    from appliance.render.k8s import DEFAULT_RDMA_RESOURCE

    # RDMA by default where the profile's K10 expectation wants NCCL on IB anyway (multi-node, IB not disabled).
    if args.rdma and args.no_rdma:
        from appliance.errors import ApplianceError

        raise ApplianceError("--no-rdma: not allowed with --rdma", field="--no-rdma", value=args.rdma,
                             fix="pass one of them", reason="RDMA mode is on or off")
    rdma = args.rdma or (DEFAULT_RDMA_RESOURCE if uses_rdma(loaded.profile) and not args.no_rdma else None)
    opts = K8sOptions(
        image=args.image or image_tag(lock, str(loaded.profile.engine.channel)),  # the tag the image build gives
        overrides=(*settings.overrides(), *args.overrides),
        **(k8s_options(args) | {"rdma_resource": rdma}),  # type: ignore[arg-type]
    )
    check_options(opts, loaded.profile.name, multi_node=loaded.profile.hardware.nodes > 1,
                  storage=storage_of(loaded.profile, opts))  # before any output
    digest = channel_digest(lock, str(loaded.profile.engine.channel))
    print(dump(render_manifests(loaded.profile, opts, digest, loaded.digest), args.format), end="")
    return 0
