"""`appliance bundle verify DIR` and `appliance bundle apply DIR`: load a bundle on a machine with no network.

verify re-reads every file against the manifest. apply verifies first (a damaged bundle is refused whole), checks
that this appliance runs the bundle's lock (its caches and image are keyed by it), then puts each part where a
serve looks for it: the image into Docker (`docker load`, its id checked), the checkpoint into the HF cache (or the
prepared-model folder), the caches under APPLIANCE_HOME/cache/<key>, the wheelhouse under APPLIANCE_HOME/wheelhouse;
it checks the installed checkpoint complete (W3) and writes APPLIANCE_HOME/offline.env, with HF_HUB_OFFLINE=1,
that a shell (`set -a; . offline.env`) or compose (`env_file`) runs the serve with.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.bundle.manifest import FileEntry, Manifest, Problem, load_manifest, sha256_file, verify_files
from appliance.errors import ApplianceError
from appliance.lock import channel_lock
from appliance.paths import appliance_home, make_dir
from appliance.redact import printable, redact
from appliance.run.caches import cache_dir, cache_key
from appliance.run.model_location import locate, prepared_model_dir
from appliance.safe_write import copy_file, kind_of, write_file
from appliance.weights.hub import hf_home, hf_hub_cache, repo_folder
from appliance.weights.stamps import stamp_root

Report = Callable[[str], None]
OFFLINE_ENV = "offline.env"


def verify(bundle: Path) -> tuple[Manifest, list[Problem]]:
    manifest = load_manifest(bundle)
    return manifest, verify_files(bundle, manifest)


def _folder_inside(root: Path, parts: list[str], field: str) -> Path:
    """root/parts..., each folder created when missing; a symlink, file or special file in the way is refused (a
    link planted in the target tree would carry the writes out of it)."""
    here = root
    for part in parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            make_dir(here, field)
            continue
        if not stat.S_ISDIR(st.st_mode):
            kind = kind_of(st.st_mode) or "a file"
            raise ApplianceError(f"{field}: {here} is {kind}, not a folder: the bundle writes only into real "
                                 "folders under its target", field=field, value=str(here),
                                 fix=f"remove {here} (apply creates the folder) and apply again",
                                 reason="a link in the target tree would carry the bundle's files out of it")
    return here


def _same_content(path: Path, entry: FileEntry) -> bool:
    """A regular file already at path with the entry's size and sha256 (a blob of the right size but another content
    is replaced: re-applying the intact bundle repairs it)."""
    try:
        st = os.lstat(path)
        return stat.S_ISREG(st.st_mode) and st.st_size == entry.size and sha256_file(path) == entry.sha256
    except OSError:
        return False


def _place_part(bundle: Path, manifest: Manifest, part: str, dst: Path, field: str, report: Report) -> int:
    """Every entry of the manifest under the part's folder into dst, as a careful tar extracts: nothing but the
    listed (and verified) entries, each path inside dst, files copied through the one writer and hashed on the
    way, links re-created only when they resolve inside the part. Returns the files placed."""
    root = Path(os.path.realpath(make_dir(dst, field)))
    placed = 0
    for entry in sorted(manifest.entries_under(part), key=lambda e: (e.link is not None, e.path)):
        rel = entry.path[len(part) + 1:].split("/")
        folder = _folder_inside(root, rel[:-1], field)
        target = folder / rel[-1]
        if entry.link is not None:
            inside = posixpath.normpath(posixpath.join(*rel[:-1], entry.link) if len(rel) > 1 else entry.link)
            if os.path.isabs(entry.link) or inside == ".." or inside.startswith("../"):
                raise ApplianceError(f"the link {entry.path} -> {entry.link} leads outside {part}", field="BUNDLE",
                                     value=entry.path, fix="create the bundle again",
                                     reason="a link placed under the target may point only inside what it placed")
            if os.path.islink(target) and os.readlink(target) == entry.link:
                continue
            if os.path.isdir(target) and not os.path.islink(target):
                raise ApplianceError(f"{field}: {target} is a folder where the bundle places a link", field=field,
                                     value=str(target), fix=f"remove {target} and apply again")
            tmp = target.with_name(f".{rel[-1][:80]}.{os.getpid()}.link.tmp")
            try:
                tmp.unlink(missing_ok=True)
                os.symlink(entry.link, tmp)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
        else:
            if _same_content(target, entry):
                continue
            if os.path.lexists(target) and not os.path.islink(target) and os.path.isfile(target):
                report(f"bundle: {_shown(target)} differs from the bundle's: replaced")
            copy_file(bundle / entry.path, target, field=field, sha256=entry.sha256)
        placed += 1
    return placed


def _shown(path: Path | str) -> str:
    return printable(redact(str(path)))


def _load_image(bundle: Path, manifest: Manifest, report: Report) -> None:
    assert manifest.image is not None
    exe = shutil.which("docker")
    if not exe:
        raise ApplianceError("the bundle holds an image but docker is not installed here", field="--no-image",
                             fix="install the docker CLI (the engine need not reach any registry), or pass "
                                 "--no-image and load image/*.tar another way")
    loaded = subprocess.run([exe, "load", "-i", str(bundle / manifest.image.archive)], capture_output=True,
                            text=True, timeout=3600, check=False)
    if loaded.returncode != 0:
        raise ApplianceError(f"docker load failed: {loaded.stderr.strip()[:300]}", field="image",
                             value=manifest.image.archive, fix="check the Docker engine and its free space")
    got = subprocess.run([exe, "image", "inspect", "-f", "{{.Id}}", manifest.image.tag], capture_output=True,
                         text=True, timeout=60, check=False).stdout.strip()
    if got != manifest.image.id:
        raise ApplianceError(f"the loaded image {manifest.image.tag} is {got or 'missing'}, the bundle's is "
                             f"{manifest.image.id}", field="image", value=manifest.image.tag,
                             fix="remove the other image of that tag and apply again")
    report(f"bundle: image {manifest.image.tag} loaded ({manifest.image.id[:19]})")


@dataclass(frozen=True)
class Applied:
    manifest: Manifest
    env_file: Path
    env: dict[str, str]
    model: Path


def apply(bundle: Path, *, load_image: bool = True, report: Report = print) -> Applied:
    def said(line: str) -> None:  # every progress line redacted and escaped: paths and fields come from outside
        report(printable(redact(line)))

    try:
        return _apply(bundle, load_image, said)
    except OSError as exc:  # a full disk, a read-only folder: said, not a traceback
        raise ApplianceError(f"applying {bundle} failed: {exc.strerror or exc}: {exc.filename or ''}",
                             field="BUNDLE", value=str(bundle),
                             fix="free space (or fix the permissions) where APPLIANCE_HOME and HF_HOME point, then "
                                 "apply again: parts already placed are kept") from None


def _apply(bundle: Path, load_image: bool, report: Report) -> Applied:
    manifest, problems = verify(bundle)
    if problems:
        shown = "\n    ".join(f"{p.path}: {p.detail}" for p in problems[:8])
        raise ApplianceError(f"bundle {bundle} is damaged ({len(problems)} problem(s)); nothing applied:\n    {shown}",
                             field="BUNDLE", value=str(bundle),
                             fix="copy the bundle again from where it was made (or create it again)",
                             reason="a damaged part would be served, or fail minutes into a start")
    here = channel_lock(manifest.channel, manifest.target).digest
    if manifest.lock_digest != here:
        raise ApplianceError(
            f"bundle {bundle} was made for channel {manifest.channel} at lock {manifest.lock_digest[:12]}; "
            f"this appliance's {manifest.channel} is {here[:12]}", field="versions.json", value=here[:12],
            fix="apply it with the appliance of the bundle's lock (its image: docker run … appliance bundle apply), "
                "or create a bundle with this one",
            reason="the compile caches and the image are keyed by the channel's lock: another lock would start "
                   "cold, or another stack")
    home = make_dir(appliance_home(), "APPLIANCE_HOME")
    if manifest.image is not None and load_image:
        _load_image(bundle, manifest, report)
    ckpt = manifest.checkpoint
    if ckpt.layout == "hub":
        cache = make_dir(hf_hub_cache(), "HF_HOME")
        where = repo_folder(ckpt.id, cache)
        if where.name != ckpt.path.rsplit("/", 1)[-1]:
            raise ApplianceError(f"the bundle's checkpoint folder {ckpt.path} is not {ckpt.id}'s ({where.name})",
                                 field="manifest.json checkpoint.path", value=ckpt.path,
                                 fix="create the bundle again", reason="a serve looks for the checkpoint by its id")
        placed = _place_part(bundle, manifest, ckpt.path, where, "HF_HOME", report)
    else:
        where = prepared_model_dir(ckpt.id)
        placed = _place_part(bundle, manifest, ckpt.path, where, "APPLIANCE_HOME", report)
    report(f"bundle: checkpoint {ckpt.id}@{ckpt.revision}: {placed} files into {where}")
    found = locate(ckpt.id, ckpt.revision, None, stamp_root=stamp_root(home), profile_name=manifest.profile)
    if found is None or not found.check.complete:
        raise ApplianceError(f"the applied checkpoint {ckpt.id} is not found where a serve looks for it",
                             field="model.checkpoint", value=ckpt.id, fix="report this: apply must place it")
    report(f"bundle: {found.check.summary()}")
    key = cache_key(manifest.lock_digest, manifest.engine_digest)
    if manifest.caches.path != f"caches/{key}":
        raise ApplianceError(f"the bundle's caches are {manifest.caches.path}, not caches/{key} (its lock and engine "
                             "digests)", field="manifest.json caches.path", value=manifest.caches.path,
                             fix="create the bundle again", reason="caches under another key would never be used")
    caches = cache_dir(manifest.lock_digest, manifest.engine_digest, home / "cache")
    placed = _place_part(bundle, manifest, manifest.caches.path, caches, "APPLIANCE_HOME", report)
    report(f"bundle: compile/JIT caches: {placed} files into {caches}")
    if manifest.wheelhouse is not None and manifest.wheelhouse.files:
        house = home / "wheelhouse" / manifest.lock_digest[:12]
        placed = _place_part(bundle, manifest, manifest.wheelhouse.path, house, "APPLIANCE_HOME", report)
        report(f"bundle: wheelhouse: {placed} wheels into {house} (pip install --no-index --find-links {house})")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home()), "APPLIANCE_HOME": str(home),
           "APPLIANCE_PROFILE": manifest.profile}
    if manifest.overrides:
        env["APPLIANCE_SET"] = ";".join(manifest.overrides)
    env_file = home / OFFLINE_ENV
    # Every value shell-quoted: `set -a; . offline.env` must run nothing a manifest field holds.
    write_file(env_file, "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()), field="APPLIANCE_HOME")
    report(f"bundle: applied; run the serve offline with the variables of {env_file}:")
    for k, v in env.items():
        report(f"  {k}={v}")
    return Applied(manifest, env_file, env, found.folder)
