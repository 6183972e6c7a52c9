"""`appliance bundle verify DIR` and `appliance bundle apply DIR`: load a bundle on a machine with no network.

verify re-reads every file against the manifest. apply verifies first (a damaged bundle is refused whole), checks
that this appliance runs the bundle's lock (its caches and image are keyed by it), then puts each part where a
serve looks for it: the image into Docker (`docker load`, its id checked), the checkpoint into the HF cache (or the
prepared-model folder), the caches under APPLIANCE_HOME/cache/<key>, the wheelhouse under APPLIANCE_HOME/wheelhouse;
it checks the installed checkpoint complete (W3) and writes APPLIANCE_HOME/offline.env, with HF_HUB_OFFLINE=1,
that a shell (`set -a; . offline.env`) or compose (`env_file`) runs the serve with.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.bundle.manifest import Manifest, Problem, load_manifest, verify_files
from appliance.errors import ApplianceError
from appliance.lock import channel_lock
from appliance.paths import appliance_home, make_dir
from appliance.run.caches import cache_dir
from appliance.run.model_location import locate, prepared_model_dir
from appliance.weights.hub import hf_home, hf_hub_cache
from appliance.weights.stamps import stamp_root

Report = Callable[[str], None]
OFFLINE_ENV = "offline.env"


def verify(bundle: Path) -> tuple[Manifest, list[Problem]]:
    manifest = load_manifest(bundle)
    return manifest, verify_files(bundle, manifest)


def _merge_tree(src: Path, dst: Path) -> int:
    """Every file of src into dst (symlinks as links; a file already there with the same size is kept, as
    content-addressed blobs are). Returns the files placed."""
    placed = 0
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        target = dst / rel
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(path.readlink())
        elif target.exists() and not target.is_symlink() and target.stat().st_size == path.stat().st_size \
                and rel.parts[0] == "blobs":
            continue
        else:
            tmp = target.with_name(f".{target.name}.bundle-tmp")
            shutil.copy2(path, tmp)
            tmp.replace(target)
        placed += 1
    return placed


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
    try:
        return _apply(bundle, load_image, report)
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
        src = bundle / ckpt.path
        placed = _merge_tree(src, cache / src.name)
        where = cache / src.name
    else:
        where = prepared_model_dir(ckpt.id)
        placed = _merge_tree(bundle / ckpt.path, where)
    report(f"bundle: checkpoint {ckpt.id}@{ckpt.revision}: {placed} files into {where}")
    found = locate(ckpt.id, ckpt.revision, None, stamp_root=stamp_root(home), profile_name=manifest.profile)
    if found is None or not found.check.complete:
        raise ApplianceError(f"the applied checkpoint {ckpt.id} is not found where a serve looks for it",
                             field="model.checkpoint", value=ckpt.id, fix="report this: apply must place it")
    report(f"bundle: {found.check.summary()}")
    caches = cache_dir(manifest.lock_digest, manifest.engine_digest, home / "cache")
    placed = _merge_tree(bundle / manifest.caches.path, caches) if (bundle / manifest.caches.path).is_dir() else 0
    report(f"bundle: compile/JIT caches: {placed} files into {caches}")
    if manifest.wheelhouse is not None and manifest.wheelhouse.files:
        house = home / "wheelhouse" / manifest.lock_digest[:12]
        placed = _merge_tree(bundle / manifest.wheelhouse.path, house)
        report(f"bundle: wheelhouse: {placed} wheels into {house} (pip install --no-index --find-links {house})")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home()), "APPLIANCE_HOME": str(home),
           "APPLIANCE_PROFILE": manifest.profile}
    if manifest.overrides:
        env["APPLIANCE_SET"] = ";".join(manifest.overrides)
    env_file = home / OFFLINE_ENV
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    report(f"bundle: applied; run the serve offline with the variables of {env_file}:")
    for k, v in env.items():
        report(f"  {k}={v}")
    return Applied(manifest, env_file, env, found.folder)
