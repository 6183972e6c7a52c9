"""`appliance bundle create PROFILE --out DIR`: what a serve of PROFILE needs without a network, in one folder.

    model/      the pinned checkpoint, checked complete first (W3): huggingface_hub's cache layout for a hub
                snapshot (blobs, snapshots/<commit>, trees/<commit>.json), or the folder of a prepared model
    image/      the channel's image, `docker save` (an OCI image layout archive)
    wheelhouse/ the wheels the image was built from (offline rebuilds, `pip install --no-index`)
    caches/     the compile/JIT caches keyed for this profile (lock digest + engine digest, W5)
    versions.json, profile.json, manifest.json (every file with its size and sha256)

It is written aside (DIR.partial) and renamed into place at the end: an interrupted create leaves no bundle that
looks whole. Immutable inputs (wheels, content-addressed blobs) are hard-linked when DIR is on the same file system
(copy the folder to move it); everything else is copied.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance import __version__
from appliance.bundle.manifest import MANIFEST, Checkpoint, Component, Image, Manifest, as_json, hash_all
from appliance.errors import ApplianceError
from appliance.lock import ChannelLock, channel_lock
from appliance.paths import appliance_home, data_root, make_dir, versions_path
from appliance.profile.loader import LoadedProfile, engine_digest
from appliance.run.caches import cache_dir, cache_key
from appliance.run.model_location import Located, locate
from appliance.safe_write import write_json
from appliance.weights.hub import repo_folder
from appliance.weights.pins import revision_for
from appliance.weights.stamps import stamp_root
from appliance.weights.sync import transfer_list

Report = Callable[[str], None]


@dataclass(frozen=True)
class Sources:
    """Where create takes each part from; None = leave it out (said in the manifest)."""

    image: str | None
    wheelhouse: Path | None


def default_image(channel: str) -> str:
    """The tag the image build gives the channel's image (appliance:<channel>-<its lock digest 12>)."""
    from appliance.lock import image_tag

    return image_tag(channel)


def default_wheelhouse(target: str) -> Path | None:
    """The wheelhouse scripts/build-cpu-image.sh links into the build context (the GPU build has none here)."""
    house = data_root() / "build" / f"wheelhouse-{target}"
    return house if house.is_dir() else None


def _place(src: Path, dst: Path, *, link: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
        return
    if link:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass  # another file system: copy
    shutil.copy2(src, dst)


def _model(found: Located, checkpoint: str, revision: str | None, out: Path) -> tuple[Checkpoint, list[str],
                                                                                       dict[str, str]]:
    """The checkpoint into out/model; its manifest entry, the bundle paths, and the digests already verified."""
    check = found.check
    known: dict[str, str] = {}
    if found.origin == "hub cache":  # else a folder (APPLIANCE_MODEL_DIR, a prepared model): applied as prepared
        storage = repo_folder(checkpoint, found.folder.parents[2])
        base = f"model/hub/{storage.name}"
        rels = transfer_list(check, storage)
        for rel in rels:
            _place(storage / rel, out / base / rel, link=True)
        verified = {e.path: e.sha256 for e in check.expected if e.sha256}
        for e in check.expected:  # LFS blobs whose sha256 the check matched: not hashed a second time
            if e.path in verified:
                blob = (found.folder / e.path).resolve().relative_to(storage.resolve()).as_posix()
                known[f"{base}/{blob}"] = verified[e.path]
        paths = [f"{base}/{rel}" for rel in rels]
        layout = "hub"
    else:
        base = f"model/folder/{checkpoint.split('/')[-1]}"
        paths = []
        for path in sorted(found.folder.rglob("*")):
            if path.is_file() and not path.name.startswith(".appliance-partial"):
                rel = path.relative_to(found.folder).as_posix()
                _place(path, out / base / rel, link=False)
                paths.append(f"{base}/{rel}")
        layout = "folder"
    total = sum((out / p).stat().st_size for p in paths if not (out / p).is_symlink())
    # A folder is no hub commit (a prepared model is converted locally): it carries no revision.
    return Checkpoint(id=checkpoint, revision=revision if layout == "hub" else None, layout=layout, path=base,
                      files=len(paths), bytes=total), paths, known


def _docker(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker")
    if not exe:
        raise ApplianceError("docker is not installed here", field="--image", fix="install the docker CLI, or pass "
                             "--no-image to leave the image out (load it another way)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _image(tag: str, out: Path) -> tuple[Image, str]:
    inspect = _docker("image", "inspect", "-f", "{{.Id}}", tag, timeout=60)
    if inspect.returncode != 0:
        raise ApplianceError(f"image {tag} is not on this Docker engine: {inspect.stderr.strip()[:200]}",
                             field="--image", value=tag,
                             fix="build it (scripts/build-cpu-image.sh for the CPU target), name another with "
                                 "--image, or leave it out with --no-image")
    rel = f"image/{tag.replace('/', '_').replace(':', '-')}.tar"
    (out / "image").mkdir(parents=True, exist_ok=True)
    saved = _docker("save", "-o", str(out / rel), tag)
    if saved.returncode != 0:
        raise ApplianceError(f"docker save {tag} failed: {saved.stderr.strip()[:300]}", field="--image", value=tag,
                             fix="check the Docker engine and the free space where --out is")
    return Image(tag=tag, id=inspect.stdout.strip(), archive=rel), rel


def create(loaded: LoadedProfile, out: Path, sources: Sources, *, overrides: list[str], model_dir: Path | None = None,
           report: Report = print, lock: ChannelLock | None = None) -> Manifest:
    """`lock`: the lock of the profile's channel, where the caller read it (else read here)."""
    profile = loaded.profile
    if out.exists() and any(out.iterdir()):
        raise ApplianceError(f"--out {out} exists and is not empty", field="--out", value=str(out),
                             fix="give a new folder (a bundle is written whole or not at all)")
    checkpoint = profile.model.checkpoint
    revision = revision_for(checkpoint, profile.model.revision)
    found = locate(checkpoint, revision, model_dir, stamp_root=stamp_root(appliance_home()), profile_name=profile.name)
    if found is None:
        raise ApplianceError(f"checkpoint {checkpoint}@{revision} is not on this machine", field="model.checkpoint",
                             value=checkpoint, fix=f"run `appliance fetch-model {profile.name}` (or `appliance "
                             "smoke-model` for cpu-smoke) first; a bundle carries a checkpoint checked complete (W3)")
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    make_dir(partial, "--out")
    try:
        lock = lock or channel_lock(profile.engine.channel, profile.hardware.target)
        manifest = _write(loaded, lock, partial, found, revision, sources, overrides, report)
        if out.exists():
            out.rmdir()
        partial.rename(out)
    except OSError as exc:  # a full disk, a folder not writable: nothing half-written is left
        shutil.rmtree(partial, ignore_errors=True)
        raise ApplianceError(f"bundle create failed: {exc.strerror or exc}: {exc.filename or ''}", field="--out",
                             value=str(out), fix="free space where --out is (or choose another folder) and create "
                             "it again") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def _write(loaded: LoadedProfile, lock: ChannelLock, out: Path, found: Located, revision: str | None,
           sources: Sources, overrides: list[str], report: Report) -> Manifest:
    profile = loaded.profile
    target = profile.hardware.target
    # Keyed like the serve's caches (run/launch.py): by the profile's channel, so another channel's edit keeps it.
    digest, engine = lock.digest, engine_digest(profile)
    report(f"bundle: checkpoint {found.check.summary()}")
    ckpt, paths, known = _model(found, profile.model.checkpoint, revision, out)
    shutil.copy2(versions_path(), out / "versions.json")
    write_json(out / "profile.json", profile.model_dump(mode="json"), field="--out")
    paths += ["versions.json", "profile.json"]
    key = cache_key(digest, engine)
    caches_src = cache_dir(digest, engine, appliance_home() / "cache")
    cache_paths = []
    if caches_src.is_dir():
        for path in sorted(caches_src.rglob("*")):
            if path.is_file() and not path.is_symlink():
                rel = f"caches/{key}/{path.relative_to(caches_src).as_posix()}"
                _place(path, out / rel, link=False)
                cache_paths.append(rel)
    note = "" if cache_paths else "empty: start the serve once before bundling to carry warm compile caches"
    report(f"bundle: compile/JIT caches {key}: {len(cache_paths)} files" + (f" ({note})" if note else ""))
    paths += cache_paths
    wheel_paths = []
    if sources.wheelhouse is not None:
        for path in sorted(sources.wheelhouse.glob("*.whl")):
            rel = f"wheelhouse/{path.name}"
            _place(path, out / rel, link=True)
            wheel_paths.append(rel)
        report(f"bundle: wheelhouse {sources.wheelhouse}: {len(wheel_paths)} wheels")
        paths += wheel_paths
    image = None
    if sources.image is not None:
        report(f"bundle: docker save {sources.image}")
        image, rel = _image(sources.image, out)
        paths.append(rel)
    report(f"bundle: hashing {len(paths)} files")
    files = hash_all(out, paths, known)

    def size(prefix: str) -> int:
        return sum(f.size for f in files if f.path.startswith(prefix) and f.link is None)

    manifest = Manifest.model_validate({
        "schema": 1, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "appliance": __version__,
        "profile": profile.name, "overrides": overrides, "profile_digest": loaded.digest, "engine_digest": engine,
        "lock_digest": digest, "channel": lock.name, "target": target, "checkpoint": ckpt, "image": image,
        "wheelhouse": Component(path="wheelhouse", files=len(wheel_paths), bytes=size("wheelhouse/"))
        if sources.wheelhouse is not None else None,
        "caches": Component(path=f"caches/{key}", files=len(cache_paths), bytes=size("caches/"), note=note),
        "files": files, "total_bytes": sum(f.size for f in files if f.link is None)})
    write_json(out / MANIFEST, as_json(manifest), field="--out")
    return manifest
