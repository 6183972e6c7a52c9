"""Where the checkpoint is (checked complete on disk, W3), and the facts read from it (config.json, the safetensors
index).

When the checkpoint is on disk, K2/K3/K20 use its real `dspark_block_size`, MTP layers and
`total_size` rather than the catalogue's figures.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from appliance.catalogue import CheckpointFacts
from appliance.errors import ApplianceError
from appliance.paths import appliance_home
from appliance.weights.hub import hf_home, hf_hub_cache, hf_offline, repo_folder
from appliance.weights.snapshot import SnapshotCheck, check_folder, check_hub_snapshot, resume_hint

MAX_CONFIG_BYTES = 16 << 20
"""A checkpoint's config.json is KiBs."""
MAX_INDEX_BYTES = 256 << 20
"""A weight index lists every tensor: MBs for DeepSeek-V4."""

__all__ = ["Located", "hf_home", "hf_hub_cache", "hf_offline", "in_hf_cache", "locate", "prepared_model_dir",
           "read_facts"]


def prepared_model_dir(checkpoint: str) -> Path:
    """Models the appliance prepares itself (the cpu-smoke conversion) live here."""
    return appliance_home() / "models" / checkpoint.split("/")[-1]


@dataclass(frozen=True)
class Located:
    """A checkpoint found on disk, and what its check found (complete, or `locate` would have refused it)."""

    folder: Path
    check: SnapshotCheck
    origin: Literal["APPLIANCE_MODEL_DIR", "hub cache", "prepared"]


def in_hf_cache(checkpoint: str, revision: str, cache: Path | None = None) -> bool:
    """Whether anything of `revision` is in the hub cache: its snapshot folder, or the listing huggingface_hub
    records when a download of it starts (a download cut before the first file landed leaves only that)."""
    repo = repo_folder(checkpoint, cache)
    return (repo / "snapshots" / revision).is_dir() or (repo / "trees" / f"{revision}.json").is_file()


def locate(checkpoint: str, revision: str | None, model_dir: Path | None, *, cache: Path | None = None,
           deep: bool = True, stamp_root: Path | None = None, profile_name: str | None = None) -> Located | None:
    """APPLIANCE_MODEL_DIR, else the hub cache at `revision`, else a model the appliance prepared; None = not on
    disk. `cache` is the hub cache (None: HF_HUB_CACHE / HF_HOME's). What is found is checked (W3): an incomplete or
    damaged one is refused (ApplianceError, exit 2) with what is missing and how to resume, never returned. `deep`
    hashes the files (stamps skip those hashed before)."""
    resume = resume_hint(profile_name)
    if model_dir is not None:
        if not (model_dir / "config.json").is_file():
            raise ApplianceError(
                f"APPLIANCE_MODEL_DIR={model_dir} holds no config.json",
                field="APPLIANCE_MODEL_DIR", value=str(model_dir),
                fix="point it at a checkpoint folder (with config.json and the weights), or unset it to use the "
                    "HF cache",
                reason="the engine would start, fail to load and be restarted in a loop",
            )
        check = check_folder(checkpoint, revision, model_dir, deep=deep, stamp_root=stamp_root)
        if not check.complete:
            raise check.refusal(f"complete the folder APPLIANCE_MODEL_DIR={model_dir} (copy what is named again), "
                                "or unset it to use the HF cache")
        return Located(model_dir, check, "APPLIANCE_MODEL_DIR")
    if revision is not None and in_hf_cache(checkpoint, revision, cache):
        check = check_hub_snapshot(checkpoint, revision, cache, deep=deep, stamp_root=stamp_root)
        if not check.complete or check.folder is None:
            raise check.refusal(resume)
        return Located(check.folder, check, "hub cache")
    prepared = prepared_model_dir(checkpoint)
    if (prepared / "config.json").is_file():
        check = check_folder(checkpoint, None, prepared, deep=deep, stamp_root=stamp_root)
        if not check.complete:
            raise check.refusal(f"prepare it again (remove {prepared} and run `appliance smoke-model`)")
        return Located(prepared, check, "prepared")
    return None


def read_facts(model_dir: Path, fallback: CheckpointFacts) -> CheckpointFacts:
    """Facts from the checkpoint's own files; what they do not say keeps the catalogue's value."""
    from appliance.jsonstrict import load_file

    # The checkpoint's own files, read strictly and bounded (a FIFO or a 10 GB file there must not stall a start).
    config = load_file(model_dir / "config.json", "model_dir", MAX_CONFIG_BYTES, "checkpoint config.json")
    if not isinstance(config, dict):
        raise ApplianceError(f"{model_dir}/config.json is not a JSON object", field="model_dir",
                             value=str(model_dir), fix="re-download the checkpoint")
    from appliance.profile.checkpoint_facts import mtp_heads_from_index, quantization_from_config

    block = config.get("dspark_block_size")
    # Without a weight index: a DSpark checkpoint keeps its draft in mtp.* weights but has no MTP heads (K3).
    mtp = 0 if block else int(config.get("num_nextn_predict_layers") or 0)
    size = fallback.size_bytes
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        with contextlib.suppress(ApplianceError, ValueError, KeyError, TypeError, AttributeError):
            data = load_file(index, "model_dir", MAX_INDEX_BYTES, "weight index")
            size = int(data["metadata"]["total_size"])
            mtp = mtp_heads_from_index(data["weight_map"].keys())  # the seed's evidence, not config.json
    else:
        weights = list(model_dir.glob("*.safetensors"))
        if weights:
            size = sum(w.stat().st_size for w in weights)
    return fallback.model_copy(update={
        "dspark_block_size": block, "mtp_heads": mtp, "size_bytes": size,
        "quantization": quantization_from_config(config) or fallback.quantization,
        "source": f"config.json at {model_dir}", "unconfirmed": [],  # the checkpoint's own files now say
    })
