"""`appliance k8s PROFILE`: Kubernetes manifests (Deployment or LeaderWorkerSet, + Service)."""

from __future__ import annotations

import argparse
import sys

from appliance.cliargs import add_k8s_options, add_profile_args, k8s_manifests, k8s_options, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--image", help="container image (default: the profile channel's image in the lock, as "
                                          "`appliance images` lists it)")
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="a JSON List instead of YAML documents (the spelling every command takes)")
    parser.add_argument("--format", choices=["yaml", "json"],
                        help="yaml documents (default) or a json List; `--format json` is the old spelling of --json, "
                             "kept for a release")
    parser.set_defaults(format="yaml")  # two actions share the dest: argparse would keep --json's None
    add_k8s_options(parser)


def run(args: argparse.Namespace) -> int:
    from appliance.render.k8s import dump
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    manifests = k8s_manifests(loaded, k8s_options(args), image=args.image,
                              overrides=(*settings.overrides(), *args.overrides), no_rdma=args.no_rdma,
                              warn=lambda line: print(line, file=sys.stderr))
    print(dump(manifests, args.format), end="")
    return 0
