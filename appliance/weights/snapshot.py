"""Is a checkpoint's snapshot really on disk? (W3)

"Present" means every file of the checkpoint's listing is there with the size the hub's metadata gives, and, where
the hub supplies one, the hash: sha256 for LFS files (the weights), the git blob sha1 for the rest. The listing is
the one huggingface_hub records when it downloads a revision (`trees/<commit>.json` in the repo's cache folder, or
under `.cache/huggingface/` of a `local_dir` download); huggingface_hub's own calls find the snapshot
(`snapshot_download(local_files_only=True)`) and hash the files (`utils.sha`). Where no listing was recorded (a
folder copied by hand, a model the appliance prepared), the safetensors index and each shard's header say which
files must exist and how long each one is, and an LFS blob's name (its sha256 etag) is its hash.

Hashing 160 GB takes minutes, so a file hashed once is vouched for by a stamp (weights/stamps.py) until it changes.
"""

from __future__ import annotations

import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonError, loads
from appliance.paths import read_capped
from appliance.safe_write import kind_of
from appliance.weights.hub import hf_hub_cache, repo_folder
from appliance.weights.stamps import StampBook

Kind = Literal["missing", "interrupted", "size", "hash", "unreadable"]
HASH_WORKERS = 4
"""Files hashed at once: sha256 releases the GIL, so a few threads keep a fast disk busy."""
SHOWN = 6
"""Problems named in an error message; the rest are counted (`appliance fetch-model --check` lists them all)."""

@dataclass(frozen=True)
class Expected:
    """One file a complete snapshot holds."""

    path: str
    """Relative to the snapshot folder (the repository path)."""
    size: int | None
    """Bytes, from the hub's listing or the safetensors header; None = unknown (existence only)."""
    sha256: str | None = None
    git_sha1: str | None = None

    @property
    def digest(self) -> str | None:
        return self.sha256 or self.git_sha1

    @property
    def algorithm(self) -> str:
        return "sha256" if self.sha256 else "git-sha1"

@dataclass(frozen=True)
class FileProblem:
    path: str
    kind: Kind
    detail: str

    def render(self) -> str:
        return f"{self.path}: {self.detail}"

@dataclass(frozen=True)
class SnapshotCheck:
    """What a check of one snapshot found."""

    checkpoint: str
    revision: str | None
    folder: Path | None
    """The snapshot folder; None when nothing of this revision is on disk."""
    listing: str
    """Where the list of expected files came from."""
    files: int
    total_bytes: int
    problems: tuple[FileProblem, ...] = ()
    hashed: int = 0
    """Files hashed by this check (the rest were vouched for by stamps, or not hashed: quick check)."""
    hashed_bytes: int = 0
    vouched: int = 0
    expected: tuple[Expected, ...] = field(default=(), repr=False)

    @property
    def complete(self) -> bool:
        return self.folder is not None and not self.problems

    @property
    def where(self) -> str:
        return f"{self.checkpoint}@{self.revision}" if self.revision else self.checkpoint

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.problems:
            out[p.kind] = out.get(p.kind, 0) + 1
        return out

    def summary(self) -> str:
        if self.folder is None:
            return f"{self.where}: not on disk"
        if not self.problems:
            return (f"{self.where}: complete, {self.files} files, {self.total_bytes:,} bytes ({self.hashed} hashed "
                    f"now, {self.vouched} vouched for by earlier hashing; listing: {self.listing})")
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts().items()))
        return f"{self.where}: INCOMPLETE at {self.folder}: {counts} of {self.files} files (listing: {self.listing})"

    def refusal(self, resume: str, consequence: str = "nothing started") -> ApplianceError:
        """W3: an incomplete snapshot is reported with what is missing and how to resume, and never served."""
        shown = "\n    ".join(p.render() for p in self.problems[:SHOWN])
        more = f"\n    ... and {len(self.problems) - SHOWN} more" if len(self.problems) > SHOWN else ""
        return ApplianceError(
            f"W3 {self.summary()}; {consequence}:\n    {shown}{more}",
            field="model.checkpoint", value=self.where, fix=resume,
            reason="an interrupted or damaged download looks like a checkpoint: the engine would fail to load it, "
                   "or load wrong weights, and be restarted in a loop")

def resume_hint(profile_name: str | None) -> str:
    target = f" {profile_name}" if profile_name else ""
    return (f"run `appliance fetch-model{target}` where the hub is reachable: it keeps the complete files and "
            f"fetches the missing, interrupted and damaged ones again; or `appliance sync-model{target} --to "
            "THIS-NODE` from a node whose copy is complete (`appliance fetch-model --check` lists every problem)")

# --- the listing ------------------------------------------------------------------------------------------------

def hub_listing(tree_folder: Path, revision: str) -> tuple[Expected, ...] | None:
    """The files huggingface_hub recorded for `revision` when it downloaded it; None when it recorded none."""
    from huggingface_hub._tree_cache import read_tree_cache  # the library's reader of its own record

    entries = read_tree_cache(str(tree_folder), revision)
    if entries is None:
        return None
    return tuple(Expected(path, e.lfs_size if e.lfs_size is not None else e.size, e.lfs_sha256,
                          None if e.lfs_sha256 else e.blob_id) for path, e in sorted(entries.items()))

MAX_HEADER_BYTES = 100 * 1024 * 1024
_SHARD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$")
"""A shard the index names: a file beside it (one path component, never `.`, `..` or a folder)."""


def _open_regular(path: Path) -> BinaryIO:
    """`path` (a link is followed: a hub snapshot's files are links to blobs) opened for reading without blocking
    on a FIFO; OSError naming what it is when no regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise OSError(f"is {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def safetensors_header(path: Path) -> tuple[int | None, str]:
    """(the length the file must have: 8 + its header + the end of its last tensor, "") or (None, why not): the
    header is read through the strict JSON reader and each tensor's data_offsets held to two ordered integers."""
    try:
        with _open_regular(path) as fh:
            head = fh.read(8)
            if len(head) != 8:
                return None, f"{len(head)} bytes: too short for a safetensors header"
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                return None, f"a header of {n:,} bytes declared (at most {MAX_HEADER_BYTES:,})"
            raw = fh.read(n)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    try:
        header = loads(raw, "safetensors header")
    except JsonError as exc:
        return None, f"the header is no JSON this reader takes: {exc.problem}"
    if not isinstance(header, dict):
        return None, f"the header is a JSON {type(header).__name__}, not an object"
    ends = []
    for key, value in header.items():
        if key == "__metadata__":
            continue
        offsets = value.get("data_offsets") if isinstance(value, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return None, f"tensor {key[:60]!r}: data_offsets is not two ordered byte offsets"
        ends.append(offsets[1])
    return 8 + n + max(ends, default=0), ""


def safetensors_size(path: Path) -> int | None:
    """The length a safetensors file must have; None if its header is unreadable (safetensors_header says why)."""
    return safetensors_header(path)[0]


def _index_shards(index: Path) -> list[str]:
    """The shards the index names, each a file beside it; ValueError saying why not."""
    try:
        raw = read_capped(index, "model.safetensors.index.json", MAX_HEADER_BYTES, "weight index")
    except ApplianceError as exc:
        raise ValueError(exc.message) from None
    data = loads(raw, index.name)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError("its weight_map is no object of tensor -> shard")
    names = set(weight_map.values())
    bad = sorted(repr(v)[:80] for v in names if not (isinstance(v, str) and _SHARD_NAME.match(v)))
    if bad:
        raise ValueError(f"weight_map names {bad[0]}, no shard file beside the index")
    return sorted(names)


def folder_listing(folder: Path) -> tuple[tuple[Expected, ...], list[FileProblem]]:
    """Without a recorded listing: config.json, every shard the safetensors index names (or the single
    model.safetensors), each with the size its header declares, and its sha256 where the hub cache named the blob
    after it. An index that does not parse is a problem of its own: its shards cannot be named; so is a shard
    whose header cannot be read (a 2-byte file is no complete shard), and so is a folder with no shard at all (a
    config.json alone is no checkpoint: 0 bytes of weights)."""
    names = ["config.json"]
    problems = []
    index = folder / "model.safetensors.index.json"
    if os.path.lexists(index):
        names.append(index.name)
        try:
            names += _index_shards(index)
        except ValueError as exc:
            problems.append(FileProblem(index.name, "unreadable", f"no shard list in it: {str(exc)[:300]}"))
    else:
        names += sorted(p.name for p in folder.glob("*.safetensors"))
    shards = [n for n in names if n not in ("config.json", index.name)]
    if not shards and not problems:  # config.json (and an index naming nothing): 0 bytes of weights
        where = "the index names no shard" if os.path.lexists(index) else \
            "neither model.safetensors.index.json nor any *.safetensors file is there"
        problems.append(FileProblem("*.safetensors", "missing", f"no weights: {where}"))
    out = []
    for name in names:
        path = folder / name
        size = None
        if name.endswith(".safetensors") and path.is_file():  # a FIFO or device: check_files says so, unopened
            size, why = safetensors_header(path)
            if size is None:
                problems.append(FileProblem(name, "unreadable", why))
        blob = path.resolve().name if path.is_symlink() else ""
        sha = blob if len(blob) == 64 and all(c in "0123456789abcdef" for c in blob) else None
        out.append(Expected(name, size, sha))
    return tuple(out), problems

# --- the check --------------------------------------------------------------------------------------------------

def _hash(path: Path, algorithm: str) -> str:
    from huggingface_hub.utils.sha import git_hash, sha_fileobj

    with _open_regular(path) as fh:
        return sha_fileobj(fh).hex() if algorithm == "sha256" else git_hash(fh.read())

def _interrupted(blobs: Path | None, item: Expected) -> FileProblem | None:
    """huggingface_hub downloads into blobs/<etag>.<id>.incomplete and renames it when done; a download cut by an
    error removes it, one whose process was killed leaves it behind: such a file is a download that never finished
    (huggingface_hub 2.x fetches it again whole; it does not resume a cut HTTP download)."""
    if blobs is None or not item.digest or not blobs.is_dir():
        return None
    parts = sorted(blobs.glob(f"{item.digest}*.incomplete"))
    if not parts:
        return None
    got = max(p.stat().st_size for p in parts)
    of = f" of {item.size:,}" if item.size is not None else ""
    return FileProblem(item.path, "interrupted", f"download interrupted at {got:,}{of} bytes ({parts[-1].name})")


def check_files(folder: Path, expected: tuple[Expected, ...], *, deep: bool, stamps: StampBook | None,
                blobs: Path | None = None) -> tuple[list[FileProblem], int, int, int]:
    """(problems, files hashed, bytes hashed, files vouched for) for `expected` under `folder`."""
    problems: list[FileProblem] = []
    to_hash: list[Expected] = []
    vouched = 0
    for item in expected:
        path = folder / item.path
        if not path.exists():  # a dangling symlink (the blob is gone) is missing too
            problems.append(_interrupted(blobs, item) or FileProblem(item.path, "missing", "not on disk"))
            continue
        try:
            st = path.stat()
        except OSError as exc:
            problems.append(FileProblem(item.path, "unreadable", exc.strerror or str(exc)))
            continue
        kind = kind_of(st.st_mode)
        if kind is not None:  # a FIFO or device named as a shard: never opened (it would block the check)
            problems.append(FileProblem(item.path, "unreadable", f"is {kind}, not a regular file"))
            continue
        size = st.st_size
        if item.size is not None and size != item.size:
            how = "truncated" if size < item.size else "longer than listed"
            problems.append(FileProblem(item.path, "size", f"{size:,} bytes on disk, {item.size:,} expected ({how})"))
            continue
        if not deep or not item.digest:
            continue
        if stamps is not None and stamps.vouches(item.path, item.digest):
            vouched += 1
        else:
            to_hash.append(item)

    def one(item: Expected) -> tuple[Expected, str | None, str]:
        try:
            return item, _hash(folder / item.path, item.algorithm), ""
        except OSError as exc:
            return item, None, exc.strerror or str(exc)

    hashed = hashed_bytes = 0
    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        for item, got, error in pool.map(one, to_hash):
            if got is None:
                problems.append(FileProblem(item.path, "unreadable", error))
                continue
            hashed += 1
            hashed_bytes += (folder / item.path).stat().st_size
            if got != item.digest:
                problems.append(FileProblem(item.path, "hash", f"{item.algorithm} {got[:16]}… on disk, "
                                                               f"{(item.digest or '')[:16]}… expected (corrupt)"))
                if stamps is not None:
                    stamps.forget(item.path)
            elif stamps is not None:
                stamps.record(item.path, got)
    order = {item.path: i for i, item in enumerate(expected)}
    problems.sort(key=lambda p: order.get(p.path, 0))
    return problems, hashed, hashed_bytes, vouched

def _check(checkpoint: str, revision: str | None, folder: Path, listing: tuple[Expected, ...] | None, what: str,
           *, deep: bool, stamp_root: Path | None, blobs: Path | None) -> SnapshotCheck:
    source = what if listing is not None else "the safetensors index and shard headers (no hub listing recorded)"
    expected, problems = (listing, []) if listing is not None else folder_listing(folder)
    stamps = StampBook(stamp_root, folder) if stamp_root is not None and deep else None
    found, hashed, hashed_bytes, vouched = check_files(folder, expected, deep=deep, stamps=stamps, blobs=blobs)
    problems += found
    if stamps is not None:
        stamps.save()
    total = sum(e.size or 0 for e in expected)
    return SnapshotCheck(checkpoint, revision, folder, source, len(expected), total, tuple(problems), hashed,
                         hashed_bytes, vouched, expected)

def check_hub_snapshot(checkpoint: str, revision: str, cache: Path | None = None, *, deep: bool = True,
                       stamp_root: Path | None = None) -> SnapshotCheck:
    """The snapshot of `checkpoint` at commit `revision` in the hub cache, checked against the listing
    huggingface_hub recorded at download. Never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    cache = cache or hf_hub_cache()
    storage = repo_folder(checkpoint, cache)
    listing = hub_listing(storage, revision) if storage.is_dir() else None
    recorded = f"the hub's listing recorded at download ({storage.name}/trees/{revision[:12]}….json)"
    try:
        folder = Path(snapshot_download(checkpoint, revision=revision, cache_dir=cache, local_files_only=True))
    except IncompleteSnapshotError as exc:  # the library's own existence check against its listing failed
        folder = Path(str(exc.snapshot_path))
    except LocalEntryNotFoundError:
        if listing is None:
            return SnapshotCheck(checkpoint, revision, None, "none (nothing downloaded)", 0, 0)
        folder = storage / "snapshots" / revision  # interrupted before the first file landed
        problems = [_interrupted(storage / "blobs", e) or FileProblem(e.path, "missing", "not on disk")
                    for e in listing]
        return SnapshotCheck(checkpoint, revision, folder, recorded, len(listing), sum(e.size or 0 for e in listing),
                             tuple(problems), expected=listing)
    return _check(checkpoint, revision, folder, listing, recorded, deep=deep, stamp_root=stamp_root,
                  blobs=storage / "blobs")

def check_folder(checkpoint: str, revision: str | None, folder: Path, *, deep: bool = True,
                 stamp_root: Path | None = None) -> SnapshotCheck:
    """A plain checkpoint folder (APPLIANCE_MODEL_DIR, a prepared model): the listing a `local_dir` download
    recorded for `revision` when there is one, else the safetensors index and headers."""
    from huggingface_hub._tree_cache import tree_cache_folder_for_local_dir

    listing = hub_listing(Path(tree_cache_folder_for_local_dir(str(folder))), revision) if revision else None
    return _check(checkpoint, revision, folder, listing, "the hub's listing recorded by a local_dir download",
                  deep=deep, stamp_root=stamp_root, blobs=None)


@dataclass(frozen=True)
class CachedRevision:
    commit: str
    size_on_disk: int
    refs: tuple[str, ...]


def cached_revisions(checkpoint: str, cache: Path | None = None) -> tuple[list[CachedRevision], list[str]]:
    """Every revision of `checkpoint` huggingface_hub's `scan_cache_dir` finds in the cache (an older pin's
    snapshot keeps its blobs until deleted), and what the scan found corrupt in this repository's folder."""
    from huggingface_hub import scan_cache_dir

    cache = cache or hf_hub_cache()
    if not cache.is_dir():
        return [], []
    info = scan_cache_dir(cache)
    revisions = [CachedRevision(r.commit_hash, r.size_on_disk, tuple(sorted(r.refs)))
                 for repo in info.repos if repo.repo_id == checkpoint and repo.repo_type == "model"
                 for r in sorted(repo.revisions, key=lambda r: r.commit_hash)]
    folder = repo_folder(checkpoint, cache).name
    corrupt = [str(w) for w in info.warnings if folder in str(w)]
    return revisions, corrupt
