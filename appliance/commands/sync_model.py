"""`appliance sync-model [PROFILE] --to PEER…` / `--receive`: one download, every rank (W4).

    appliance sync-model gb10-tp2 --to 10.1.0.2            # push this node's verified snapshot to a rank
    appliance sync-model gb10-tp2 --to /mnt/rank1/hf/hub    # ... or into another rank's volume
    appliance sync-model gb10-tp2 --receive --listen 10.1.0.2 --allow 10.1.0.1 [--until-complete]

The snapshot of the profile's pinned revision moves with rsync (weights/sync.py): only missing or differing files,
a cut transfer resumed from what arrived, each file verified against the sender's checksum; the sender's copy must
be complete first (W3). A peer is `appliance sync-model --receive` on that rank (an rsync daemon over its hub cache
on master port + 3 unless --port), or a folder. APPLIANCE_SYNC_SECRET, when set on both sides, makes the daemon
admit only senders that know it. With --until-complete the receiver stops once its copy checks complete (sizes
and hashes against the hub's listing) and exits 0: the arrival check.
"""

from __future__ import annotations

import argparse

from appliance.cliargs import add_profile_args, load_from_args, placement_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--to", dest="peers", action="append", metavar="PEER",
                      help="HOST[:PORT] of a rank running `sync-model --receive`, or an absolute hub-cache folder "
                           "(repeatable)")
    side.add_argument("--receive", action="store_true", help="receive a pushed snapshot into this node's hub cache")
    parser.add_argument("--port", type=int, help="daemon port (default: the profile's master port + 3)")
    parser.add_argument("--listen", metavar="ADDR", help="--receive: address to listen on (default $APPLIANCE_HOST_IP)")
    parser.add_argument("--allow", action="append", default=[], metavar="ADDR",
                        help="--receive: a sender's address (repeatable); required unless APPLIANCE_SYNC_SECRET "
                             "is set")
    parser.add_argument("--until-complete", action="store_true",
                        help="--receive: stop and exit 0 once the snapshot here checks complete")
    parser.add_argument("--timeout", type=float, default=86400, help="--receive: give up after this many seconds")
    parser.add_argument("--quick", action="store_true",
                        help="--to: compare files by size and time only, not by checksum (faster; misses a corrupt "
                             "file of the right size and date)")
    parser.add_argument("--bwlimit", type=int, metavar="KIB", help="--to: cap the transfer at KIB KiB/s")


def run(args: argparse.Namespace) -> int:
    import os

    from appliance.bounds import check_host, check_port
    from appliance.errors import ApplianceError
    from appliance.paths import appliance_home
    from appliance.rules import context_for, require_valid
    from appliance.serve.resolve import placement
    from appliance.settings import load_settings
    from appliance.weights.pins import revision_for
    from appliance.weights.rsync import MODULE_HUB, SECRET_ENV
    from appliance.weights.stamps import stamp_root

    settings = load_settings()
    profile = load_from_args(args, settings).profile
    require_valid(context_for(profile), "nothing synced")  # W2: only a pinned revision moves
    checkpoint = profile.model.checkpoint
    revision = revision_for(checkpoint, profile.model.revision)
    assert revision is not None  # W2 above
    given = placement_from_args(args, settings)  # APPLIANCE_MASTER_PORT / APPLIANCE_HOST_IP: the one rule
    port = check_port("--port", args.port) if args.port is not None else placement(profile, given).model_sync_port
    secret = os.environ.get(SECRET_ENV) or None
    if args.bwlimit is not None and args.bwlimit <= 0:
        raise ApplianceError(f"--bwlimit={args.bwlimit}: not a positive KiB/s", field="--bwlimit",
                             value=args.bwlimit, fix="give a positive rate in KiB/s, or leave it out")
    if args.peers:
        from appliance.weights.sync import parse_peer, push

        peers = [parse_peer(spec, port, MODULE_HUB) for spec in args.peers]
        push(checkpoint, revision, peers, stamp_root=stamp_root(appliance_home()), checksum=not args.quick,
             bwlimit_kib=args.bwlimit, secret=secret)
        return 0
    listen = args.listen or given.host_ip
    if not listen:
        raise ApplianceError("--receive needs the address to listen on", field="--listen",
                             fix="give --listen with this node's fabric address (or set APPLIANCE_HOST_IP)",
                             reason="the daemon binds one address, the fabric's, never every interface by default")
    check_host("--listen", listen)
    for addr in args.allow:
        check_host("--allow", addr)
    if not args.allow and not secret:
        raise ApplianceError("a receiving daemon open to any sender is refused", field="--allow",
                             fix=f"name the senders with --allow ADDR, or set {SECRET_ENV} on both sides",
                             reason="it writes into this node's hub cache")
    return receive(checkpoint, revision, listen, port, args.allow, secret, args.until_complete, args.timeout)


def receive(checkpoint: str, revision: str, listen: str, port: int, allow: list[str], secret: str | None,
            until_complete: bool, timeout_s: float) -> int:
    import signal
    import time

    from appliance.paths import appliance_home, make_dir
    from appliance.weights.hub import hf_hub_cache, repo_folder
    from appliance.weights.rsync import MODULE_HUB, daemon
    from appliance.weights.snapshot import check_hub_snapshot
    from appliance.weights.stamps import stamp_root
    from appliance.weights.sync import adopt_killed_copies

    cache = make_dir(hf_hub_cache(), "HF_HOME")
    adopt_killed_copies(repo_folder(checkpoint, cache), print)
    stop = {"now": False}

    def _stop(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    deadline = time.monotonic() + timeout_s
    with daemon(MODULE_HUB, cache, address=listen, port=port, writable=True, allow=allow or None, secret=secret,
                report=print):
        print(f"sync-model: waiting for {checkpoint}@{revision}", flush=True)
        while not stop["now"] and time.monotonic() < deadline:
            time.sleep(2)
            if until_complete and check_hub_snapshot(checkpoint, revision, cache, deep=False).complete:
                check = check_hub_snapshot(checkpoint, revision, cache, stamp_root=stamp_root(appliance_home()))
                print(f"sync-model: arrived: {check.summary()}", flush=True)
                if check.complete:
                    return 0
                for problem in check.problems:
                    print(f"  {problem.kind:11} {problem.render()}", flush=True)
    if until_complete:
        print(f"sync-model: {checkpoint}@{revision} did not arrive complete", flush=True)
        return 1
    return 0
