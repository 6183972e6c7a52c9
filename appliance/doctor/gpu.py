"""What GPUs this machine has: NVML (nvidia-ml-py) first, `nvidia-smi` as the fallback."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: str  # "12.0"
    driver: str
    memory_gib: float

    @property
    def sm(self) -> str:
        return "sm" + self.compute_capability.replace(".", "")


@dataclass(frozen=True)
class GpuProbe:
    gpus: list[GpuInfo]
    source: str  # "nvml", "nvidia-smi", or "none"
    error: str | None = None


def _nvml() -> GpuProbe:
    import pynvml  # from nvidia-ml-py

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            try:
                mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / 1024**3
            except pynvml.NVMLError:
                mem = 0.0  # GB10's unified memory is not reported as device memory
            gpus.append(GpuInfo(i, name, f"{major}.{minor}", driver, round(mem, 1)))
        return GpuProbe(gpus, "nvml")
    finally:
        pynvml.nvmlShutdown()


def _smi() -> GpuProbe:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version,memory.total",
         "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=True).stdout
    gpus = []
    for line in out.strip().splitlines():
        idx, name, cc, driver, mem = (x.strip() for x in line.split(","))
        mem_gib = float(mem) / 1024 if mem.replace(".", "").isdigit() else 0.0
        gpus.append(GpuInfo(int(idx), name, cc, driver, round(mem_gib, 1)))
    return GpuProbe(gpus, "nvidia-smi")


def probe_gpus() -> GpuProbe:
    errors = []
    try:
        return _nvml()
    except Exception as exc:
        errors.append(f"NVML: {exc}")
    if shutil.which("nvidia-smi"):
        try:
            return _smi()
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            errors.append(f"nvidia-smi: {exc}")
    else:
        errors.append("nvidia-smi: not on PATH")
    return GpuProbe([], "none", "; ".join(errors))
