"""Where the checkpoint is, and the facts read from it (config.json, the safetensors index).

When the checkpoint is on disk, K2/K3/K20 use its real `dspark_block_size`, MTP layers and
`total_size` rather than the catalogue's figures.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from appliance.catalogue import CheckpointFacts
from appliance.errors import ApplianceError
from appliance.paths import appliance_home

MAX_CONFIG_BYTES = 16 << 20
"""A checkpoint's config.json is KiBs."""
MAX_INDEX_BYTES = 256 << 20
"""A weight index lists every tensor: MBs for DeepSeek-V4."""


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def hf_offline(*names: str) -> bool:
    """Whether HF_HUB_OFFLINE (or another of `names`) is set the way huggingface_hub reads it: 1/true/yes/on."""
    return any(os.environ.get(n, "").strip().lower() in ("1", "true", "yes", "on") for n in ("HF_HUB_OFFLINE", *names))


def hf_hub_cache() -> Path:
    return Path(os.environ.get("HF_HUB_CACHE") or hf_home() / "hub")


def prepared_model_dir(checkpoint: str) -> Path:
    """Models the appliance prepares itself (the cpu-smoke conversion) live here."""
    return appliance_home() / "models" / checkpoint.split("/")[-1]


def in_hf_cache(checkpoint: str, revision: str | None, cache: Path | None = None) -> Path | None:
    """The snapshot folder of `checkpoint` in the HF cache (layout models--org--name/snapshots/REV)."""
    repo = (cache or hf_hub_cache()) / f"models--{checkpoint.replace('/', '--')}"
    if not repo.is_dir():
        return None
    rev = revision
    if rev is None:
        ref = repo / "refs" / "main"
        rev = _ref(ref)
    if rev is None:
        return None
    snapshot = repo / "snapshots" / rev
    return snapshot if (snapshot / "config.json").is_file() else None


def _ref(ref: Path) -> str | None:
    """The revision a cache ref names (a commit hash); None for anything else (a FIFO, a folder, a path)."""
    import re

    from appliance.paths import read_capped

    try:
        text = read_capped(ref, "HF cache", 4096, "cache ref").decode("ascii", "replace").strip()
    except ApplianceError:
        return None
    return text if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}", text) else None


def locate(checkpoint: str, revision: str | None, model_dir: Path | None) -> Path | None:
    """APPLIANCE_MODEL_DIR, else the HF cache, else a model the appliance prepared; None = not on disk."""
    if model_dir is not None:
        if not (model_dir / "config.json").is_file():
            raise ApplianceError(
                f"APPLIANCE_MODEL_DIR={model_dir} holds no config.json",
                field="APPLIANCE_MODEL_DIR", value=str(model_dir),
                fix="point it at a checkpoint folder (with config.json and the weights), or unset it to use the "
                    "HF cache",
                reason="the engine would start, fail to load and be restarted in a loop",
            )
        return model_dir
    found = in_hf_cache(checkpoint, revision)
    if found:
        return found
    prepared = prepared_model_dir(checkpoint)
    return prepared if (prepared / "config.json").is_file() else None


def read_facts(model_dir: Path, fallback: CheckpointFacts) -> CheckpointFacts:
    """Facts from the checkpoint's own files; what they do not say keeps the catalogue's value."""
    from appliance.jsonstrict import load_file

    # The checkpoint's own files, read strictly and bounded (a FIFO or a 10 GB file there must not stall a start).
    config = load_file(model_dir / "config.json", "APPLIANCE_MODEL_DIR", MAX_CONFIG_BYTES, "checkpoint config.json")
    if not isinstance(config, dict):
        raise ApplianceError(f"{model_dir}/config.json is not a JSON object", field="APPLIANCE_MODEL_DIR",
                             value=str(model_dir), fix="re-download the checkpoint")
    from appliance.profile.checkpoint_facts import mtp_heads_from_index, quantization_from_config

    block = config.get("dspark_block_size")
    # Without a weight index: a DSpark checkpoint keeps its draft in mtp.* weights but has no MTP heads (K3).
    mtp = 0 if block else int(config.get("num_nextn_predict_layers") or 0)
    size = fallback.size_bytes
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        with contextlib.suppress(ApplianceError, ValueError, KeyError, TypeError, AttributeError):
            data = load_file(index, "APPLIANCE_MODEL_DIR", MAX_INDEX_BYTES, "weight index")
            size = int(data["metadata"]["total_size"])
            mtp = mtp_heads_from_index(data["weight_map"].keys())  # the seed's evidence, not config.json
    else:
        weights = list(model_dir.glob("*.safetensors"))
        if weights:
            size = sum(w.stat().st_size for w in weights)
    return fallback.model_copy(update={
        "dspark_block_size": block, "mtp_heads": mtp, "size_bytes": size,
        "quantization": quantization_from_config(config) or fallback.quantization,
        "source": f"config.json at {model_dir}",
    })
