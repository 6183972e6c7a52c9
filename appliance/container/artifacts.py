"""Every locked wheel fetched one by one for the platform being built, before the big resolve (issue 20, item 7).

Standard library only: the GPU build runs this file by path in its wheel stage, once per platform.

    artifacts.py --versions versions.json [--channel C] fetch --platform linux/arm64 --dest /wheels \\
        --skipped-out /wheels/skipped.json [--torch-index URL]

A missing wheel used to surface deep inside one `pip download` of the whole stack as a resolver error. Here each
pin is asked for alone (`pip download --no-deps --only-binary=:all:` from the index versions.json names for it,
its URL from that index's build arg), so what is missing is said by name and platform:

- a pin that is required on this platform and has no wheel there stops the build, listing every such pin;
- a pin marked `optional_on` this platform (flashinfer-jit-cache on linux/arm64: FlashInfer JIT-compiles instead)
  is skipped, with the reason, into skipped.json. The image's install leaves it out (lockcli.py lock-files
  --skipped) and `appliance versions --check` reads the file back, so the absence is recorded, never silent;
- pins of one `group` (FlashInfer's jit-cache shim and its SM12x provider) are installed together or not at all:
  where one of them is skipped, the others are left out with it, and the build names which it installed.

Only "no such wheel" is a reason to skip; a network or index error fails the build whatever the pin.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run by path (the image build): the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.container.lockcli import add_lock_args, lock_channel
from appliance.errors import ApplianceError
from appliance.lockfile import UnknownChannel, pins, requirement

_NOT_FOUND = ("Could not find a version that satisfies the requirement", "No matching distribution found")


@dataclass(frozen=True)
class Fetched:
    downloaded: list[str]
    skipped: dict[str, str]
    """pin name -> why it is absent on this platform."""
    missing: list[str]
    """Required pins without a wheel here (or whose index failed): each line names the pin and the cause."""


def _index_args(lock: dict, pin: dict, env: dict[str, str], torch_index: str) -> tuple[list[str], str | None]:
    """(pip index flags, the name of an index variable that is empty)."""
    index = pin.get("index", "pypi")
    if index == "pypi":
        extra = torch_index if pin["name"] in ("torch", "triton") and torch_index else ""
        return (["--extra-index-url", extra] if extra else []), None
    var = lock["indexes"][index]["env"]
    url = env.get(var, "")
    return (["--extra-index-url", url], None) if url else ([], var)


def fetch(lock: dict, ch: dict, platform: str, dest: Path, *, env: dict[str, str] | None = None,
          torch_index: str = "", pip: list[str] | None = None, extra_pip: list[str] | None = None) -> Fetched:
    """Download each pin of channel `ch` (no deps) into `dest`. ``pip``/``extra_pip``: the pip command and flags
    (tests point it at a local folder of wheels with --no-index --find-links)."""
    env = dict(os.environ) if env is None else env
    pip = pip or [sys.executable, "-m", "pip"]
    dest.mkdir(parents=True, exist_ok=True)
    downloaded: list[str] = []
    skipped: dict[str, str] = {}
    missing: list[str] = []
    for pin in pins(ch):
        req = requirement(pin)
        optional = pin.get("optional_on", {}).get(platform)
        flags, empty_var = _index_args(lock, pin, env, torch_index)
        if empty_var:
            why = f"{req} is only on the index named by {empty_var}, which is empty"
            if optional:
                skipped[pin["name"]] = f"{why}; optional on {platform}: {optional}"
            else:
                missing.append(f"{why}: set it (docs/containers.md), or build air-gapped (BUILD_MODE=offline)")
            continue
        cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest), "--progress-bar", "off",
               *flags, *(extra_pip or []), req]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, check=False)
        if out.returncode == 0:
            downloaded.append(req)
            continue
        said = (out.stderr.strip() or out.stdout.strip()).splitlines()
        cause = next((line.strip() for line in said if "ERROR" in line), said[-1] if said else "pip failed")
        if any(marker in out.stderr + out.stdout for marker in _NOT_FOUND):
            if optional:
                skipped[pin["name"]] = f"no {platform} wheel of {req} on its index; optional on {platform}: {optional}"
            else:
                missing.append(f"{req}: no {platform} wheel on its index ({cause})")
        else:
            missing.append(f"{req}: the index failed ({cause})")  # never a reason to skip
    for pin in pins(ch):  # a group is whole or absent: its other members leave with a skipped one
        group = pin.get("group")
        gone = [p["name"] for p in pins(ch) if p.get("group") == group and p["name"] in skipped] if group else []
        if gone and pin["name"] not in skipped:
            skipped[pin["name"]] = (f"left out with {', '.join(gone)} (group {group}: installed together or not at "
                                    f"all); optional on {platform}: {pin.get('optional_on', {}).get(platform, '')}")
            downloaded = [d for d in downloaded if d != requirement(pin)]
    return Fetched(downloaded, skipped, missing)


def groups(ch: dict, fetched: Fetched) -> dict[str, dict[str, list[str]]]:
    """group -> {installed, left_out}: what the build says of each group of pins (e.g. the jit-cache shim and its
    providers)."""
    out: dict[str, dict[str, list[str]]] = {}
    for pin in pins(ch):
        if pin.get("group"):
            side = "left_out" if pin["name"] in fetched.skipped else "installed"
            out.setdefault(pin["group"], {"installed": [], "left_out": []})[side].append(pin["name"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="artifacts.py", description=__doc__.splitlines()[0])
    add_lock_args(parser)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fetch", help="download every pin of the channel, one by one, for this platform")
    p.add_argument("--platform", required=True)
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--skipped-out", type=Path, required=True, help="skipped.json: optional pins left out here")
    p.add_argument("--torch-index", default="", help="an extra index carrying torch/triton for this CUDA")
    args = parser.parse_args(argv)

    try:
        _, lock, _, ch = lock_channel(args)
    except (ApplianceError, UnknownChannel) as exc:
        print(f"artifacts: {exc}", file=sys.stderr)
        return 2
    result = fetch(lock, ch, args.platform, args.dest, torch_index=args.torch_index)
    for line in result.missing:
        print(f"artifacts: {line}", file=sys.stderr)
    if result.missing:
        print(f"artifacts: {len(result.missing)} locked artifact(s) cannot be fetched for {args.platform}; "
              f"nothing was built (K16: versions.json is the lock)", file=sys.stderr)
        return 1
    for name, why in result.skipped.items():
        print(f"artifacts: skipped {name} on {args.platform}: {why}")
    named = groups(ch, result)
    for group, sides in named.items():
        print(f"artifacts: group {group} on {args.platform}: installs {', '.join(sides['installed']) or 'nothing'}"
              + (f"; leaves out {', '.join(sides['left_out'])}" if sides["left_out"] else ""))
    args.skipped_out.write_text(json.dumps({"platform": args.platform, "skipped": result.skipped, "groups": named},
                                           indent=2) + "\n")
    print(f"artifacts: {len(result.downloaded)} locked wheel(s) for {args.platform}, {len(result.skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
