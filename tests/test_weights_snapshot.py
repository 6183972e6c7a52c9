"""W3: a checkpoint is present only when every file of the hub's listing is on disk with its size and hash.

A real hub cache is built by huggingface_hub's own download functions against FakeHub (tests/hubdouble.py, a test
double for the Hugging Face hub, which cannot be reached here), then damaged: a missing shard, a truncated one, a
corrupt one, a download cut or killed mid-file. Each is reported with what is missing and how to resume, and
never served.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.run.model_location import locate
from appliance.weights.fetch import fetch
from appliance.weights.snapshot import check_folder, check_hub_snapshot
from tests.conftest import ROOT
from tests.hubdouble import FakeHub, FakeRepo, checkpoint_files, safetensors_bytes

REPO = "org/tiny"
REV = "c0ffee" + "0" * 34
SHARD2 = "model-00002-of-00003.safetensors"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub() as fake:
        fake.add(FakeRepo(REPO, REV, checkpoint_files()))
        yield fake


@pytest.fixture
def fetched(hub: FakeHub, tmp_path: Path) -> Path:
    """A complete snapshot in a real hub cache, downloaded by huggingface_hub; returns the cache."""
    cache = tmp_path / "hub"
    fetch(REPO, REV, cache=cache, endpoint=hub.url, stamp_root=tmp_path / "stamps", report=lambda _: None)
    return cache


def blob(cache: Path, name: str) -> Path:
    return (cache / "models--org--tiny" / "snapshots" / REV / name).resolve()


def test_a_fetched_snapshot_is_complete_against_the_listing_huggingface_hub_recorded(fetched: Path,
                                                                                    tmp_path: Path) -> None:
    check = check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "stamps")
    assert check.complete and check.files == 5
    assert check.listing.startswith("the hub's listing recorded at download")
    assert check.total_bytes == sum(len(v) for v in checkpoint_files().values())
    assert (check.hashed, check.vouched) == (0, 5)  # fetch hashed every file; the stamps vouch for them now
    fresh = check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "other-host")
    assert (fresh.hashed, fresh.vouched) == (5, 0)  # another host's stamps: every file hashed again


def test_a_missing_shard_is_named_with_how_to_resume_and_never_served(fetched: Path, tmp_path: Path) -> None:
    blob(fetched, SHARD2).unlink()  # the snapshot's link now points nowhere
    check = check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "stamps")
    assert [(p.path, p.kind) for p in check.problems] == [(SHARD2, "missing")]
    error = check.refusal("RESUME")
    assert SHARD2 in str(error) and "W3" in str(error) and error.fix == "RESUME"


def test_a_truncated_shard_is_reported_with_both_sizes(fetched: Path, tmp_path: Path) -> None:
    with blob(fetched, SHARD2).open("r+b") as fh:
        fh.truncate(1000)
    (problem,) = check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "stamps").problems
    assert (problem.path, problem.kind) == (SHARD2, "size")
    assert "1,000 bytes on disk, 300,080 expected (truncated)" in problem.detail


def test_a_corrupt_shard_of_the_right_size_fails_its_sha256(fetched: Path, tmp_path: Path) -> None:
    path = blob(fetched, SHARD2)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    (problem,) = check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "stamps").problems
    assert (problem.path, problem.kind) == (SHARD2, "hash") and "sha256" in problem.detail
    # without hashing (a quick check) the same file passes: only the hash sees it
    assert check_hub_snapshot(REPO, REV, fetched, deep=False).complete


def test_a_stamp_stops_vouching_once_the_file_is_rewritten(fetched: Path, tmp_path: Path) -> None:
    path = blob(fetched, "config.json")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    check = check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "stamps")
    assert check.complete and (check.hashed, check.vouched) == (1, 4)


def test_bit_rot_under_an_unchanged_file_is_found_only_when_rehashing(fetched: Path, tmp_path: Path) -> None:
    path = blob(fetched, SHARD2)
    st = path.stat()
    with path.open("r+b") as fh:  # in place: same inode, same size
        fh.seek(5000)
        fh.write(b"\x00\x00\x00\x00")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old date: nothing on disk says it changed
    assert check_hub_snapshot(REPO, REV, fetched, stamp_root=tmp_path / "stamps").complete  # the stamp vouches
    rehashed = check_hub_snapshot(REPO, REV, fetched, stamp_root=None)  # `fetch-model --check --rehash`
    assert [(p.path, p.kind) for p in rehashed.problems] == [(SHARD2, "hash")]


def test_fetch_fetches_only_the_damaged_files_again(hub: FakeHub, fetched: Path, tmp_path: Path) -> None:
    with blob(fetched, SHARD2).open("r+b") as fh:
        fh.truncate(10)
    blob(fetched, "config.json").write_bytes(b"{}")
    before = len(hub.requests)
    check = fetch(REPO, REV, cache=fetched, endpoint=hub.url, stamp_root=tmp_path / "stamps", report=lambda _: None)
    assert check.complete
    got = sorted(p.rsplit("/", 1)[1] for m, p, _ in hub.requests[before:] if m == "GET" and "/resolve/" in p)
    assert got == ["config.json", SHARD2]


def test_a_download_cut_mid_file_leaves_the_shard_missing_and_refused_until_fetched_again(
        hub: FakeHub, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    hub.cut[SHARD2] = 100_000
    with pytest.raises(ApplianceError, match=f"(?s)download of {REPO}@{REV} failed.*INCOMPLETE"):
        fetch(REPO, REV, cache=cache, endpoint=hub.url, max_workers=1, report=lambda _: None)
    assert (SHARD2, "missing") in [(p.path, p.kind) for p in check_hub_snapshot(REPO, REV, cache).problems]
    with pytest.raises(ApplianceError, match=f"(?s)W3 .*{SHARD2}: not on disk") as refused:
        locate(REPO, REV, None, cache=cache, profile_name="p")
    assert "appliance fetch-model p" in str(refused.value)
    del hub.cut[SHARD2]
    assert fetch(REPO, REV, cache=cache, endpoint=hub.url, report=lambda _: None).complete
    assert locate(REPO, REV, None, cache=cache) is not None


def test_a_folder_without_a_listing_is_checked_by_its_index_and_shard_headers(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    for name, data in checkpoint_files().items():
        (folder / name).write_bytes(data)
    assert check_folder(REPO, None, folder).complete
    with (folder / SHARD2).open("r+b") as fh:
        fh.truncate(5000)  # the header says 300,080 bytes
    (problem,) = check_folder(REPO, None, folder).problems
    assert (problem.path, problem.kind) == (SHARD2, "size")
    (folder / "model-00003-of-00003.safetensors").unlink()
    assert [p.kind for p in check_folder(REPO, None, folder).problems] == ["size", "missing"]
    with pytest.raises(ApplianceError, match="APPLIANCE_MODEL_DIR"):
        locate(REPO, None, folder)


def test_a_single_file_model_folder_is_complete_when_its_header_length_matches(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes(1234))
    assert check_folder("x/y", None, tmp_path).complete
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes(1234)[:-1])
    assert not check_folder("x/y", None, tmp_path).complete


# --- the commands, as a user runs them ---------------------------------------------------------------------------

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOL_PIN = "12fd25f77366fa6b3b4b768ec3050bf629380bac"  # versions.json


def _env(tmp_path: Path, hub: FakeHub | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "APPLIANCE_"))}
    env |= {"HF_HOME": str(tmp_path / "hf"), "APPLIANCE_HOME": str(tmp_path / "home"), "HF_HUB_DISABLE_XET": "1"}
    if hub is not None:
        env["HF_ENDPOINT"] = hub.url
    return env


def appliance(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def smol_hub() -> Iterator[FakeHub]:
    with FakeHub() as fake:
        fake.add(FakeRepo(SMOL, SMOL_PIN, checkpoint_files(shards=2, shard_bytes=2_000_000)))
        yield fake


def test_fetch_model_downloads_the_pinned_revision_and_check_reports_it_complete(smol_hub: FakeHub,
                                                                               tmp_path: Path) -> None:
    env = _env(tmp_path, smol_hub)
    done = appliance(env, "fetch-model", "cpu-smoke")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith(f"snapshots/{SMOL_PIN}")
    assert {p.split("/resolve/")[1].split("/")[0] for m, p, _ in smol_hub.requests if "/resolve/" in p} == {SMOL_PIN}
    env.pop("HF_ENDPOINT")
    check = appliance(env | {"HF_HUB_OFFLINE": "1"}, "fetch-model", "cpu-smoke", "--check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["complete"] is True


def test_a_killed_download_is_reported_interrupted_refused_by_run_and_completed_by_fetch_model(
        smol_hub: FakeHub, tmp_path: Path) -> None:
    env = _env(tmp_path, smol_hub)
    shard = "model-00002-of-00002.safetensors"
    smol_hub.slow[shard] = 0.2  # 2 MB in 64 KiB chunks: about 6 s, long enough to be killed mid-file
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "fetch-model", "cpu-smoke", "--max-workers", "1"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    blobs = tmp_path / "hf" / "hub" / f"models--{SMOL.replace('/', '--')}" / "blobs"
    deadline = time.monotonic() + 60
    # huggingface_hub writes into blobs/<etag>.<id>.incomplete while the file streams (in large chunks)
    while not (smol_hub.downloads(shard) and blobs.is_dir() and any(blobs.glob("*.incomplete"))):
        assert time.monotonic() < deadline and proc.poll() is None, "the download never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # a pod evicted, an OOM kill: no clean-up runs
    proc.wait(10)
    offline = {k: v for k, v in env.items() if k != "HF_ENDPOINT"} | {"HF_HUB_OFFLINE": "1"}
    check = appliance(offline, "fetch-model", "cpu-smoke", "--check", "--json")
    assert check.returncode == 1
    problems = {p["path"]: p for p in json.loads(check.stdout)["problems"]}
    assert problems[shard]["kind"] == "interrupted" and "of 2,000,080 bytes" in problems[shard]["detail"]
    run = appliance(offline, "run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / "run"))
    assert run.returncode == 2 and shard in run.stderr and "appliance fetch-model cpu-smoke" in run.stderr
    assert not (tmp_path / "run" / "launch.json").exists()  # never served: nothing written, nothing started
    smol_hub.slow.clear()
    again = appliance(env, "fetch-model", "cpu-smoke")
    assert again.returncode == 0, again.stderr
    served = appliance(offline, "run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / "run"))
    assert served.returncode == 0, served.stderr
    assert f"snapshots/{SMOL_PIN}" in served.stdout  # the engine is started on the verified snapshot folder


def test_fetch_model_never_downloads_an_unpinned_revision(tmp_path: Path) -> None:
    done = appliance(_env(tmp_path, None), "fetch-model", "cpu-smoke", "--set", "model.revision=main")
    assert done.returncode == 2 and "model.revision" in done.stderr


def test_scan_cache_dir_names_an_older_revision_still_on_disk(fetched: Path) -> None:
    from appliance.weights.snapshot import cached_revisions

    older = "01d" + "0" * 37
    with FakeHub() as other:
        other.add(FakeRepo(REPO, older, checkpoint_files(shards=1, shard_bytes=2000)))
        fetch(REPO, older, cache=fetched, endpoint=other.url, report=lambda _: None)
    revisions, corrupt = cached_revisions(REPO, fetched)
    assert [r.commit for r in revisions] == sorted([REV, older]) and corrupt == []
    blob(fetched, SHARD2).unlink()  # huggingface_hub's own scan calls the repository corrupt now
    assert cached_revisions(REPO, fetched)[1]
