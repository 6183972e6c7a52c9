"""Where huggingface_hub keeps its cache, read the way the library reads its environment (at call time here:
a test or a `bundle apply` may point HF_HOME elsewhere after import)."""

from __future__ import annotations

import os
from pathlib import Path


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def hf_hub_cache() -> Path:
    return Path(os.environ.get("HF_HUB_CACHE") or hf_home() / "hub")


def hf_offline(*names: str) -> bool:
    """Whether HF_HUB_OFFLINE (or another of `names`) is set the way huggingface_hub reads it: 1/true/yes/on."""
    return any(os.environ.get(n, "").strip().lower() in ("1", "true", "yes", "on") for n in ("HF_HUB_OFFLINE", *names))


def repo_folder(checkpoint: str, cache: Path | None = None) -> Path:
    """The checkpoint's folder in the hub cache, named by huggingface_hub's own function."""
    from huggingface_hub.file_download import repo_folder_name

    return (cache or hf_hub_cache()) / repo_folder_name(repo_id=checkpoint, repo_type="model")
