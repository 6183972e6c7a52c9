"""`appliance fetch-model [PROFILE] [--check]`: the profile's checkpoint at its pinned revision, in the HF cache,
complete and verified (W1-W3).

huggingface_hub downloads (files already complete are kept; HF_TOKEN is read by the library from the environment
and never printed); then every file is checked against the hub's listing and each damaged one is fetched again.
`--check` downloads nothing: it checks what is on disk, lists every problem and exits 1 when the snapshot is
incomplete.
"""

from __future__ import annotations

import argparse

from appliance.cliargs import add_profile_args, load_from_args


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("an integer from 1 to 64") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError("an integer from 1 to 64 (parallel downloads)")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--max-workers", type=_workers, default=8, help="parallel file downloads (1-64)")
    parser.add_argument("--check", action="store_true",
                        help="check the snapshot on disk (sizes and hashes against the hub's listing); download "
                             "nothing; exit 1 when it is incomplete")
    parser.add_argument("--json", action="store_true", help="with --check: the result as JSON")
    parser.add_argument("--rehash", action="store_true",
                        help="with --check: hash every file again, trusting no earlier hashing (a disk suspected of "
                             "bit rot; a file rewritten since is always hashed again)")


def run(args: argparse.Namespace) -> int:
    import json
    import os

    from appliance.errors import ApplianceError
    from appliance.paths import appliance_home
    from appliance.rules import context_for, require_valid
    from appliance.weights.hub import hf_offline
    from appliance.weights.pins import revision_for
    from appliance.weights.stamps import stamp_root

    loaded = load_from_args(args)
    profile = loaded.profile
    require_valid(context_for(profile), "nothing fetched")  # W2: an unpinned checkpoint is never fetched
    if not 1 <= args.max_workers <= 64:
        raise ApplianceError(f"--max-workers={args.max_workers}: outside 1-64", field="--max-workers",
                             value=args.max_workers, fix="give 1 to 64 parallel downloads")
    checkpoint = profile.model.checkpoint
    revision = revision_for(checkpoint, profile.model.revision)
    assert revision is not None  # W2 refused an unpinned checkpoint above
    stamps = stamp_root(appliance_home())
    if args.check:
        from appliance.weights.snapshot import cached_revisions, check_hub_snapshot

        check = check_hub_snapshot(checkpoint, revision, stamp_root=None if args.rehash else stamps)
        others, corrupt = cached_revisions(checkpoint)
        others = [r for r in others if r.commit != revision]
        if args.json:
            print(json.dumps({"checkpoint": checkpoint, "revision": revision, "complete": check.complete,
                              "folder": str(check.folder) if check.folder else None, "listing": check.listing,
                              "files": check.files, "bytes": check.total_bytes, "hashed": check.hashed,
                              "vouched": check.vouched,
                              "problems": [{"path": p.path, "kind": p.kind, "detail": p.detail}
                                           for p in check.problems],
                              "other_revisions": [{"commit": r.commit, "size_on_disk": r.size_on_disk,
                                                   "refs": list(r.refs)} for r in others],
                              "cache_scan_warnings": corrupt}, indent=1))
        else:
            print(check.summary())
            for problem in check.problems:
                print(f"  {problem.kind:11} {problem.render()}")
            for r in others:  # an older pin's snapshot: its blobs stay until deleted (`hf cache delete`)
                print(f"  also cached: {r.commit} ({r.size_on_disk:,} bytes on disk), not the pinned revision")
        return 0 if check.complete else 1
    if hf_offline():
        raise ApplianceError(f"HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}: this machine is set not to reach the hub",
                             field="HF_HUB_OFFLINE", value=os.environ.get("HF_HUB_OFFLINE"),
                             fix="unset HF_HUB_OFFLINE on a machine that can reach the hub, or bring the checkpoint "
                                 "with `appliance sync-model` / `appliance bundle apply`, or set APPLIANCE_MODEL_DIR")
    try:
        from appliance.weights.fetch import fetch
    except ImportError as exc:
        raise ApplianceError(f"huggingface_hub is not installed: {exc}", fix="pip install huggingface_hub") from None
    check = fetch(checkpoint, revision, profile_name=profile.name, max_workers=args.max_workers, stamp_root=stamps)
    print(check.summary())
    print(check.folder)
    return 0
