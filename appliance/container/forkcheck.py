"""Checks on the engine's source tree, run by the GPU build right after the clone, before any compiling.

Standard library only: the Docker build runs this file by path, like lockcli.py.

    forkcheck.py --versions versions.json requirements --source DIR [--write-build-reqs FILE]
        Compares every exact pin (`name==version`) in the fork's own requirements/cuda.txt (and the
        files it includes) and its build requirements with versions.json; any locked package pinned
        to another version stops the build in seconds, naming both values. Says which build
        requirements layout the commit has (requirements/build/cuda.txt, upstream's newer layout,
        or requirements/build.txt) and writes a pip requirements FILE that includes them (`-r PATH`).
    forkcheck.py max-jobs [--gb-per-job 7] [--meminfo /proc/meminfo]
        MAX_JOBS for the CUDA build sized by memory: one nvcc job takes ≈ 6–8 GB, so a many-core
        builder with little memory runs fewer jobs than it has cores.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

# Newer upstream layout first; the file the build installs is the first that exists.
BUILD_LAYOUTS = ("requirements/build/cuda.txt", "requirements/build.txt")
# Upstream's optional Rust frontend: build tools only (setuptools-rust), installed when present.
RUST_BUILD = "requirements/build/rust.txt"
RUNTIME_REQS = "requirements/cuda.txt"
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,#]+)\s*(?:;.*)?$")


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def exact_pins(path: Path, root: Path, seen: set[Path] | None = None) -> list[tuple[str, str, str]]:
    """(name, version, where) for every `name==version` line of a pip requirements file and the
    files it includes with -r/-c. Ranges (>=, !=), options and comments are not pins."""
    seen = seen if seen is not None else set()
    if path in seen:
        return []
    seen.add(path)
    out: list[tuple[str, str, str]] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|-c|--requirement|--constraint)[\s=]+(\S+)", line)
        if include:
            child = (path.parent / include.group(1)).resolve()
            if child.is_file():
                out += exact_pins(child, root, seen)
            continue
        m = _PIN.match(line)
        if m:
            out.append((canon(m.group(1)), m.group(2), f"{path.relative_to(root)}:{number}"))
    return out


def build_requirements(source: Path) -> list[str]:
    """The build requirement files the pinned commit has, newest layout first; [] when neither."""
    for rel in BUILD_LAYOUTS:
        if (source / rel).is_file():
            return [rel, *([RUST_BUILD] if rel.startswith("requirements/build/") and (source / RUST_BUILD).is_file()
                           else [])]
    return []


def compare(ch: dict, source: Path) -> tuple[list[str], list[str]]:
    """(problems, build requirement files) of one channel's fork. A problem names the fork's file:line, both
    versions, the fix."""
    source = source.resolve()
    locked = {canon(p["name"]): p["version"] for p in ch["packages"]}
    problems: list[str] = []
    build = build_requirements(source)
    if not (source / RUNTIME_REQS).is_file():
        problems.append(f"{RUNTIME_REQS} is missing at this commit: cannot compare the fork's pins with versions.json")
    if not build:
        problems.append(f"no build requirements at this commit (looked for {' and '.join(BUILD_LAYOUTS)})")
    files = [f for f in [RUNTIME_REQS, *build] if (source / f).is_file()]
    for rel in files:
        for name, version, where in exact_pins((source / rel).resolve(), source):
            want = locked.get(name)
            if want is not None and version != want:
                problems.append(f"{where} pins {name}=={version} but versions.json locks {name}=={want}")
    return problems, build


def max_jobs(meminfo: str, cpus: int, gb_per_job: float) -> int:
    """min(cpus, MemAvailable / gb_per_job), at least 1."""
    m = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.M) or re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    if not m:
        return max(1, cpus)
    by_memory = int(int(m.group(1)) / 1024 / 1024 // gb_per_job)
    return max(1, min(cpus, by_memory))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forkcheck.py", description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=Path, default=Path("versions.json"))
    parser.add_argument("--channel", default=os.environ.get("APPLIANCE_CHANNEL") or None,
                        help="the fork's channel (default: $APPLIANCE_CHANNEL, else the lock's default_channel)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("requirements", help="the fork's pins against versions.json, and its build layout")
    p.add_argument("--source", type=Path, required=True, help="the cloned engine source")
    p.add_argument("--write-build-reqs", type=Path,
                   help="write a pip requirements file including the build requirements to install")
    p = sub.add_parser("max-jobs", help="MAX_JOBS sized by memory")
    p.add_argument("--gb-per-job", type=float, default=7.0)
    p.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    args = parser.parse_args(argv)

    if args.cmd == "max-jobs":
        print(max_jobs(args.meminfo.read_text(), os.cpu_count() or 1, args.gb_per_job))
        return 0
    from appliance.lockfile import load

    lock = load(args.versions)  # strict and bounded, as every reader of versions.json
    name = args.channel or lock["default_channel"]
    if name not in lock["channels"]:
        print(f"forkcheck: versions.json has no channel {name!r} ({', '.join(sorted(lock['channels']))})",
              file=sys.stderr)
        return 2
    ch = lock["channels"][name]
    src = ch["engine"]
    if src["source"] != "fork":
        print(f"forkcheck: channel {name} installs {src['name']}=={src['version']} from a package index; "
              f"there is no fork source to check", file=sys.stderr)
        return 2
    problems, build = compare(ch, args.source)
    for line in problems:
        print(f"forkcheck: {line}", file=sys.stderr)
    if problems:
        print(f"forkcheck: {src['repo']}@{src['commit']} does not match channel {name} of versions.json. Fix: pin "
              f"the engine commit whose requirements match the lock, or move the lock to the fork's versions "
              f"(every pin at once, K16) and re-validate. Stopped before compiling.", file=sys.stderr)
        return 1
    print(f"forkcheck: {RUNTIME_REQS} and {', '.join(build)} agree with versions.json "
          f"(build requirements layout: {build[0]})")
    if args.write_build_reqs:
        from appliance.errors import ApplianceError
        from appliance.safe_write import write_file

        try:
            write_file(args.write_build_reqs, "".join(f"-r {(args.source / f).resolve()}\n" for f in build),
                       field="--write-build-reqs")
        except ApplianceError as exc:
            print(f"forkcheck: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
