"""`appliance images [--json]`: each channel's image references, from the lock: the one compose and `appliance k8s`
run (for a released channel, the index of all its platforms) and one per platform."""

from __future__ import annotations

import argparse
import json


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channel", help="one channel only (default: every channel of the lock)")
    parser.add_argument("--json", action="store_true", help="machine-readable")


def listing(channel: str | None = None) -> dict[str, object]:
    """Every channel's references (or one's): released ones under images.release's repository, the others under the
    local name an image built here gets."""
    from appliance.errors import ApplianceError
    from appliance.lock import lock_document
    from appliance.lockfile import (
        UnknownChannel,
        channel_digest,
        channel_names,
        default_channel,
        image_tag,
        platform_image,
        released,
    )
    from appliance.lockfile import channel as channel_of

    lock = lock_document()
    names = channel_names(lock)
    if channel is not None:
        try:
            channel_of(lock, channel)
        except UnknownChannel as exc:
            raise ApplianceError(f"--channel {channel}: {exc}", field="--channel", value=channel,
                                 fix="name one of the lock's channels (`appliance channels` lists them)",
                                 reason="the images are the lock's channels") from None
        names = [channel]
    out = []
    for name in names:
        ch = channel_of(lock, name)
        platforms = list(ch["images"]["platforms"])
        pushed = released(lock, name)
        out.append({
            "channel": name, "target": ch["target"], "status": ch["status"],
            "default": name == default_channel(lock, ch["target"]), "lock_digest": channel_digest(lock, name),
            "released": pushed, "image": image_tag(lock, name),
            "platforms": [{"platform": p, "image": platform_image(lock, name, p) if pushed else image_tag(lock, name)}
                          for p in platforms],
        })
    return {"repository": lock["images"].get("release", {}).get("repository"), "channels": out}


def render(found: dict[str, object]) -> str:
    """One block a channel, every reference whole on its own line (a reference cut to fit a terminal is useless)."""
    lines = []
    for ch in found["channels"]:  # type: ignore[attr-defined]
        how = "released: docker pull" if ch["released"] else "not released: built locally"
        default = "  default" if ch["default"] else ""
        lines.append(f"{ch['channel']}  {ch['target']}  {ch['status']}{default}  {how}")
        if ch["released"]:
            lines.append(f"  all    {ch['image']}")
        lines += [f"  {p['platform'].split('/', 1)[1]:<6} {p['image']}" for p in ch["platforms"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    found = listing(args.channel)
    print(json.dumps(found, indent=2) if args.json else render(found))
    return 0
