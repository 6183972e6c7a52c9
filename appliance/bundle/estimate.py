"""`appliance bundle create PROFILE --estimate`: how large the bundle of a profile will be, before making it.

Each part says where its figure comes from. The checkpoint's is the real one when it is on disk (the hub's
listing), else the catalogue's. The GPU image and its wheelhouse cannot be built here (no CUDA base image, no
SM12x machine): their figures are the GPU-stack rehearsal's measurements (docs/gpu-rehearsal.md: the locked amd64
stack is a 4.1 GB wheelhouse that installs to an 8.3 GB venv) plus the estimates docs/containers.md gives for the
CUDA runtime base and the run-time toolchain; the GPU compile/JIT caches are unmeasured without SM12x, so their
budget is the Kubernetes volume the appliance sizes for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.catalogue import load_catalogue
from appliance.profile.model import Profile

GB = 10**9


@dataclass(frozen=True)
class Part:
    name: str
    bytes: int
    source: str


# Measured or estimated once, each with its source (none of these is a version: versions live in versions.json).
GPU_STACK_VENV = 8.3 * GB  # docs/gpu-rehearsal.md: the locked amd64 GPU stack installed (measured)
GPU_WHEELHOUSE = 4.1 * GB  # docs/gpu-rehearsal.md: its wheelhouse, 201 wheels (measured)
CUDA_RUNTIME_BASE = 3.0 * GB  # estimate: the CUDA 13 runtime base image, uncompressed (not pullable here)
GPU_TOOLCHAIN = 1.5 * GB  # docs/containers.md: nvcc/ptxas/headers/g++ add "roughly 1-2 GB" (estimate)
CPU_IMAGE = 3.0 * GB  # docs/containers.md: the CPU image "is ≈ 3 GB" (measured by the image tests)
CPU_WHEELHOUSE = 0.97 * GB  # build/wheelhouse-cpu as scripts/build-cpu-image.sh made it (measured: 965 MB)


def estimate(profile: Profile, checkpoint_bytes: int | None = None, checkpoint_source: str = "") -> list[Part]:
    from appliance.render.k8s import COMPILE_CACHE_GIB

    facts = load_catalogue().checkpoint(profile.model.checkpoint)
    model = Part("checkpoint", checkpoint_bytes if checkpoint_bytes is not None else facts.size_bytes,
                 checkpoint_source or f"the catalogue: {facts.confirmed}")
    if profile.hardware.target == "gpu":
        image = Part("image", int(CUDA_RUNTIME_BASE + GPU_STACK_VENV + GPU_TOOLCHAIN),
                     "CUDA runtime base (estimate) + the locked GPU stack as the rehearsal installs it (measured, "
                     "amd64) + the run-time toolchain (estimate); the fork's vLLM wheel and FlashInfer's JIT cache "
                     "wheel are not in the rehearsal's figure")
        wheels = Part("wheelhouse", int(GPU_WHEELHOUSE), "the GPU-stack rehearsal's wheelhouse (measured, amd64)")
        caches = Part("compile/JIT caches", COMPILE_CACHE_GIB * 1024**3,
                      "unmeasured without SM12x: the budget `appliance k8s` sizes the compile-cache volume for")
    else:
        image = Part("image", int(CPU_IMAGE), "the CPU image (docs/containers.md)")
        wheels = Part("wheelhouse", int(CPU_WHEELHOUSE), "the CPU image's wheelhouse (measured)")
        caches = Part("compile/JIT caches", 100 * 1024**2, "estimate (measure with a bundle: a few MB eager, more "
                                                            "with torch.compile)")
    return [model, image, wheels, caches]


def render(profile: Profile, parts: list[Part]) -> str:
    total = sum(p.bytes for p in parts)
    lines = [f"bundle of {profile.name}: about {total / GB:.1f} GB ({total:,} bytes), per node that applies it"]
    lines += [f"  {p.name:<20} {p.bytes / GB:8.2f} GB  {p.source}" for p in parts]
    return "\n".join(lines)
