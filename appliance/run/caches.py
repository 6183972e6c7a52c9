"""Persistent compile/JIT caches under one root, keyed by lock digest + profile digest.

A cache written by another stack (other torch/triton/FlashInfer) or another profile (other
shapes, graph modes) is never reused: the key changes with either. The HF cache is separate
and shared: weights do not depend on the stack.
"""

from __future__ import annotations

from pathlib import Path

from appliance.paths import appliance_home

# env var -> subfolder; each tool reads its own variable.
CACHE_ENV = {
    "VLLM_CACHE_ROOT": "vllm",  # vLLM's torch.compile artefacts and its own caches
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",  # FlashInfer JIT modules
    "CUDA_CACHE_PATH": "cuda",  # the driver's PTX JIT cache (SM12x kernels shipped as PTX)
}


def cache_key(lock_digest: str, profile_digest: str) -> str:
    return f"{lock_digest[:12]}-{profile_digest[:12]}"


def cache_env(lock_digest: str, profile_digest: str, root: Path | None = None) -> dict[str, str]:
    base = (root or appliance_home() / "cache") / cache_key(lock_digest, profile_digest)
    env = {}
    for var, sub in CACHE_ENV.items():
        path = base / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    return env
