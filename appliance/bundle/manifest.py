"""The bundle's manifest: what it holds, for which profile and lock, and every file with its size and sha256.

`verify` re-reads every file against it: a missing, truncated, corrupt or foreign file is named. A bundle holds
no secret (HF_TOKEN is not needed offline and never written) and is valid only for the lock it was made with.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from appliance.bounds import CHANNEL_MAX_CHARS, CHANNEL_PATTERN
from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.paths import read_capped
from appliance.safe_write import kind_of

MANIFEST = "manifest.json"
SCHEMA = 1
KIND = "appliance-bundle"
HASH_WORKERS = 4


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _relative(value: str) -> str:
    """A path inside the bundle, as a careful tar takes an entry: relative, `/`-separated, no `.`, `..` or empty
    part, no NUL or backslash. An absolute or climbing entry would name a file outside the bundle."""
    parts = value.split("/")
    if value.startswith("/") or "\\" in value or "\0" in value or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{value[:200]!r} is no relative path inside the bundle (an absolute path, or an empty, "
                         "`.` or `..` part)")
    return value


def _no_control(value: str) -> str:
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError(f"{value[:200]!r} holds a control character")
    return value


RelPath = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_relative)]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$"
"""A profile's name (its file's stem): one path component, never `.` or `..` (it must start with no dot)."""
REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$"
"""A hub repository id (huggingface_hub's validate_repo_id: [org/]name, no `..` or `--`), or a prepared model's."""


def _repo_id(value: str) -> str:
    if ".." in value or "--" in value:
        raise ValueError(f"{value[:200]!r} holds `..` or `--`, which no hub repository id does")
    return value


class FileEntry(_Strict):
    path: RelPath
    size: int = Field(ge=0)
    sha256: Digest
    link: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """For a symlink (a hub snapshot's links into ../../blobs): its target, relative, resolving to another entry of
    the bundle; size and hash are that entry's."""

    @model_validator(mode="after")
    def _link_inside(self) -> FileEntry:
        if self.link is not None and self.link_target() is None:
            raise ValueError(f"the link {self.path[:200]!r} -> {self.link[:200]!r} points outside the bundle "
                             "(absolute, or climbing out with `..`)")
        return self

    def link_target(self) -> str | None:
        """The bundle path the link resolves to; None for no link, or one that leads outside the bundle."""
        if self.link is None or self.link.startswith("/") or "\0" in self.link:
            return None
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(self.path), self.link))
        return None if joined == ".." or joined.startswith("../") or joined in (".", "") else joined


class Checkpoint(_Strict):
    id: Annotated[str, Field(pattern=REPO_ID), AfterValidator(_repo_id)]
    revision: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None
    layout: Literal["hub", "folder"]
    """hub: huggingface_hub's cache layout (blobs, snapshots/<commit>, trees/<commit>.json); folder: a plain
    checkpoint folder (a model the appliance prepared)."""
    path: RelPath
    files: int
    bytes: int


class Image(_Strict):
    tag: Annotated[str, Field(max_length=512), AfterValidator(_no_control)]
    id: str
    archive: RelPath
    """`docker save` output (an OCI image layout archive)."""


class Component(_Strict):
    path: RelPath
    files: int
    bytes: int
    note: str = ""


class Manifest(_Strict):
    schema_version: int = Field(SCHEMA, alias="schema")
    kind: Literal["appliance-bundle"] = KIND
    created: str
    appliance: str
    profile: str = Field(pattern=NAME)
    overrides: list[Annotated[str, Field(max_length=4096), AfterValidator(_no_control)]] = []
    """The --set overrides the bundle was made with: the engine digest (the caches' key) depends on them."""
    profile_digest: Digest
    engine_digest: Digest
    lock_digest: Digest
    """The digest of the profile's channel (appliance.lock.ChannelLock.digest): the caches' key, the image's."""
    channel: str = Field(pattern=CHANNEL_PATTERN, max_length=CHANNEL_MAX_CHARS)
    """The profile's engine channel (versions.json `channels`)."""
    target: Literal["gpu", "cpu"]
    checkpoint: Checkpoint
    image: Image | None
    wheelhouse: Component | None
    caches: Component
    files: list[FileEntry]
    total_bytes: int

    @model_validator(mode="after")
    def _components_where_create_puts_them(self) -> Manifest:
        """Each part where `create` writes it: apply reads a part's folder and nothing else, so a part named
        anywhere else (another folder of the bundle, or a climb out of it) is no bundle of ours."""
        ckpt = self.checkpoint.path.split("/")
        expected = {"checkpoint.path": (len(ckpt) == 3 and ckpt[:2] == ["model", self.checkpoint.layout]),
                    "caches.path": self.caches.path.startswith("caches/") and self.caches.path.count("/") == 1,
                    "wheelhouse.path": self.wheelhouse is None or self.wheelhouse.path == "wheelhouse",
                    "image.archive": self.image is None or (self.image.archive.startswith("image/")
                                                            and self.image.archive.count("/") == 1)}
        wrong = [name for name, ok in expected.items() if not ok]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: not where `appliance bundle create` puts it (model/<layout>/NAME, "
                             "caches/<lock 12>-<engine 12>, wheelhouse, image/NAME.tar)")
        return self

    def entry_map(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def entries_under(self, folder: str) -> list[FileEntry]:
        return [f for f in self.files if f.path.startswith(folder + "/")]


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket, a folder or a symlink where a regular file was expected."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def sha256_file(path: Path) -> str:
    """The sha256 of a regular file; NotRegular for anything else (opened without following a link and without
    blocking, so a FIFO put in the bundle is refused rather than waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotRegular(kind)
        os.set_blocking(fd, True)
        h = hashlib.sha256()
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()
    finally:
        if fd >= 0:
            os.close(fd)


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
        digest = known.get(target) or sha256_file(root / target)  # a link: its target, inside the bundle
        return FileEntry(path=rel, size=size, sha256=digest, link=link)

    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        return list(pool.map(one, sorted(paths)))


def load_manifest(bundle: Path) -> Manifest:
    path = bundle / MANIFEST
    raw = read_capped(path, "BUNDLE", 256 * 1024 * 1024, "bundle manifest")
    from appliance.jsonstrict import JsonError, loads

    try:
        return Manifest.model_validate(loads(raw, str(path)))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top"
        raise ApplianceError(f"{path} is not an appliance bundle manifest: {where}: {first['msg'][:300]}",
                             field=f"manifest.json {where}", value=str(bundle),
                             fix="give the folder `appliance bundle create` wrote, unedited",
                             reason="every name and path of the manifest becomes a path on this machine: one that "
                                    "leads outside the bundle or its targets is refused before anything is read"
                             ) from None
    except JsonError as exc:
        raise ApplianceError(f"{path} is not an appliance bundle manifest: {exc.problem}", field="BUNDLE",
                             value=str(bundle), fix="give the folder `appliance bundle create` wrote") from None


@dataclass(frozen=True)
class Problem:
    path: str
    detail: str


def verify_files(bundle: Path, manifest: Manifest) -> list[Problem]:
    """Every file of the manifest present with its size and sha256, each link pointing where it did, and no
    file the manifest does not list."""
    listed = manifest.entry_map()
    real = Path(os.path.realpath(bundle))

    def one(entry: FileEntry) -> Problem | None:
        path = bundle / entry.path
        if Path(os.path.realpath(path.parent)) != real.joinpath(*entry.path.split("/")[:-1]):
            return Problem(entry.path, "reached through a symlinked folder (a folder of the bundle leads elsewhere)")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return Problem(entry.path, "missing")
        except OSError as exc:
            return Problem(entry.path, f"cannot be read: {exc.strerror}")
        if entry.link is not None:
            target = listed.get(entry.link_target() or "")
            if target is None or target.link is not None:
                return Problem(entry.path, f"the link to {entry.link} leads to no file of the bundle")
            if not stat.S_ISLNK(st.st_mode) or os.readlink(path) != entry.link:
                return Problem(entry.path, f"not the link to {entry.link} it was")
            if (target.size, target.sha256) != (entry.size, entry.sha256):
                return Problem(entry.path, f"listed with another size or sha256 than {target.path}, its target")
            return None  # the target is hashed as its own entry
        kind = kind_of(st.st_mode)
        if kind is not None:
            return Problem(entry.path, f"is {kind}, not the regular file it was")
        if st.st_size != entry.size:
            how = "truncated" if st.st_size < entry.size else "longer"
            return Problem(entry.path, f"{st.st_size:,} bytes, {entry.size:,} expected ({how})")
        try:
            digest = sha256_file(path)
        except NotRegular as exc:
            return Problem(entry.path, f"is {exc.kind}, not the regular file it was")
        except OSError as exc:
            return Problem(entry.path, f"cannot be read: {exc.strerror}")
        return None if digest == entry.sha256 else Problem(entry.path, "sha256 differs (corrupt)")

    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        problems = [p for p in pool.map(one, manifest.files) if p is not None]
    for dirpath, dirs, files in os.walk(bundle):  # never into a symlinked folder: it is an entry of its own
        here = Path(dirpath)
        for name in sorted([*(d for d in dirs if (here / d).is_symlink()), *files]):
            rel = (here / name).relative_to(bundle).as_posix()
            if rel != MANIFEST and rel not in listed:
                kind = kind_of(os.lstat(here / name).st_mode)
                what = f"{kind} " if kind is not None else ""
                problems.append(Problem(rel, f"{what}not in the manifest (added after the bundle was made)".strip()))
    return problems


def as_json(manifest: Manifest) -> JsonObject:
    return manifest.model_dump(mode="json", by_alias=True)
