"""forkcheck.py, run by the GPU build right after the engine clone: the fork's own pins against versions.json,
its build-requirements layout, and MAX_JOBS sized by memory. Run by path with a bare interpreter, as the
Docker build runs it (standard library only); the source trees are written in the formats vLLM's
requirements files use (`-r common.txt`, an index option line, comments, markers, extras, spaced `==`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.container import forkcheck

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "appliance" / "container" / "forkcheck.py"
LOCK = json.loads((ROOT / "versions.json").read_text())
FORK = LOCK["channels"][LOCK["default_channel"]]
V = {p["name"]: p["version"] for p in FORK["packages"]}


def fork_tree(root: Path, *, flashinfer: str = V["flashinfer-python"], torch_build: str = V["torch"],
              layout: str = "new", numba: str = "0.65.0") -> Path:
    req = root / "requirements"
    req.mkdir(parents=True)
    (req / "common.txt").write_text(f"regex\nnumba == {numba} # N-gram speculative decoding\n"
                                    f"torch=={V['torch']}\n")
    (req / "cuda.txt").write_text(
        "# Common dependencies\n-r common.txt\n\n"
        f"torch=={V['torch']}\ntorchvision==0.28.0 # must be updated alongside torch\n"
        "--extra-index-url https://flashinfer.invalid/whl/\n"
        f"flashinfer-python=={flashinfer}\nflashinfer-cubin=={flashinfer}\n"
        f"apache-tvm-ffi=={V['apache-tvm-ffi']}\ntilelang=={V['tilelang']}\n"
        "nvidia-cudnn-frontend>=1.19.1\n"
        f"nvidia-cutlass-dsl[cu13]=={V['nvidia-cutlass-dsl']}\nquack-kernels=={V['quack-kernels']}  # MSA\n"
        'tokenspeed-mla==0.1.8; platform_system == "Linux"\n')
    build = f"cmake>=3.26.1\nninja\nsetuptools>=83.0.0\nsetuptools-rust>=1.9.0\ntorch=={torch_build}\nwheel\n"
    if layout == "new":
        (req / "build").mkdir()
        (req / "build" / "cuda.txt").write_text("# Should be mirrored in pyproject.toml\n" + build)
        (req / "build" / "rust.txt").write_text("setuptools>=83.0.0\nsetuptools-rust>=1.9.0\nwheel\n")
    elif layout == "old":
        (req / "build.txt").write_text(build)
    return root


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", str(SCRIPT), "--versions", str(ROOT / "versions.json"), *args],
                          capture_output=True, text=True, timeout=30, check=False)


def test_a_fork_that_pins_the_locked_stack_passes_and_says_which_build_layout_it_used(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    out = run("requirements", "--source", str(src), "--write-build-reqs", str(tmp_path / "build.txt"))
    assert out.returncode == 0, out.stderr
    assert "build requirements layout: requirements/build/cuda.txt" in out.stdout
    # The optional Rust frontend's build tools come along when the commit has them.
    assert (tmp_path / "build.txt").read_text().splitlines() == [
        f"-r {src.resolve()}/requirements/build/cuda.txt", f"-r {src.resolve()}/requirements/build/rust.txt"]


def test_the_older_layout_requirements_build_txt_is_used_when_that_is_what_the_commit_has(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm", layout="old")
    out = run("requirements", "--source", str(src), "--write-build-reqs", str(tmp_path / "build.txt"))
    assert out.returncode == 0, out.stderr
    assert "layout: requirements/build.txt" in out.stdout
    assert (tmp_path / "build.txt").read_text() == f"-r {src.resolve()}/requirements/build.txt\n"


def test_a_fork_pin_that_differs_from_the_lock_stops_the_build_in_seconds_naming_both_values(tmp_path: Path) -> None:
    # What a later fork head carries (FlashInfer 0.6.18.post1), and a build requirement on another torch.
    src = fork_tree(tmp_path / "vllm", flashinfer="0.6.18.post1", torch_build="2.14.0")
    start = time.monotonic()
    out = run("requirements", "--source", str(src), "--write-build-reqs", str(tmp_path / "build.txt"))
    assert time.monotonic() - start < 10
    assert out.returncode == 1
    err = out.stderr
    assert ("requirements/cuda.txt:7 pins flashinfer-python==0.6.18.post1 but versions.json locks "
            f"flashinfer-python=={V['flashinfer-python']}") in err
    cubin = V["flashinfer-cubin"]
    assert f"pins flashinfer-cubin==0.6.18.post1 but versions.json locks flashinfer-cubin=={cubin}" in err
    assert f"requirements/build/cuda.txt:6 pins torch==2.14.0 but versions.json locks torch=={V['torch']}" in err
    assert "jasl/vllm@d44e224ab9" in err and "Stopped before compiling" in err
    assert not (tmp_path / "build.txt").exists()  # nothing half-written for the build to go on with


def test_pins_in_included_files_count_and_unlocked_packages_are_the_forks_business(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    (src / "requirements" / "common.txt").write_text("torch==2.12.0\nnumba == 0.61.0\n")
    out = run("requirements", "--source", str(src))
    assert out.returncode == 1
    assert "requirements/common.txt:1 pins torch==2.12.0" in out.stderr
    assert "numba" not in out.stderr  # not in the lock: the fork's own choice


def test_a_commit_without_build_requirements_is_named_not_guessed(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm", layout="none")
    out = run("requirements", "--source", str(src))
    assert out.returncode == 1
    assert "no build requirements at this commit (looked for requirements/build/cuda.txt and " \
           "requirements/build.txt)" in out.stderr


def test_exact_pins_are_read_the_way_pip_reads_the_lines(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    pins = {name: version for name, version, _ in forkcheck.exact_pins(src / "requirements" / "cuda.txt", src)}
    assert pins["nvidia-cutlass-dsl"] == V["nvidia-cutlass-dsl"]  # extras dropped
    assert pins["numba"] == "0.65.0"  # `name == version`, through -r common.txt
    assert pins["tokenspeed-mla"] == "0.1.8"  # marker dropped
    assert "nvidia-cudnn-frontend" not in pins  # a range is not a pin


@pytest.mark.parametrize(("gib", "cpus", "jobs"), [(64, 128, 9), (512, 16, 16), (4, 8, 1), (119, 20, 17)])
def test_max_jobs_is_sized_by_memory_never_above_the_cores(tmp_path: Path, gib: int, cpus: int, jobs: int) -> None:
    meminfo = f"MemTotal:       {gib * 1024 * 1024 + 10} kB\nMemAvailable:   {gib * 1024 * 1024} kB\n"
    assert forkcheck.max_jobs(meminfo, cpus, 7.0) == jobs
    (tmp_path / "meminfo").write_text(meminfo)
    out = run("max-jobs", "--meminfo", str(tmp_path / "meminfo"))
    assert out.returncode == 0 and int(out.stdout) >= 1


def docker_homes(src: Path, dockerfile: str | None, versions_json: str | None) -> None:
    """The fork's other two FlashInfer homes, in upstream's formats (docker/Dockerfile `ARG`, and
    docker/versions.json as upstream's tools/generate_versions_json.py writes it)."""
    (src / "docker").mkdir()
    if dockerfile is not None:
        (src / "docker" / "Dockerfile").write_text(
            "ARG CUDA_VERSION=13.0.2\nFROM base AS build\n# FlashInfer: keep in step with requirements/cuda.txt\n"
            f"ARG FLASHINFER_VERSION={dockerfile}\n"
            'RUN uv pip install --system flashinfer-cubin==${FLASHINFER_VERSION} \\\n'
            '    && uv pip install --system flashinfer-jit-cache==${FLASHINFER_VERSION}\n')
    if versions_json is not None:
        (src / "docker" / "versions.json").write_text(json.dumps(
            {"_comment": "Auto-generated from Dockerfile ARGs.", "variable": {
                "CUDA_VERSION": {"default": "13.0.2"}, "FLASHINFER_VERSION": {"default": versions_json}}}, indent=2))


def test_the_seeds_range_for_quack_passes_and_says_the_locks_exact_pin_resolves_it(tmp_path: Path) -> None:
    # The seed's stock-deps pins: "quack-kernels>=0.6.1"; the lock pins exactly one release of that range.
    src = fork_tree(tmp_path / "vllm")
    cuda = src / "requirements" / "cuda.txt"
    cuda.write_text(cuda.read_text().replace(f"quack-kernels=={V['quack-kernels']}", "quack-kernels>=0.6.1"))
    out = run("requirements", "--source", str(src))
    assert out.returncode == 0, out.stderr
    assert (f"quack-kernels>=0.6.1 is a range; the lock's exact quack-kernels=={V['quack-kernels']} is what "
            f"resolves it") in out.stdout


def test_a_range_the_locked_version_does_not_satisfy_stops_the_build(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    cuda = src / "requirements" / "cuda.txt"
    cuda.write_text(cuda.read_text().replace(f"apache-tvm-ffi=={V['apache-tvm-ffi']}",
                                             "apache-tvm-ffi>=0.1.13,<0.2"))
    out = run("requirements", "--source", str(src))
    assert out.returncode == 1
    assert (f"requirements/cuda.txt:9 asks apache-tvm-ffi>=0.1.13,<0.2, which the locked "
            f"apache-tvm-ffi=={V['apache-tvm-ffi']} does not satisfy") in out.stderr


@pytest.mark.parametrize("version", [V["flashinfer-cubin"], "0.6.15.post1"])
def test_a_url_pinned_cubin_wheel_is_held_to_the_lock_by_its_file_name(tmp_path: Path, version: str) -> None:
    # The seed: "flashinfer-python and the GitHub-release flashinfer-cubin, which must be the same version".
    src = fork_tree(tmp_path / "vllm")
    cuda = src / "requirements" / "cuda.txt"
    wheel = (f"flashinfer-cubin @ https://github.com/flashinfer-ai/flashinfer/releases/download/v{version}/"
             f"flashinfer_cubin-{version}-py3-none-any.whl")
    cuda.write_text(cuda.read_text().replace(f"flashinfer-cubin=={V['flashinfer-cubin']}", wheel))
    out = run("requirements", "--source", str(src))
    if version == V["flashinfer-cubin"]:
        assert out.returncode == 0, out.stderr
        assert f"flashinfer-cubin is URL-pinned at {version}, the locked version" in out.stdout
    else:
        assert out.returncode == 1
        assert (f"requirements/cuda.txt:8 pins flashinfer-cubin @ {wheel.split(' @ ')[1]} (version {version}) but "
                f"versions.json locks flashinfer-cubin=={V['flashinfer-cubin']}") in out.stderr


def test_a_url_whose_file_names_no_version_is_a_problem_not_a_pass(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    cuda = src / "requirements" / "cuda.txt"
    cuda.write_text(cuda.read_text().replace(f"flashinfer-cubin=={V['flashinfer-cubin']}",
                                             "flashinfer-cubin @ https://example.invalid/latest/cubin.tar.gz"))
    out = run("requirements", "--source", str(src))
    assert out.returncode == 1 and "whose file name names no version" in out.stderr


@pytest.mark.parametrize(("dockerfile", "versions_json", "bad"), [
    (V["flashinfer-python"], V["flashinfer-python"], []),
    ("0.6.16", V["flashinfer-python"], ["docker/Dockerfile:4 says FLASHINFER_VERSION=0.6.16"]),
    (V["flashinfer-python"], "0.6.17", ["docker/versions.json variable.FLASHINFER_VERSION says "
                                        "FLASHINFER_VERSION=0.6.17"]),
])
def test_the_forks_dockerfile_arg_and_versions_json_move_with_the_lock(tmp_path: Path, dockerfile: str,
                                                                       versions_json: str, bad: list[str]) -> None:
    # The seed's half-move: requirements/cuda.txt moved, the other two homes of the version did not.
    src = fork_tree(tmp_path / "vllm")
    docker_homes(src, dockerfile, versions_json)
    out = run("requirements", "--source", str(src))
    assert out.returncode == (1 if bad else 0), out.stderr
    for line in bad:
        assert f"{line} but versions.json locks flashinfer-python=={V['flashinfer-python']}" in out.stderr
    if not bad:
        assert "note: docker/" not in out.stdout  # both homes found and read


def test_a_commit_without_the_docker_homes_says_so_instead_of_passing_them_silently(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    docker_homes(src, None, None)
    out = run("requirements", "--source", str(src))
    assert out.returncode == 0, out.stderr
    assert "note: docker/Dockerfile is absent at this commit" in out.stdout
    assert "note: docker/versions.json is absent at this commit" in out.stdout


@pytest.mark.parametrize(("version", "spec", "ok"), [
    ("0.6.1", ">=0.6.1", True), ("0.6.0", ">=0.6.1", False), ("0.6.5", ">=0.6.1,<0.6.5", False),
    ("0.6.16.post3", ">=0.6.16", True), ("0.6.16rc1", ">=0.6.16", False), ("1.0.dev1", "<1.0a1", True),
    ("0.1.13.post0", ">=0.1.6,<0.2,!=0.1.8", True),  # the seed: FlashInfer's tvm-ffi range admits the bad one
    ("0.1.8", ">=0.1.6,<0.2,!=0.1.8", False), ("2.13.0", "==2.13.*", True), ("2.14.0", "==2.13.*", False),
    ("4.6.2", "~=4.6.0", True), ("4.7.0", "~=4.6.0", False), ("1.0+cu130", "==1.0", True),
])
def test_ranges_are_judged_the_way_pip_orders_versions(version: str, spec: str, ok: bool) -> None:
    assert forkcheck.satisfies(version, spec) is ok


def test_forkcheck_checks_the_channel_it_is_given_and_refuses_a_pypi_channel(tmp_path: Path) -> None:
    src = fork_tree(tmp_path / "vllm")
    out = run("--channel", "vllm-0.32.0", "requirements", "--source", str(src))
    assert out.returncode == 2 and "installs vllm==0.32.0 from a package index" in out.stderr
    out = run("--channel", "vllm-0.3", "requirements", "--source", str(src))
    assert out.returncode == 2 and "no channel 'vllm-0.3'" in out.stderr
