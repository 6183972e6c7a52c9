"""The release workflow's plan (.github/workflows/release.yml), from versions.json: which image to bake on which
runner, and which index to make of them. Standard library and the lock reader only: it runs on a bare runner.

    python -m tooling.release matrix --owner OWNER [--channel NAME]    the GITHUB_OUTPUT lines `builds=` and
                                                                        `indexes=` (JSON, one line each)

Each released channel (versions.json images.release) is baked per platform on a runner of that architecture (a
foreign one under QEMU takes days for vLLM's CUDA kernels) from its one-platform bake target, pushed as
<repository>:<channel>-<lock digest 12>-<arch>; then <repository>:<channel>-<lock digest 12>, the name compose and
`appliance k8s` run, becomes the index of those. The repository must be the workflow's own GitHub owner's: a fork
that runs the workflow without changing versions.json would push where it may not, or where nobody pulls.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from appliance import lockfile
from tooling.generate import bake_target

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "ghcr.io"
RUNNERS = {"amd64": "ubuntu-24.04", "arm64": "ubuntu-24.04-arm"}
"""GitHub-hosted runners of each architecture; a larger runner is named by a repository variable instead
(RELEASE_RUNNER_AMD64 / RELEASE_RUNNER_ARM64, passed in as --runner-amd64 / --runner-arm64)."""


class PlanError(ValueError):
    """The lock and the workflow's repository disagree, or no channel is to be released."""


def plan(lock: dict, owner: str, channel: str | None = None,
         runners: dict[str, str] | None = None) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(one build per released channel and platform, one index per channel)."""
    release = lock.get("images", {}).get("release")
    if not release:
        raise PlanError("versions.json has no images.release: nothing is released")
    want = f"{REGISTRY}/{owner.lower()}/"
    if not release["repository"].startswith(want):
        raise PlanError(f"images.release.repository {release['repository']} is not under {want} (this workflow's "
                        f"owner): set it to {want}appliance in versions.json, or run the workflow from its owner")
    names = [channel] if channel else [n for n in lockfile.channel_names(lock) if lockfile.released(lock, n)]
    for name in names:
        lockfile.channel(lock, name)  # an unknown one: UnknownChannel, naming the channels
        if not lockfile.released(lock, name):
            raise PlanError(f"channel {name} is a {lockfile.channel(lock, name)['target']} channel: only "
                            f"{release['target']} channels are released")
    if not names:
        raise PlanError(f"versions.json has no {release['target']} channel to release")
    runs = RUNNERS | {k: v for k, v in (runners or {}).items() if v}
    builds, indexes = [], []
    for name in names:
        sources = []
        for platform in lockfile.channel(lock, name)["images"]["platforms"]:
            arch = platform.split("/", 1)[1]
            image = lockfile.platform_image(lock, name, platform)
            builds.append({"channel": name, "platform": platform, "runner": runs[arch],
                           "bake_target": f"{bake_target(lock, name)}-{arch}", "image": image})
            sources.append(image)
        indexes.append({"channel": name, "image": lockfile.image_tag(lock, name), "sources": " ".join(sources)})
    return builds, indexes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tooling.release", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    matrix = sub.add_parser("matrix", help="GITHUB_OUTPUT lines: builds= and indexes=")
    matrix.add_argument("--owner", required=True, help="the GitHub owner running the workflow")
    matrix.add_argument("--channel", help="one channel (default: every released channel)")
    matrix.add_argument("--runner-amd64", default="", help=f"default {RUNNERS['amd64']}")
    matrix.add_argument("--runner-arm64", default="", help=f"default {RUNNERS['arm64']}")
    matrix.add_argument("--versions", type=Path, default=ROOT / "versions.json")
    args = parser.parse_args(argv)
    try:
        builds, indexes = plan(lockfile.load(args.versions), args.owner, args.channel or None,
                               {"amd64": args.runner_amd64, "arm64": args.runner_arm64})
    except (PlanError, lockfile.UnknownChannel) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 2
    print("builds=" + json.dumps({"include": builds}, separators=(",", ":")))
    print("indexes=" + json.dumps({"include": indexes}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
