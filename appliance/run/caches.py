"""Persistent compile/JIT caches under one root, keyed by lock digest + the profile's engine digest.

A cache written by another stack (other torch/triton/FlashInfer) or another engine configuration
(other model, parallelism, shapes, graph modes) is never reused: the key changes with either.
Ports, names and parsers are not part of the key, so moving a port keeps a warm cache (vLLM
also keeps its model-inspection results there: a cold cache costs seconds at every start). The HF cache is separate
and shared: weights do not depend on the stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from appliance.paths import appliance_home, make_dir

if TYPE_CHECKING:
    from appliance.profile.model import Profile

# env var -> subfolder; each tool reads its own variable.
CACHE_ENV = {
    "VLLM_CACHE_ROOT": "vllm",  # vLLM's torch.compile artefacts and its own caches
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",  # FlashInfer JIT modules (not FLASHINFER_CUBIN_DIR: the wheel's)
    "CUDA_CACHE_PATH": "cuda",  # the driver's PTX JIT cache (SM12x kernels shipped as PTX)
    # The rest of the GPU stack's run-time compilers; each name is one the installed package reads
    # (the GPU-stack rehearsal checks that against the real wheels).
    "TILELANG_CACHE_DIR": "tilelang",  # the fork's DeepSeek-V4 mHC kernels (TileLang JIT)
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "TORCH_EXTENSIONS_DIR": "torch-extensions",
    "CUTE_DSL_CACHE_DIR": "cute-dsl",  # CuTe DSL kernels (FlashInfer, vLLM's FA4)
    "QUACK_CACHE_DIR": "quack",
    "CUDA_TILE_CACHE_DIR": "cuda-tile",
    "CUDNN_FRONTEND_GEMM_KERNEL_CACHE": "cudnn-frontend",
}


def cache_key(lock_digest: str, engine_digest: str) -> str:
    return f"{lock_digest[:12]}-{engine_digest[:12]}"


def cache_dir(lock_digest: str, engine_digest: str, root: Path | None = None) -> Path:
    """The folder of one stack + engine configuration's caches (one subfolder per tool, CACHE_ENV)."""
    return (root or appliance_home() / "cache") / cache_key(lock_digest, engine_digest)


def profile_cache_dir(profile: Profile, root: Path | None = None) -> Path:
    """The caches a serve of `profile` uses: keyed by its channel's lock (an edit of another channel keeps them
    warm, run/launch.py) and its engine digest. Bundles and the warm-start measurement name the same folder."""
    from appliance.lock import channel_lock
    from appliance.profile.loader import engine_digest

    return cache_dir(channel_lock(profile.engine.channel, profile.hardware.target).digest, engine_digest(profile), root)


def inventory(folder: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (size, mtime_ns) of every file under `folder`: what the caches hold, so that two
    inventories say what a start wrote (a warm start that compiled nothing writes nothing new)."""
    out: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return out
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            st = path.stat()
            out[path.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Per tool subfolder (vllm, inductor, ...): (files, bytes) created or rewritten between two inventories."""
    out: dict[str, tuple[int, int]] = {}
    for rel, (size, mtime) in after.items():
        if before.get(rel) != (size, mtime):
            sub = rel.split("/", 1)[0]
            files, total = out.get(sub, (0, 0))
            out[sub] = (files + 1, total + size)
    return out


def cache_env(lock_digest: str, engine_digest: str, root: Path | None = None) -> dict[str, str]:
    base = cache_dir(lock_digest, engine_digest, root)
    env = {}
    for var, sub in CACHE_ENV.items():
        path = base / sub
        make_dir(path, "APPLIANCE_HOME")
        env[var] = str(path)
    return env
