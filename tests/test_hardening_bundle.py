"""Issue 35 item 1: a bundle extracts like a careful tar. A hostile manifest (absolute or `..` entries, a digest or
a component path that climbs out, links that point outside the bundle, a FIFO, a planted symlink on either side,
shell words in a field) writes nothing outside APPLIANCE_HOME/HF_HOME: every test compares the files outside,
byte for byte, before and after. verify hashes what apply uses, and apply repairs a damaged blob of the right size.
(Bundles are built the way tests/test_bundle.py builds them: from FakeHub, the test double for the hub.)"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.profile import load_profile
from appliance.run.caches import profile_cache_dir
from tests.conftest import ROOT
from tests.in_process import CliRun, run_main
from tests.test_bundle import SMOL_PIN, appliance, bundle, env_for, source  # noqa: F401 (the fixtures)

LIMIT_S = 60
"""A FIFO that blocks verify or apply fails the test at this limit instead of hanging the suite."""


def run(env: dict[str, str], *args: str, preexec: Callable[[], None] | None = None
        ) -> CliRun | subprocess.CompletedProcess[str]:
    """`appliance ARGS` in exactly `env`: in-process (tests/in_process.py), or a real process where `preexec` sets
    one of its limits."""
    if preexec is None:
        return run_main(args, env=env, replace_env=True, cwd=ROOT, limit_s=LIMIT_S)
    return subprocess.run([sys.executable, "-m", "appliance", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=LIMIT_S, preexec_fn=preexec)


def snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[str, bytes]]:
    """Every entry under root (but the skipped trees) as (kind, content or link target): the byte-for-byte view."""
    seen: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirs, files in os.walk(root):
        here = Path(dirpath)
        dirs[:] = [d for d in dirs if here / d not in skip]
        for name in [*dirs, *files]:
            path = here / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                seen[rel] = ("dir", b"")
            elif path.is_file():
                seen[rel] = ("file", path.read_bytes())
            else:
                seen[rel] = ("special", b"")
    return seen


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def resign(bundle_dir: Path, edit: Callable[[dict], None] | None = None) -> dict:
    """The manifest rewritten the way a hostile maker would: every file of the tree listed with its true size and
    hash (links with their target), then `edit` applied. verify's hashes then pass: only the checks of what an
    entry may be stand between the manifest and the machine."""
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    entries = []
    for path in sorted(bundle_dir.rglob("*")):
        rel = path.relative_to(bundle_dir).as_posix()
        if rel == "manifest.json" or (path.is_dir() and not path.is_symlink()):
            continue
        if path.is_symlink():
            target = path.resolve()
            data = target.read_bytes() if target.is_file() else b""
            entries.append({"path": rel, "size": len(data), "sha256": sha(data), "link": os.readlink(path)})
        elif path.is_file():
            data = path.read_bytes()
            entries.append({"path": rel, "size": len(data), "sha256": sha(data), "link": None})
        else:
            entries.append({"path": rel, "size": 0, "sha256": sha(b""), "link": None})
    manifest["files"] = entries
    if edit is not None:
        edit(manifest)
    (bundle_dir / "manifest.json").write_text(json.dumps(manifest))
    return manifest


@pytest.fixture
def world(bundle: Path, tmp_path: Path) -> dict[str, Path]:  # noqa: F811
    """A copy of the bundle, a target machine (target/home, target/hf) and files outside both, under tmp_path."""
    copy = tmp_path / "b"
    subprocess.run(["cp", "-a", str(bundle), str(copy)], check=True)
    outside = tmp_path / "outside"
    (outside / "src").mkdir(parents=True)
    (outside / "victim").write_text("untouched\n")
    (outside / "src" / "stolen.bin").write_bytes(b"a file no manifest entry covers")
    target = tmp_path / "target"
    return {"bundle": copy, "outside": outside, "target": target, "tmp": tmp_path}


def caches_of(manifest: dict) -> str:
    return manifest["caches"]["path"]


def hub_base(manifest: dict) -> str:
    return manifest["checkpoint"]["path"]


def _engine_digest_climbs(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m.update(engine_digest="/../../../outside-caches"))


def _caches_path_absolute(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m["caches"].update(path=str(w["outside"] / "src")))


def _caches_path_dotdot(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m["caches"].update(path="../outside/src"))


def _checkpoint_path_dotdot(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m["checkpoint"].update(path="../outside/src"))


def _entry_absolute(w: dict[str, Path]) -> None:
    victim = w["outside"] / "victim"
    data = victim.read_bytes()

    def edit(m: dict) -> None:
        m["files"].append({"path": str(victim), "size": len(data), "sha256": sha(data), "link": None})
    resign(w["bundle"], edit)


def _entry_dotdot(w: dict[str, Path]) -> None:
    data = (w["outside"] / "victim").read_bytes()

    def edit(m: dict) -> None:
        m["files"].append({"path": "../outside/victim", "size": len(data), "sha256": sha(data), "link": None})
    resign(w["bundle"], edit)


def _link_to_outside_file(w: dict[str, Path]) -> None:
    manifest = json.loads((w["bundle"] / "manifest.json").read_text())
    (w["bundle"] / caches_of(manifest) / "evil").symlink_to(w["outside"] / "victim")
    resign(w["bundle"])


def _relative_link_climbing_out(w: dict[str, Path]) -> None:
    manifest = json.loads((w["bundle"] / "manifest.json").read_text())
    snap = w["bundle"] / hub_base(manifest) / "snapshots" / SMOL_PIN
    (snap / "evil.json").symlink_to("../../../../../../outside/victim")
    resign(w["bundle"])


def _linked_folder_in_the_bundle(w: dict[str, Path]) -> None:
    manifest = json.loads((w["bundle"] / "manifest.json").read_text())
    (w["bundle"] / caches_of(manifest) / "linked").symlink_to(w["outside"] / "src")
    resign(w["bundle"])


def _planted_link_in_the_target_caches(w: dict[str, Path]) -> None:
    """APPLIANCE_HOME/cache/<key>/vllm is a link to a folder outside: the bundle's vllm/ files would land there."""
    manifest = json.loads((w["bundle"] / "manifest.json").read_text())
    key = caches_of(manifest).split("/", 1)[1]
    caches = w["target"] / "home" / "cache" / key
    caches.mkdir(parents=True)
    (caches / "vllm").symlink_to(w["outside"] / "src", target_is_directory=True)


def _offline_env_is_a_link(w: dict[str, Path]) -> None:
    (w["target"] / "home").mkdir(parents=True)
    (w["target"] / "home" / "offline.env").symlink_to(w["outside"] / "victim")


def _profile_name_climbs(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m.update(profile="../../outside/victim"))


def _checkpoint_id_climbs(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m["checkpoint"].update(id="../../outside/victim"))


def _channel_name_climbs(w: dict[str, Path]) -> None:
    resign(w["bundle"], lambda m: m.update(channel="../../outside/victim"))


HOSTILE = {f.__name__.strip("_"): f for f in (
    _engine_digest_climbs, _caches_path_absolute, _caches_path_dotdot, _checkpoint_path_dotdot, _entry_absolute,
    _entry_dotdot, _link_to_outside_file, _relative_link_climbing_out, _linked_folder_in_the_bundle,
    _planted_link_in_the_target_caches, _offline_env_is_a_link, _profile_name_climbs, _checkpoint_id_climbs,
    _channel_name_climbs)}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_bundle_is_refused_and_writes_nothing_outside_its_targets(world: dict[str, Path], attack: str
                                                                             ) -> None:
    HOSTILE[attack](world)
    target = world["target"]
    keep = (target / "home", target / "hf")
    before = snapshot(world["tmp"], keep)
    planted = links_under(target)
    done = run(env_for(target), "bundle", "apply", str(world["bundle"]), "--no-image")
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "error" in done.stderr.lower(), done.stderr
    assert snapshot(world["tmp"], keep) == before
    placed = links_under(target) - planted
    assert [p for p in placed if not p.resolve().is_relative_to(target.resolve())] == []


def links_under(root: Path) -> set[Path]:
    return {Path(d) / n for d, dirs, files in os.walk(root) for n in [*dirs, *files] if (Path(d) / n).is_symlink()}


@pytest.mark.parametrize("attack", ["entry_absolute", "entry_dotdot", "link_to_outside_file",
                                    "relative_link_climbing_out", "linked_folder_in_the_bundle"])
def test_verify_never_calls_an_entry_outside_the_bundle_intact(world: dict[str, Path], attack: str) -> None:
    HOSTILE[attack](world)
    done = run(os.environ.copy(), "bundle", "verify", str(world["bundle"]))
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, (done.stdout, done.stderr)
    assert "intact" not in done.stdout.split(":")[-1]


def test_a_manifest_field_in_offline_env_is_quoted_so_sourcing_it_runs_nothing(world: dict[str, Path]) -> None:
    pwned = world["tmp"] / "PWNED"
    words = f"model.max_model_len=2048;x=$(touch {pwned});y=`touch {pwned}`; z=1 touch {pwned}"
    resign(world["bundle"], lambda m: m.update(overrides=[words]))
    done = run(env_for(world["target"]), "bundle", "apply", str(world["bundle"]), "--no-image")
    if done.returncode == 2:  # refused as no --set word: then nothing was written at all
        assert not (world["target"] / "home" / "offline.env").exists() and "Traceback" not in done.stderr
        return
    assert done.returncode == 0, done.stderr
    env_file = world["target"] / "home" / "offline.env"
    shown = subprocess.run(["sh", "-c", f'set -a; . "{env_file}"; printf %s "$APPLIANCE_SET"'], capture_output=True,
                           text=True, timeout=30)
    assert not pwned.exists()
    assert shown.returncode == 0 and shown.stdout == words


def test_an_unlisted_fifo_fails_verify_and_a_listed_one_blocks_nothing(world: dict[str, Path]) -> None:
    manifest = json.loads((world["bundle"] / "manifest.json").read_text())
    fifo = world["bundle"] / caches_of(manifest) / "pipe"
    os.mkfifo(fifo)
    unlisted = run(os.environ.copy(), "bundle", "verify", str(world["bundle"]), "--json")
    assert unlisted.returncode == 1, (unlisted.stdout, unlisted.stderr)
    problems = {p["path"]: p["detail"] for p in json.loads(unlisted.stdout)["problems"]}
    assert "FIFO" in problems[f"{caches_of(manifest)}/pipe"]
    resign(world["bundle"])  # now listed, as a 0-byte file
    listed = run(os.environ.copy(), "bundle", "verify", str(world["bundle"]), "--json")
    assert listed.returncode == 1 and "FIFO" in listed.stdout, (listed.stdout, listed.stderr)
    applied = run(env_for(world["target"]), "bundle", "apply", str(world["bundle"]), "--no-image")
    assert applied.returncode == 2 and "FIFO" in applied.stderr and "Traceback" not in applied.stderr


def test_a_damaged_blob_of_the_right_size_in_the_cache_is_repaired_by_apply(bundle: Path, tmp_path: Path  # noqa: F811
                                                                            ) -> None:
    env = env_for(tmp_path / "target")
    assert run(env, "bundle", "apply", str(bundle), "--no-image").returncode == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    blob_entry = max((f for f in manifest["files"] if "/blobs/" in f["path"]), key=lambda f: f["size"])
    blob = tmp_path / "target" / "hf" / "hub" / blob_entry["path"].split("/", 2)[2]
    with blob.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\xff")  # same size: a check by size alone keeps it
    again = run(env, "bundle", "apply", str(bundle), "--no-image")
    assert again.returncode == 0, again.stderr
    assert sha(blob.read_bytes()) == blob_entry["sha256"]


def _cap_file_size() -> None:
    """The child's writes stop at 64 KiB (EFBIG, as on a full disk): the blobs of 500 kB fail, the small files pass."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_apply_on_a_full_disk_names_the_file_that_failed_and_leaves_no_temp_file(bundle: Path, tmp_path: Path  # noqa: F811
                                                                               ) -> None:
    target = tmp_path / "target"
    done = run(env_for(target), "bundle", "apply", str(bundle), "--no-image", preexec=_cap_file_size)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    big = {f["path"].rsplit("/", 1)[-1] for f in manifest["files"] if f["size"] > 64 * 1024 and not f["link"]}
    assert any(name in done.stderr for name in big), done.stderr
    left = [p for p in target.rglob("*") if p.name.startswith(".") and (p.suffix in (".tmp", ".bundle-tmp")
                                                                          or "tmp" in p.name)]
    assert left == []


def test_an_intact_bundle_still_applies_and_its_caches_land_under_the_key(bundle: Path, tmp_path: Path  # noqa: F811
                                                                         ) -> None:
    target = tmp_path / "target"
    done = run(env_for(target), "bundle", "apply", str(bundle), "--no-image")
    assert done.returncode == 0, done.stderr
    caches = profile_cache_dir(load_profile("cpu-smoke").profile, target / "home" / "cache")
    assert (caches / "vllm" / "modelinfos.json").read_text() == "{}"
    snap = target / "hf" / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / SMOL_PIN
    links = [p for p in snap.rglob("*") if p.is_symlink()]
    assert links and all(p.resolve().is_relative_to((target / "hf").resolve()) for p in links)
