"""`appliance bundle create|verify|apply`: what a serve needs, carried to a machine with no network.

    appliance bundle create PROFILE --out DIR [--set …] [--image TAG | --no-image] [--wheelhouse DIR | --no-wheelhouse]
    appliance bundle create PROFILE --estimate         # its size, before making it
    appliance bundle verify DIR                        # 0 intact, 1 damaged (each problem named), 2 not a bundle
    appliance bundle apply DIR [--no-image]            # verify, then install; writes APPLIANCE_HOME/offline.env
"""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.cliargs import add_profile_args, load_from_args


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bundle_action", metavar="create|verify|apply", required=True)
    create = sub.add_parser("create", help="collect the checkpoint, image, wheelhouse, caches and lock of PROFILE")
    add_profile_args(create)
    create.add_argument("--out", type=Path, help="the bundle folder to write (new or empty)")
    create.add_argument("--estimate", action="store_true", help="print the bundle's size and make nothing")
    image = create.add_mutually_exclusive_group()
    image.add_argument("--image", help="the image to save (default: the tag the build gives the profile's channel)")
    image.add_argument("--no-image", action="store_true", help="leave the image out")
    house = create.add_mutually_exclusive_group()
    house.add_argument("--wheelhouse", type=Path, help="the wheelhouse to carry (default: build/wheelhouse-TARGET)")
    house.add_argument("--no-wheelhouse", action="store_true", help="leave the wheelhouse out")
    verify = sub.add_parser("verify", help="check every file of a bundle against its manifest")
    verify.add_argument("bundle", type=Path)
    verify.add_argument("--json", action="store_true")
    apply = sub.add_parser("apply", help="verify a bundle and install it on this machine (no network needed)")
    apply.add_argument("bundle", type=Path)
    apply.add_argument("--no-image", action="store_true", help="do not `docker load` the bundle's image")


def run(args: argparse.Namespace) -> int:
    from appliance.errors import ApplianceError

    if args.bundle_action == "verify":
        import json

        from appliance.bundle.apply import verify

        manifest, problems = verify(args.bundle)
        if args.json:
            print(json.dumps({"bundle": str(args.bundle), "profile": manifest.profile, "intact": not problems,
                              "files": len(manifest.files), "bytes": manifest.total_bytes,
                              "problems": [{"path": p.path, "detail": p.detail} for p in problems]}, indent=1))
        else:
            state = "intact" if not problems else f"DAMAGED ({len(problems)} problem(s))"
            print(f"bundle {args.bundle}: {manifest.profile}, {len(manifest.files)} files, "
                  f"{manifest.total_bytes:,} bytes: {state}")
            for p in problems:
                print(f"  {p.path}: {p.detail}")
        return 0 if not problems else 1
    if args.bundle_action == "apply":
        from appliance.bundle.apply import apply

        apply(args.bundle, load_image=not args.no_image)
        return 0
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    if args.estimate:
        from appliance.bundle.estimate import estimate, render
        from appliance.run.model_location import locate
        from appliance.weights.pins import revision_for

        m = loaded.profile.model
        try:
            found = locate(m.checkpoint, revision_for(m.checkpoint, m.revision), settings.model_dir, deep=False)
        except ApplianceError:
            found = None
        real = (found.check.total_bytes, f"the checkpoint on disk ({found.check.listing})") if found and \
            found.check.total_bytes else (None, "")
        print(render(loaded.profile, estimate(loaded.profile, *real)))
        return 0
    if args.out is None:
        raise ApplianceError("bundle create needs --out DIR (or --estimate)", field="--out",
                             fix="give the folder to write the bundle into")
    from appliance.bounds import check_text
    from appliance.bundle.create import Sources, create, default_image, default_wheelhouse
    from appliance.lock import channel_lock

    check_text("--out", str(args.out), max_bytes=4096)
    target = loaded.profile.hardware.target
    wheelhouse = None if args.no_wheelhouse else (args.wheelhouse or default_wheelhouse(target))
    if not args.no_wheelhouse and wheelhouse is None:
        raise ApplianceError(f"no wheelhouse for the {target} image here", field="--wheelhouse",
                             fix=f"build the image first (scripts/build-cpu-image.sh makes build/wheelhouse-{target}), "
                                 "give --wheelhouse DIR, or leave it out with --no-wheelhouse")
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise ApplianceError(f"--wheelhouse {wheelhouse} is not a folder", field="--wheelhouse",
                             value=str(wheelhouse), fix="give the folder of wheels the image was built from")
    lock = channel_lock(loaded.profile.engine.channel, target)
    image = None if args.no_image else (args.image or default_image(lock.name))
    manifest = create(loaded, args.out, Sources(image=image, wheelhouse=wheelhouse),
                      overrides=[*settings.overrides(), *args.overrides], model_dir=settings.model_dir, lock=lock)
    print(f"bundle {args.out}: {manifest.profile}, {len(manifest.files)} files, {manifest.total_bytes:,} bytes "
          f"({manifest.total_bytes / 1e9:.2f} GB)")
    return 0
