"""`appliance versions [--check]`: one channel's lock, or drift of the installed distributions from it."""

from __future__ import annotations

import argparse
import json
import sys


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="compare installed distributions with the channel's lock")
    parser.add_argument("-o", "--output", choices=["wide"], help="wide: every cell whole, whatever the terminal")
    parser.add_argument("--channel", help="which channel (default: $APPLIANCE_CHANNEL, else the one whose engine is "
                                          "installed here, else the default of --target)")
    parser.add_argument("--target", choices=["gpu", "cpu"], help="which stack's default channel (default: detected)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from appliance.lock import (
        ENGINE_RECORD,
        SKIPPED_RECORD,
        check,
        detect_channel,
        engine_source_drift,
        group_state,
        host_platform,
        image_record,
        installed_version,
        load_lock,
        nccl_library_drift,
        overwritten_files,
        read_skipped,
    )
    from appliance.table import line, render

    lock = load_lock()
    if args.channel or args.target:
        ch, how = lock.channel(args.channel, args.target or "gpu"), ("--channel" if args.channel else "--target")
    else:
        ch, how = detect_channel(lock)
    if not args.check:
        if args.json:
            print(json.dumps({"channel": ch.name, "digest": ch.digest, "target": ch.target, "status": ch.status,
                              "engine": ch.engine.model_dump(exclude_none=True),
                              "packages": [p.model_dump(exclude_defaults=True) for p in ch.pins()]}, indent=2))
            return 0
        print(line(f"# channel {ch.name} ({how})  lock {ch.digest[:12]}  {ch.target}  {ch.status}  engine "
                   f"{ch.engine.label}"))
        print(render(["package", "rule", "why"], [[p.requirement(), p.rule or "", p.reason] for p in ch.pins()],
                     wide=args.output == "wide"))
        return 0
    platform = host_platform()
    skipped = read_skipped(image_record(SKIPPED_RECORD), platform) if ch.target == "gpu" else {}
    drifts = check(ch, skipped=skipped, platform=platform)
    if ch.target == "gpu":
        if (nccl := nccl_library_drift(ch)) is not None:
            drifts.append(nccl)  # K15 read back: the library vLLM will load, not only the wheel installed
        if ch.engine.source == "fork" and (engine := engine_source_drift(ch, image_record(ENGINE_RECORD))):
            drifts.append(engine)  # the commit the image's vLLM was built from, read back
        drifts += overwritten_files(ch)  # cutlass-dsl's libs-cu13 not overwritten by another libs wheel
    groups = group_state(ch, skipped=skipped)
    if args.json:
        print(json.dumps({"channel": ch.name, "target": ch.target, "digest": ch.digest, "ok": not drifts,
                          "platform": platform, "skipped": skipped, "groups": groups,
                          "drift": [d.__dict__ for d in drifts]}, indent=2))
    else:
        rows = []
        for pin in ch.pins():
            got = installed_version(pin.name)
            mark = "drift" if any(d.package == pin.name for d in drifts) else "ok"
            if got is None and pin.name in skipped and platform in pin.optional_on:
                mark = "skip"
            rows.append([mark, pin.name, pin.version, got or "-"])
        print(render(["state", "package", "locked", "installed"], rows, wide=args.output == "wide"))
        for name, why in skipped.items():
            print(line(f"skipped {name} on {platform}: {why}"))
        for group, state in groups.items():
            print(line(f"{group}: " + ("present (" + ", ".join(state["installed"]) + ")" if state["present"] else
                                       "absent" + (f": {state['why']}" if state.get("why") else ""))))
        for d in drifts:
            print(d.message, file=sys.stderr)
        print(line(f"channel {ch.name} ({how}): {'no drift' if not drifts else f'{len(drifts)} drift(s)'}"))
    return 1 if drifts else 0
