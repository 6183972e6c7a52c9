"""Facts about checkpoints and GPUs (profiles/catalogue.yaml), used when the real files are absent."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from appliance.bounds import show
from appliance.errors import ApplianceError
from appliance.paths import profiles_dir
from appliance.yamlstrict import load_data_table

GIB = 1024**3


class CheckpointFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    family: Literal["deepseek-v4", "smollm2", "llama", "other"]
    quantization: Literal["mxfp4", "nvfp4", "none"]
    size_bytes: int
    dspark_block_size: int | None = None
    mtp_heads: int = 0
    attention_heads: int | None = None
    """Query heads of the model: TP divides them, so heads per rank follow from parallel.tensor (P1)."""
    confirmed: str = ""
    unconfirmed: list[str] = []
    """Facts of this entry taken from outside the seed (a model page): rules warn on them rather than refuse
    until the checkpoint's own files say so (K3)."""
    source: str = "catalogue"
    """Where these facts were read: the catalogue, or a checkpoint's config.json."""

    @property
    def size_gib(self) -> float:
        return self.size_bytes / GIB


class GpuFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    arch: Literal["sm120", "sm121", "cpu"]
    compute_capability: str | None
    memory_gib: float | None
    host_arch: str
    names: list[str]
    unified_memory: bool = False
    min_mem_available_gib: float | None = None
    nccl_roce_bad_kernels: list[str] = []
    """Kernel releases (fnmatch patterns) on which NCCL over RoCE is reported to fail on this GPU's hosts (K35)."""
    engine_memory_gib: float | None = None
    """The memory gpu_memory_utilization is a fraction of, where it is not memory_gib (GB10: the OS shares the
    128 GB); fitted by rule K20 to the larger of the seed's two KV figures, which this project reads as GB10's (the
    seed names neither figure's hardware: an inference)."""

    @property
    def budget_base_gib(self) -> float | None:
        return self.engine_memory_gib or self.memory_gib

    @property
    def is_sm12x(self) -> bool:
        return self.arch in ("sm120", "sm121")


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoints: dict[str, CheckpointFacts]
    gpus: dict[str, GpuFacts]

    def checkpoint(self, checkpoint_id: str) -> CheckpointFacts:
        try:
            return self.checkpoints[checkpoint_id]
        except KeyError:
            raise ApplianceError(
                f"model.checkpoint={show(checkpoint_id)} is not in the catalogue",
                field="model.checkpoint",
                value=checkpoint_id,
                fix="use one of: " + ", ".join(self.checkpoints)
                + " (or add its facts to profiles/catalogue.yaml)",
                reason="rules K2, K3 and K20 need the checkpoint's DSpark block size, MTP heads and size",
            ) from None


@cache
def load_catalogue(path: Path | None = None) -> Catalogue:
    return load_data_table(path or profiles_dir() / "catalogue.yaml", Catalogue, "hardware catalogue")
