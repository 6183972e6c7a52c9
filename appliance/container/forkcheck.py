"""Checks on the engine's source tree, run by the GPU build right after the clone, before any compiling.

Standard library only: the Docker build runs this file by path, like lockcli.py.

    forkcheck.py --versions versions.json requirements --source DIR [--write-build-reqs FILE]
        Compares what the fork's own requirements/cuda.txt (and the files it includes) and its build
        requirements say about every locked package with versions.json: an exact pin (`name==version`)
        must be the locked version; a range (`quack-kernels>=0.6.1`) must admit it, and the output says
        that the lock's exact pin resolves it; a URL-pinned wheel (`flashinfer-cubin @ https://…/
        flashinfer_cubin-0.6.15.post1-py3-none-any.whl`) must carry the locked version in its file name.
        The fork keeps FlashInfer's version in two more places, docker/Dockerfile's `ARG
        FLASHINFER_VERSION` and docker/versions.json; the seed: "All three places that carry the version
        move together ... requirements/cuda.txt, docker/Dockerfile's FLASHINFER_VERSION, and
        docker/versions.json" — each must be the locked flashinfer-python. Any disagreement stops the build
        in seconds, naming the file, the line and both values. Says which build requirements layout the
        commit has (requirements/build/cuda.txt, upstream's newer layout, or requirements/build.txt) and
        writes a pip requirements FILE that includes them (`-r PATH`).
    forkcheck.py max-jobs [--gb-per-job 7] [--meminfo /proc/meminfo] [--cgroup /sys/fs/cgroup] [--platform P]
        MAX_JOBS for the CUDA build sized by memory: one nvcc job takes ≈ 6–8 GB, so a many-core
        builder with little memory runs fewer jobs than it has cores. The memory is the smaller of
        MemAvailable and what the build's cgroup may still take (memory.max - memory.current, v2; v1's
        limit_in_bytes - usage_in_bytes): a container sees the host's /proc/meminfo, not its own limit.
        linux/arm64 (GB10) builds are capped at UNIFIED_MEMORY_JOBS.
    forkcheck.py rust-toolchain --source DIR
        The Rust toolchain channel the commit asks for (rust-toolchain.toml / rust-toolchain), else stable.
    forkcheck.py wheel --wheel WHL --source DIR [--fa3-skipped]
        After the build: every Rust artifact the commit's tools/build_rust.py declares is in the wheel
        (VLLM_REQUIRE_RUST_FRONTEND=1 already refuses to drop them; this proves it), FA2 is there, and
        FA3 (_vllm_fa3_C) is absent when the build skipped it (no SM90 target: flashattn.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run by path (the image build): the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.container.lockcli import add_lock_args, lock_channel
from appliance.errors import ApplianceError
from appliance.lockfile import UnknownChannel

# Newer upstream layout first; the file the build installs is the first that exists.
BUILD_LAYOUTS = ("requirements/build/cuda.txt", "requirements/build.txt")
# Upstream's optional Rust frontend: build tools only (setuptools-rust), installed when present.
RUST_BUILD = "requirements/build/rust.txt"
RUNTIME_REQS = "requirements/cuda.txt"
# FlashInfer's other two homes in the fork (the seed: "All three places that carry the version move together").
DOCKERFILE = "docker/Dockerfile"
DOCKER_VERSIONS = "docker/versions.json"
FLASHINFER = "flashinfer-python"

_REQ = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<rest>.*?)\s*$")
_SPEC = re.compile(r"^\s*(?P<op>===|==|!=|~=|>=|<=|>|<)\s*(?P<version>[^\s,;]+)\s*$")
_VERSION = re.compile(r"^v?(?P<release>\d+(?:\.\d+)*)(?:[-_.]?(?P<pre>a|b|rc|alpha|beta|c)[-_.]?(?P<pren>\d*))?"
                      r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d*))?(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
                      r"(?:\+(?P<local>[A-Za-z0-9.]+))?$", re.IGNORECASE)
_ARG = re.compile(r"^\s*ARG\s+FLASHINFER_VERSION\s*=\s*[\"']?(?P<version>[^\s\"']+)", re.MULTILINE)


@dataclass(frozen=True)
class Requirement:
    """One requirement line of the fork: an exact pin, a range, a URL-pinned wheel or a bare name."""

    name: str
    kind: str
    """`exact` | `range` | `url` | `bare`"""
    spec: str
    """What the line says after the name: `==0.6.1`, `>=0.6.1,<0.7`, the URL, or ``."""
    version: str | None
    """The version an exact pin or a URL's wheel file names; None for a range or a bare name."""
    where: str
    """file:line in the fork."""


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_version(text: str) -> tuple[object, ...] | None:
    """A PEP 440 version as a tuple that sorts like pip sorts versions; None when it is not one."""
    m = _VERSION.match(text.strip())
    if not m:
        return None
    release = tuple(int(x) for x in m["release"].split("."))
    release += (0,) * (6 - len(release)) if len(release) < 6 else ()
    pre_rank = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "rc": 2, "c": 2}
    if m["pre"]:
        pre: tuple[int, int] = (pre_rank[m["pre"].lower()], int(m["pren"] or 0))
    elif m["post"] is None and m["dev"] is not None:
        pre = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre = (3, 0)  # a final release sorts after its pre-releases
    post = -1 if m["post"] is None else int(m["post"] or 0)
    dev = 1 << 30 if m["dev"] is None else int(m["dev"] or 0)
    return (*release, *pre, post, dev, m["local"] or "")


def satisfies(version: str, spec: str) -> bool | None:
    """Whether `version` meets every clause of `spec` (`>=0.6.1,<0.7,!=0.6.3`); None when a clause is unreadable."""
    have = parse_version(version)
    if have is None:
        return None
    for clause in (c for c in spec.split(",") if c.strip()):
        m = _SPEC.match(clause)
        if not m:
            return None
        op, want_text = m["op"], m["version"]
        if want_text.endswith(".*") and op in ("==", "!="):
            prefix = want_text[:-2]
            hit = version == prefix or version.startswith(prefix + ".")
            if hit != (op == "=="):
                return False
            continue
        if op == "===":
            if version != want_text:
                return False
            continue
        want = parse_version(want_text)
        if want is None:
            return None
        ok = {"==": have[:-1] == want[:-1] if not want[-1] else have == want, "!=": have != want,
              ">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want}.get(op)
        if op == "~=":
            parts = want_text.split(".")
            upper = parse_version(".".join([*parts[:-2], str(int(parts[-2]) + 1)])) if len(parts) >= 2 else None
            ok = have >= want and (upper is None or have < upper)
        if not ok:
            return False
    return True


def wheel_version(url: str, name: str) -> str | None:
    """The version a wheel URL names: its file name (`flashinfer_cubin-0.6.15.post1-py3-none-any.whl`), else a
    release tag in its path (`/releases/download/v0.6.15.post1/`)."""
    tail = url.split("#", 1)[0].split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if tail.endswith(".whl"):
        parts = tail[:-4].split("-")
        if len(parts) >= 2 and canon(parts[0]) == canon(name):
            return parts[1]
    tag = re.search(r"/v?(\d+(?:\.\d+)+(?:\.?post\d+)?)(?:/|$)", url)
    return tag[1] if tag else None


def requirements(path: Path, root: Path, seen: set[Path] | None = None) -> list[Requirement]:
    """Every requirement of a pip requirements file and the files it includes with -r/-c; options and comments
    are not requirements. Markers (`; platform_system == "Linux"`) and extras are dropped."""
    seen = seen if seen is not None else set()
    if path in seen:
        return []
    seen.add(path)
    out: list[Requirement] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|-c|--requirement|--constraint)[\s=]+(\S+)", line)
        if include:
            child = (path.parent / include.group(1)).resolve()
            if child.is_file():
                out += requirements(child, root, seen)
            continue
        if line.startswith("-"):
            continue  # --extra-index-url and other options
        m = _REQ.match(line.split(";", 1)[0] if " @ " not in line else line)
        if not m:
            continue
        name, rest = canon(m["name"]), m["rest"].strip()
        where = f"{path.relative_to(root)}:{number}"
        if rest.startswith("@"):
            url = rest[1:].split(";", 1)[0].strip()
            out.append(Requirement(name, "url", url, wheel_version(url, name), where))
        elif not rest:
            out.append(Requirement(name, "bare", "", None, where))
        else:
            spec = rest.replace(" ", "")
            exact = _SPEC.match(spec) if "," not in spec else None
            if exact and exact["op"] == "==" and not exact["version"].endswith(".*"):
                out.append(Requirement(name, "exact", spec, exact["version"], where))
            else:
                out.append(Requirement(name, "range", spec, None, where))
    return out


def exact_pins(path: Path, root: Path) -> list[tuple[str, str, str]]:
    """(name, version, where) for every `name==version` line (ranges, URLs and bare names are not exact pins)."""
    return [(r.name, r.version, r.where) for r in requirements(path, root) if r.kind == "exact" and r.version]


def build_requirements(source: Path) -> list[str]:
    """The build requirement files the pinned commit has, newest layout first; [] when neither."""
    for rel in BUILD_LAYOUTS:
        if (source / rel).is_file():
            return [rel, *([RUST_BUILD] if rel.startswith("requirements/build/") and (source / RUST_BUILD).is_file()
                           else [])]
    return []


def judge(req: Requirement, want: str) -> tuple[str | None, str | None]:
    """(problem, note) for one requirement of a locked package."""
    pin = f"{req.name}=={want}"
    if req.kind == "exact" and req.version != want:
        return f"{req.where} pins {req.name}=={req.version} but versions.json locks {pin}", None
    if req.kind == "url":
        if req.version is None:
            return (f"{req.where} pins {req.name} to a URL whose file name names no version ({req.spec}): "
                    f"versions.json locks {pin}"), None
        if req.version != want:
            return (f"{req.where} pins {req.name} @ {req.spec} (version {req.version}) but versions.json locks "
                    f"{pin}"), None
        return None, f"{req.where}: {req.name} is URL-pinned at {req.version}, the locked version"
    if req.kind == "range":
        ok = satisfies(want, req.spec)
        if ok is None:
            return (f"{req.where} asks {req.name}{req.spec}, which this check cannot read: versions.json locks "
                    f"{pin}"), None
        if not ok:
            return f"{req.where} asks {req.name}{req.spec}, which the locked {pin} does not satisfy", None
        return None, (f"{req.where}: {req.name}{req.spec} is a range; the lock's exact {pin} is what resolves "
                      f"it (an unpinned resolve could take a later release)")
    if req.kind == "bare":
        return None, f"{req.where}: {req.name} carries no version; the lock's {pin} resolves it"
    return None, None


def flashinfer_homes(source: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """([(where, version)] from docker/Dockerfile's ARG and docker/versions.json, [notes on homes missing])."""
    found: list[tuple[str, str]] = []
    notes: list[str] = []
    dockerfile = source / DOCKERFILE
    if dockerfile.is_file():
        text = dockerfile.read_text(errors="replace")
        for m in _ARG.finditer(text):
            found.append((f"{DOCKERFILE}:{text.count(chr(10), 0, m.start()) + 1}", m["version"]))
        if not _ARG.search(text):
            notes.append(f"{DOCKERFILE} has no ARG FLASHINFER_VERSION at this commit")
    else:
        notes.append(f"{DOCKERFILE} is absent at this commit")
    versions = source / DOCKER_VERSIONS
    if versions.is_file():
        try:
            value = json.loads(versions.read_text())["variable"]["FLASHINFER_VERSION"]["default"]
        except (ValueError, KeyError, TypeError):
            value = None
        if isinstance(value, str) and value:
            found.append((f"{DOCKER_VERSIONS} variable.FLASHINFER_VERSION", value))
        else:
            notes.append(f"{DOCKER_VERSIONS} names no variable.FLASHINFER_VERSION.default at this commit")
    else:
        notes.append(f"{DOCKER_VERSIONS} is absent at this commit")
    return found, notes


def compare(ch: dict, source: Path) -> tuple[list[str], list[str], list[str]]:
    """(problems, notes, build requirement files) of one channel's fork. A problem names the fork's file:line,
    both versions, the fix."""
    source = source.resolve()
    locked = {canon(p["name"]): p["version"] for p in ch["packages"]}
    problems: list[str] = []
    notes: list[str] = []
    build = build_requirements(source)
    if not (source / RUNTIME_REQS).is_file():
        problems.append(f"{RUNTIME_REQS} is missing at this commit: cannot compare the fork's pins with versions.json")
    if not build:
        problems.append(f"no build requirements at this commit (looked for {' and '.join(BUILD_LAYOUTS)})")
    files = [f for f in [RUNTIME_REQS, *build] if (source / f).is_file()]
    for rel in files:
        for req in requirements((source / rel).resolve(), source):
            want = locked.get(req.name)
            if want is None:
                continue  # not in the lock: the fork's own business
            problem, note = judge(req, want)
            problems += [problem] if problem else []
            notes += [note] if note else []
    want = locked.get(FLASHINFER)
    homes, missing = flashinfer_homes(source)
    notes += missing
    if want is not None:
        for where, version in homes:
            if version != want:
                problems.append(f"{where} says FLASHINFER_VERSION={version} but versions.json locks "
                                f"{FLASHINFER}=={want} (the fork keeps FlashInfer's version in three places that "
                                f"must move together)")
    return problems, notes, build


UNIFIED_MEMORY_JOBS = 8
"""MAX_JOBS cap of a linux/arm64 build. GB10 (DGX Spark) has 128 GB of unified memory shared by the CPU, the GPU
and the OS; nvcc jobs at the memory-sized count (≈ 17 there) plus the rest of the build run the box into the OOM
killer or a hard freeze. The community GB10 builds cap parallelism for this reason (eugr/spark-vllm-docker's
Dockerfile: BUILD_JOBS "to reduce OOM situations"); issue 20 puts the safe range at about 8–10. An explicit
MAX_JOBS build arg overrides it."""
CGROUP_UNLIMITED = 1 << 60
"""cgroup v1 reports 'no limit' as a page-rounded 2^63: anything above this is no limit."""


def cgroup_headroom(root: Path) -> int | None:
    """Bytes the current cgroup may still allocate (v2 memory.max - memory.current, else v1), None when unlimited
    or unreadable."""
    for limit_name, usage_name in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = (root / limit_name).read_text().strip()
            usage = (root / usage_name).read_text().strip()
        except OSError:
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= CGROUP_UNLIMITED:
            return None
        return max(0, int(limit) - (int(usage) if usage.isdigit() else 0))
    return None


def max_jobs(meminfo: str, cpus: int, gb_per_job: float, *, cgroup_bytes: int | None = None,
             cap: int | None = None) -> int:
    """min(cpus, memory / gb_per_job, cap), at least 1; memory = min(MemAvailable, the cgroup's headroom)."""
    m = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.M) or re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    jobs = cpus
    memory = [int(m.group(1)) * 1024] if m else []
    memory += [cgroup_bytes] if cgroup_bytes is not None else []
    if memory:
        jobs = min(jobs, int(min(memory) / (1 << 30) // gb_per_job))
    if cap is not None:
        jobs = min(jobs, cap)
    return max(1, jobs)


def rust_toolchain(source: Path) -> str:
    """The channel a rust-toolchain.toml (or the older plain rust-toolchain file) of the commit pins, else stable."""
    for base in (source, source / "rust"):
        toml_file, plain = base / "rust-toolchain.toml", base / "rust-toolchain"
        if toml_file.is_file():
            channel = tomllib.loads(toml_file.read_text()).get("toolchain", {}).get("channel")
            if isinstance(channel, str) and re.fullmatch(r"[A-Za-z0-9._-]+", channel):
                return channel
        if plain.is_file() and re.fullmatch(r"[A-Za-z0-9._-]+", plain.read_text().strip()):
            return plain.read_text().strip()
    return "stable"


RUST_BUILD_SCRIPT = "tools/build_rust.py"


def rust_artifacts(source: Path) -> list[str]:
    """Wheel paths of the Rust parts the commit declares (setuptools-rust targets of tools/build_rust.py): an
    extension `vllm._rust_x` is `vllm/_rust_x.*.so`, a binary `vllm-rs` is `vllm/vllm-rs` (installed into vllm/).
    [] when the commit has no Rust frontend."""
    script = source / RUST_BUILD_SCRIPT
    if not script.is_file():
        return []
    out = []
    for target in re.findall(r"\btarget\s*=\s*[\"']([A-Za-z0-9_.-]+)[\"']", script.read_text()):
        out.append(target.replace(".", "/") + ".*.so" if "." in target else f"vllm/{target}")
    return out


def wheel_problems(wheel: Path, source: Path, *, fa3_skipped: bool) -> list[str]:
    """What the built wheel lacks (or carries against the plan); [] when it is what the build promised."""
    import fnmatch

    names = zipfile.ZipFile(wheel).namelist()
    problems = []
    for pattern in rust_artifacts(source):
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            problems.append(f"{wheel.name} has no {pattern}: the Rust frontend {RUST_BUILD_SCRIPT} declares was "
                            f"dropped (install cargo and protoc in the builder; VLLM_REQUIRE_RUST_FRONTEND=1)")
    if not any(fnmatch.fnmatchcase(n, "vllm/vllm_flash_attn/_vllm_fa2_C*.so") for n in names):
        problems.append(f"{wheel.name} has no vllm/vllm_flash_attn/_vllm_fa2_C*.so (FlashAttention-2)")
    fa3 = [n for n in names if fnmatch.fnmatchcase(n, "vllm/vllm_flash_attn/_vllm_fa3_C*.so")]
    if fa3_skipped and fa3:
        problems.append(f"{wheel.name} carries {fa3[0]} although FA3 was to be skipped (no SM90 target): the "
                        f"vllm-flash-attn edit did not take (flashattn.py)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forkcheck.py", description=__doc__.splitlines()[0])
    add_lock_args(parser, "the fork's channel (default: $APPLIANCE_CHANNEL, else the lock's default_channel)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("requirements", help="the fork's pins against versions.json, and its build layout")
    p.add_argument("--source", type=Path, required=True, help="the cloned engine source")
    p.add_argument("--write-build-reqs", type=Path,
                   help="write a pip requirements file including the build requirements to install")
    p = sub.add_parser("max-jobs", help="MAX_JOBS sized by memory")
    p.add_argument("--gb-per-job", type=float, default=7.0)
    p.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    p.add_argument("--cgroup", type=Path, default=Path("/sys/fs/cgroup"), help="the build's cgroup (v2 or v1) root")
    p.add_argument("--platform", default="", help="the target platform: linux/arm64 is capped (GB10)")
    p = sub.add_parser("rust-toolchain", help="the Rust toolchain channel the commit asks for")
    p.add_argument("--source", type=Path, required=True)
    p = sub.add_parser("wheel", help="the built wheel carries the Rust frontend, FA2, and FA3 only when built")
    p.add_argument("--wheel", type=Path, required=True)
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--fa3-skipped", action="store_true")
    args = parser.parse_args(argv)

    if args.cmd == "max-jobs":
        cap = UNIFIED_MEMORY_JOBS if args.platform == "linux/arm64" else None
        print(max_jobs(args.meminfo.read_text(), os.cpu_count() or 1, args.gb_per_job,
                       cgroup_bytes=cgroup_headroom(args.cgroup), cap=cap))
        return 0
    if args.cmd == "rust-toolchain":
        print(rust_toolchain(args.source))
        return 0
    if args.cmd == "wheel":
        problems = wheel_problems(args.wheel, args.source, fa3_skipped=args.fa3_skipped)
        for line in problems:
            print(f"forkcheck: {line}", file=sys.stderr)
        if problems:
            return 1
        rust = ", ".join(rust_artifacts(args.source)) or "none declared at this commit"
        print(f"forkcheck: {args.wheel.name}: Rust frontend ({rust}) and FA2 present; FA3 "
              f"{'skipped (no SM90 target)' if args.fa3_skipped else 'built'}")
        return 0
    try:
        _, _, name, ch = lock_channel(args)  # strict and bounded, as every reader of versions.json
    except (ApplianceError, UnknownChannel) as exc:
        print(f"forkcheck: {exc}", file=sys.stderr)
        return 2
    src = ch["engine"]
    if src["source"] != "fork":
        print(f"forkcheck: channel {name} installs {src['name']}=={src['version']} from a package index; "
              f"there is no fork source to check", file=sys.stderr)
        return 2
    problems, notes, build = compare(ch, args.source)
    for line in notes:
        print(f"forkcheck: note: {line}")
    for line in problems:
        print(f"forkcheck: {line}", file=sys.stderr)
    if problems:
        print(f"forkcheck: {src['repo']}@{src['commit']} does not match channel {name} of versions.json. Fix: pin "
              f"the engine commit whose requirements match the lock, or move the lock to the fork's versions "
              f"(every pin at once, K16) and re-validate. Stopped before compiling.", file=sys.stderr)
        return 1
    print(f"forkcheck: {RUNTIME_REQS}, {', '.join(build)} and the fork's FlashInfer homes agree with versions.json "
          f"(build requirements layout: {build[0]})")
    if args.write_build_reqs:
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
