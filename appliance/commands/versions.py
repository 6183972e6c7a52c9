"""`appliance versions [--check]`: the lock, or drift of the installed distributions from it."""

from __future__ import annotations

import argparse
import json
import sys


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="compare installed distributions with the lock")
    parser.add_argument("--target", choices=["gpu", "cpu"], help="which stack to check (default: detected)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from appliance.lock import (
        ENGINE_RECORD,
        SKIPPED_RECORD,
        check,
        detect_target,
        engine_source_drift,
        host_platform,
        image_record,
        installed_version,
        load_lock,
        lock_digest,
        nccl_library_drift,
        overwritten_files,
        read_skipped,
    )

    lock = load_lock()
    target = args.target or detect_target()
    if not args.check:
        if args.json:
            print(json.dumps({"digest": lock_digest(), "stack": lock.stack, "engine_source": lock.engine_source,
                              "packages": [p.model_dump() for p in lock.packages]}, indent=2))
            return 0
        print(f"# lock {lock_digest()[:12]}  stack {lock.stack}  engine {lock.engine_source['repo']}"
              f"@{lock.engine_source['commit']}")
        for p in lock.packages:
            print(f"{p.requirement():<36} {'/'.join(p.targets):<8} {p.rule or '':<4} {p.reason}")
        return 0
    platform = host_platform()
    skipped = read_skipped(image_record(SKIPPED_RECORD), platform) if target == "gpu" else {}
    drifts = check(lock, target, skipped=skipped, platform=platform)
    if target == "gpu":
        if (nccl := nccl_library_drift(lock)) is not None:
            drifts.append(nccl)  # K15 read back: the library vLLM will load, not only the wheel installed
        if (engine := engine_source_drift(lock, image_record(ENGINE_RECORD))) is not None:
            drifts.append(engine)  # the commit the image's vLLM was built from, read back
        drifts += overwritten_files(lock, target)  # cutlass-dsl's libs-cu13 not overwritten by -cu12
    if args.json:
        print(json.dumps({"target": target, "digest": lock_digest(), "ok": not drifts, "platform": platform,
                          "skipped": skipped, "drift": [d.__dict__ for d in drifts]}, indent=2))
    else:
        for pin in lock.pins(target):
            got = installed_version(pin.name)
            mark = "drift" if any(d.package == pin.name for d in drifts) else "ok"
            if got is None and pin.name in skipped and platform in pin.optional_on:
                mark = "skip"
            print(f"{mark:<6} {pin.name:<22} locked {pin.version:<14} installed {got or '-'}")
        for name, why in skipped.items():
            print(f"skipped {name} on {platform}: {why}")
        for d in drifts:
            print(d.message, file=sys.stderr)
        print(f"{target} stack: {'no drift' if not drifts else f'{len(drifts)} drift(s)'}")
    return 1 if drifts else 0
