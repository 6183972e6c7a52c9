"""The bundle's manifest: what it holds, for which profile and lock, and every file with its size and sha256.

`verify` re-reads every file against it: a missing, truncated, corrupt or foreign file is named. A bundle holds
no secret (HF_TOKEN is not needed offline and never written) and is valid only for the lock it was made with.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.errors import ApplianceError
from appliance.paths import read_capped

MANIFEST = "manifest.json"
SCHEMA = 1
KIND = "appliance-bundle"
HASH_WORKERS = 4


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Strict):
    path: str = Field(min_length=1)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    link: str | None = None
    """For a symlink (a hub snapshot's links into ../../blobs): its target; size and hash are the target's."""


class Checkpoint(_Strict):
    id: str
    revision: str | None
    layout: Literal["hub", "folder"]
    """hub: huggingface_hub's cache layout (blobs, snapshots/<commit>, trees/<commit>.json); folder: a plain
    checkpoint folder (a model the appliance prepared)."""
    path: str
    files: int
    bytes: int


class Image(_Strict):
    tag: str
    id: str
    archive: str
    """`docker save` output (an OCI image layout archive)."""


class Component(_Strict):
    path: str
    files: int
    bytes: int
    note: str = ""


class Manifest(_Strict):
    schema_version: int = Field(SCHEMA, alias="schema")
    kind: Literal["appliance-bundle"] = KIND
    created: str
    appliance: str
    profile: str
    overrides: list[str] = []
    """The --set overrides the bundle was made with: the engine digest (the caches' key) depends on them."""
    profile_digest: str
    engine_digest: str
    lock_digest: str
    """The digest of the profile's channel (appliance.lock.ChannelLock.digest): the caches' key, the image's."""
    channel: str
    """The profile's engine channel (versions.json `channels`)."""
    target: Literal["gpu", "cpu"]
    checkpoint: Checkpoint
    image: Image | None
    wheelhouse: Component | None
    caches: Component
    files: list[FileEntry]
    total_bytes: int

    def entry_map(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def hash_all(root: Path, paths: list[str], known: dict[str, str]) -> list[FileEntry]:
    """FileEntry for each path under root; `known` digests (already verified, e.g. an LFS blob's sha256 that the
    snapshot check just matched) are not recomputed."""

    def one(rel: str) -> FileEntry:
        path = root / rel
        link = None
        if path.is_symlink():
            import os

            link = os.readlink(path)
        size = path.stat().st_size
        target = path.resolve().relative_to(root.resolve()).as_posix() if link else rel
        digest = known.get(target) or sha256_file(path)
        return FileEntry(path=rel, size=size, sha256=digest, link=link)

    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        return list(pool.map(one, sorted(paths)))


def load_manifest(bundle: Path) -> Manifest:
    path = bundle / MANIFEST
    raw = read_capped(path, "BUNDLE", 256 * 1024 * 1024, "bundle manifest")
    try:
        return Manifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise ApplianceError(f"{path} is not an appliance bundle manifest: {str(exc)[:300]}", field="BUNDLE",
                             value=str(bundle), fix="give the folder `appliance bundle create` wrote") from None


@dataclass(frozen=True)
class Problem:
    path: str
    detail: str


def verify_files(bundle: Path, manifest: Manifest) -> list[Problem]:
    """Every file of the manifest present with its size and sha256, each link pointing where it did, and no
    file the manifest does not list."""
    listed = manifest.entry_map()

    def one(entry: FileEntry) -> Problem | None:
        path = bundle / entry.path
        if entry.link is not None:
            import os

            if not path.is_symlink() or os.readlink(path) != entry.link:
                return Problem(entry.path, f"not the link to {entry.link} it was")
        if not path.exists():
            return Problem(entry.path, "missing")
        size = path.stat().st_size
        if size != entry.size:
            how = "truncated" if size < entry.size else "longer"
            return Problem(entry.path, f"{size:,} bytes, {entry.size:,} expected ({how})")
        if entry.link is None and sha256_file(path) != entry.sha256:
            return Problem(entry.path, "sha256 differs (corrupt)")
        return None

    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        problems = [p for p in pool.map(one, manifest.files) if p is not None]
    for path in sorted(bundle.rglob("*")):
        rel = path.relative_to(bundle).as_posix()
        if rel != MANIFEST and (path.is_file() or path.is_symlink()) and rel not in listed:
            problems.append(Problem(rel, "not in the manifest (added after the bundle was made)"))
    return problems


def as_json(manifest: Manifest) -> dict[str, Any]:
    return manifest.model_dump(mode="json", by_alias=True)
