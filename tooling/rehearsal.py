"""The GPU-stack rehearsal: the locked GPU Python stack resolved, installed and exercised without a GPU.

No SM12x GPU and no CUDA base image exist where CI runs, but PyPI carries the CUDA-13 wheels of almost
the whole locked stack, and upstream vLLM (the default channel's engine.base, the fork's base release)
pins the same stack as the fork wheel. Three steps, each a subcommand:

    resolve   the complete stack for every GPU platform (cp312 manylinux, binary wheels only), metadata
              only (pip --dry-run with lazy wheel metadata): fails naming each pin that does not resolve
              or conflicts. ≈ 35 s and ≈ 80 MB per platform; runs in every CI run.
    install   the linux/amd64 stack for real into a throwaway venv (Python from versions.json python.gpu),
              exactly as the Dockerfile installs it (constraints, NCCL last with --no-deps), then
              `appliance versions --check --target gpu` in it, then imports torch, flashinfer, tilelang and
              vllm with no GPU visible, then every GPU profile's rendered argv through that vLLM's parser.
    parse     the parser step alone, in the venv of the last install, with this checkout's profiles: cheap
              (≈ 20 s), so every CI run does it even when the install is not repeated.
    changed   exit 0 when the inputs of `install` (the default channel's lock digest, Dockerfile, this file)
              differ from the last passing install, 1 when they do not: scripts/test.sh runs the install then.

    python -m tooling.rehearsal resolve [--platform linux/amd64 ...]
    python -m tooling.rehearsal install [--python PY]
    python -m tooling.rehearsal changed

Pins on another index than PyPI (flashinfer-cubin, flashinfer-jit-cache: FlashInfer's own indexes) are
checked only when that index's URL is in the environment (versions.json indexes.NAME.env); otherwise
they are named as not checked, never silently passed. Downloads are cached under .cache/gpu-rehearsal
(ignored by git) or $APPLIANCE_REHEARSAL_CACHE.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance import lockfile
from appliance.container import buildargs

ROOT = Path(__file__).resolve().parents[1]
PLATFORM_ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
INSTALL_PLATFORM = "linux/amd64"
OLDEST_MANYLINUX = 17  # manylinux2014 = manylinux_2_17: the oldest tag a CUDA 13 wheel carries
IMPORTS = ("torch", "flashinfer", "tilelang", "vllm")
READ_BY_THE_DRIVER = {"CUDA_CACHE_PATH"}  # libcuda reads it, no Python package: not looked for in the wheels
CHANGE_INPUTS = ("Dockerfile", "pyproject.toml", "tooling/rehearsal.py", "appliance/container/smoke.py")
"""With the default channel's lock digest (not all of versions.json: another channel's edit needs no reinstall)."""
NO_ENGINE_RECORD = "engine-source"
"""The stand-in engine (upstream vLLM from PyPI) has no engine-source.json: its absence is expected here."""


class RehearsalError(Exception):
    """A step of the rehearsal failed; the message names the pin or the step, and why."""


def cache_dir() -> Path:
    return Path(os.environ.get("APPLIANCE_REHEARSAL_CACHE") or ROOT / ".cache" / "gpu-rehearsal")


def _pip_env() -> dict[str, str]:
    """The caller's environment without pip's own settings: the machine's pip.conf or PIP_FIND_LINKS
    (a local CPU torch wheel, say) must not decide what the rehearsal resolves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def platform_flags(platform: str, glibc: str) -> list[str]:
    """pip's --platform matches tags exactly: every manylinux tag a host of this glibc accepts."""
    arch = PLATFORM_ARCH[platform]
    top = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(OLDEST_MANYLINUX, top + 1)]
    tags += [f"manylinux2014_{arch}", f"linux_{arch}"]
    return [flag for tag in tags for flag in ("--platform", tag)]


@dataclass
class Inputs:
    """The pip inputs of the GPU stack, from the lock (the same files the Dockerfile installs from)."""

    requirements: list[str]
    constraints: list[str]
    last: list[str]
    unchecked: dict[str, str] = field(default_factory=dict)
    """requirement -> why it is not checked here (its index is not reachable/configured)."""
    extra_indexes: list[str] = field(default_factory=list)
    no_deps: list[str] = field(default_factory=list)
    """Pins installed without their dependencies (FlashInfer's jit-cache shim and its provider), resolved one by one."""
    optional: dict[str, dict[str, str]] = field(default_factory=dict)
    """requirement -> {platform: why} where the lock lets the build leave it out (optional_on)."""
    groups: dict[str, list[str]] = field(default_factory=dict)
    """group -> its requirements: left out together (a shim without its provider loads nothing)."""
    index_url: str | None = None
    """The default index instead of the installer's (tests: a local folder standing in for FlashInfer's index)."""


def channel_of(lock: dict, name: str | None = None) -> tuple[str, dict]:
    """(name, lock) of a GPU channel: the named one, else the lock's default channel."""
    name = name or lockfile.default_channel(lock, "gpu")
    ch = lockfile.channel(lock, name)
    if ch["target"] != "gpu":
        raise RehearsalError(f"channel {name} is a {ch['target']} channel: the GPU-stack rehearsal installs GPU "
                             f"channels only")
    return name, ch


def stack_inputs(lock: dict, env: dict[str, str] | None = None, channel: str | None = None) -> Inputs:
    """The pip inputs of one GPU channel's stack. A fork's engine wheel exists only after an SM12x build, so its
    upstream base release stands in for it (the same torch/triton/FlashInfer pins); a PyPI engine is its pin."""
    env = os.environ if env is None else env
    _, ch = channel_of(lock, channel)
    files = buildargs.lock_files(ch, ROOT / "pyproject.toml")
    lines = {name: [x for x in text.splitlines() if x.strip()] for name, text in files.items()}
    stand_in = [] if ch["engine"]["source"] == "pypi" else [
        f"{ch['engine']['base']['name']}=={ch['engine']['base']['version']}"]
    inputs = Inputs(requirements=[*lines["requirements.txt"], *lines["appliance.txt"], *stand_in],
                    constraints=lines["constraints.txt"], last=lines["last.txt"], no_deps=lines["no-deps.txt"])
    for p in lockfile.pins(ch):
        if p.get("optional_on"):
            inputs.optional[lockfile.requirement(p)] = dict(p["optional_on"])
        if p.get("group"):
            inputs.groups.setdefault(p["group"], []).append(lockfile.requirement(p))
    for p in lockfile.pins(ch):
        index = p.get("index", "pypi")
        if index == "pypi":
            continue
        var = lock["indexes"][index]["env"]
        if env.get(var):
            inputs.extra_indexes.append(env[var])
            continue
        req = lockfile.requirement(p)
        inputs.unchecked[req] = f"only on index {index!r}; set {var} to check it here"
        inputs.requirements = [r for r in inputs.requirements if r != req]
        inputs.no_deps = [r for r in inputs.no_deps if r != req]
        inputs.constraints = [c for c in inputs.constraints if c != lockfile.requirement(p, constraint=True)]
    return inputs


_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (\S+)(.*)")
_CONFLICT = re.compile(r"Cannot install (.+?) because these package versions have conflicting dependencies")
_CAUSES = re.compile(r"The conflict is caused by:\n((?:[ \t]+\S.*\n?)+)")
_UNAVAILABLE = re.compile(r"no matching distributions available for your environment:\n((?:[ \t]+\S+[ \t]*\n?)+)")


def explain_pip_failure(output: str, platform: str, pins: dict[str, str] | None = None) -> str:
    """pip's resolver output (stdout and stderr: pip prints the causes on one, the verdict on the other) ->
    which pins failed and why, one line each. ``pins``: canonical name -> the requirement the lock asked
    for, so a package pip names bare is said with its pinned version."""
    pins = pins or {}
    found = [f"{m.group(1)} does not resolve for {platform} (cp312, binary wheels){m.group(2).strip()}"
             for m in _NOT_FOUND.finditer(output)]
    causes = [ln.strip() for m in _CAUSES.finditer(output) for ln in m.group(1).splitlines() if ln.strip()]
    unavailable = [name for m in _UNAVAILABLE.finditer(output) for name in m.group(1).split()]
    conflicts = [m.group(1) for m in _CONFLICT.finditer(output)]
    if conflicts and causes and all(c.startswith("The user requested") for c in causes):
        # Only the pin against itself: no wheel of that version exists for this platform.
        found += [f"{pins.get(_canon(name), name)} does not resolve for {platform}: no cp312 binary wheel of "
                  f"that version for this platform" for name in unavailable]
    elif conflicts:
        found += [f"{what} conflict on {platform}: {'; '.join(causes)}" for what in conflicts]
    if not found:
        tail = "\n".join(output.strip().splitlines()[-8:])
        found.append(f"pip failed on {platform}:\n{tail}")
    return "\n".join(found)


def _pip_dry_run(python: str, platform: str, glibc: str, python_version: str, reqs: list[str],
                 constraints: list[str], extra_indexes: list[str], report: Path, *, no_deps: bool,
                 index_url: str | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
        req_file, con_file = Path(tmp, "requirements.txt"), Path(tmp, "constraints.txt")
        req_file.write_text("".join(f"{r}\n" for r in reqs))
        con_file.write_text("".join(f"{c}\n" for c in constraints))
        abi = "cp" + python_version.replace(".", "")
        # Not --quiet: pip says why a resolution is impossible only in its full output.
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--progress-bar", "off",
               "--use-feature=fast-deps", "--cache-dir", str(cache_dir() / "pip"),
               "--report", str(report), "--only-binary=:all:", "--python-version", python_version,
               "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
               *platform_flags(platform, glibc), "--target", str(Path(tmp, "target")),
               "-r", str(req_file), "-c", str(con_file)]
        if index_url:
            cmd += ["--index-url", index_url]
        for url in extra_indexes:
            cmd += ["--extra-index-url", url]
        if no_deps:
            cmd.append("--no-deps")
        out = subprocess.run(cmd, capture_output=True, text=True, env=_pip_env(), check=False)
    if out.returncode != 0:
        pins = {_canon(r.split("==")[0].split("[")[0]): r for r in [*reqs, *constraints]}
        raise RehearsalError(explain_pip_failure(out.stdout + out.stderr, platform, pins))


def _resolved(report: Path) -> dict[str, str]:
    data = json.loads(report.read_text())
    return {_canon(i["metadata"]["name"]): i["metadata"]["version"] for i in data["install"]}


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(lock: dict, platforms: list[str], python: str = sys.executable,
            channel: str | None = None) -> dict[str, object]:
    """Resolve one GPU channel's whole stack per platform; raise RehearsalError naming every failing pin."""
    inputs = stack_inputs(lock, channel=channel)
    _, ch = channel_of(lock, channel)
    glibc = str(ch["images"]["glibc"])
    pyver = str(ch["python"])
    out: dict[str, object] = {"unchecked": inputs.unchecked, "platforms": {}}
    errors = []
    work = cache_dir() / "resolve" / channel_of(lock, channel)[0]
    work.mkdir(parents=True, exist_ok=True)
    for platform in platforms:
        start = time.monotonic()
        tag = platform.replace("/", "_")
        try:
            _pip_dry_run(python, platform, glibc, pyver, inputs.requirements, inputs.constraints,
                         inputs.extra_indexes, work / f"{tag}.json", no_deps=False)
            # K15: NCCL is installed after everything else with --no-deps (torch pins its own): same here.
            _pip_dry_run(python, platform, glibc, pyver, inputs.last, [], [], work / f"{tag}-last.json",
                         no_deps=True)
        except RehearsalError as exc:
            errors.append(str(exc))
            continue
        resolved = _resolved(work / f"{tag}.json") | _resolved(work / f"{tag}-last.json")
        alone, left_out = _resolve_no_deps(python, platform, glibc, pyver, inputs, work / tag, errors)
        resolved |= alone
        for req in [*inputs.constraints, *inputs.last]:
            name, want = req.split("==")
            if req in left_out:
                continue
            if resolved.get(_canon(name)) != want and not _local_of(resolved.get(_canon(name)), want):
                errors.append(f"{name}=={want} resolved as {resolved.get(_canon(name))} on {platform}")
        out["platforms"][platform] = {"packages": len(resolved), "seconds": round(time.monotonic() - start, 1),
                                      "resolved": dict(sorted(resolved.items())), "left_out": left_out,
                                      "groups": _group_report(inputs, left_out)}
    if errors:
        raise RehearsalError("the locked GPU stack does not resolve:\n  " + "\n  ".join(errors))
    return out


def _local_of(got: str | None, want: str) -> bool:
    """0.7.2.post1+cu130 is the locked 0.7.2.post1 (a local version label names the CUDA build)."""
    return got is not None and got.split("+", 1)[0] == want


def _resolve_no_deps(python: str, platform: str, glibc: str, pyver: str, inputs: Inputs, work: Path,
                     errors: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Each no-deps pin alone for this platform, as the build fetches it: (resolved, left_out). A pin optional on
    the platform that has no wheel there is left out with its reason, and its group with it; any other failure is
    an error naming the pin."""
    resolved: dict[str, str] = {}
    left_out: dict[str, str] = {}
    for req in inputs.no_deps:
        report = work.with_name(f"{work.name}-{_canon(req.split('==')[0])}.json")
        try:
            _pip_dry_run(python, platform, glibc, pyver, [req], [], inputs.extra_indexes, report, no_deps=True,
                         index_url=inputs.index_url)
        except RehearsalError as exc:
            why = inputs.optional.get(req, {}).get(platform)
            if why and "does not resolve" in str(exc):
                left_out[req] = f"no {platform} wheel on its index; optional on {platform}: {why}"
            else:
                errors.append(str(exc))
            continue
        resolved |= _resolved(report)
    for members in inputs.groups.values():
        gone = [m for m in members if m in left_out]
        for m in members:
            if gone and m not in left_out:
                left_out[m] = f"left out with {', '.join(gone)} (installed together or not at all)"
                resolved.pop(_canon(m.split("==")[0]), None)
    return resolved, left_out


def _group_report(inputs: Inputs, left_out: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    return {g: {"installed": [m for m in members if m not in left_out and m not in inputs.unchecked],
                "left_out": [m for m in members if m in left_out],
                "unchecked": [m for m in members if m in inputs.unchecked]}
            for g, members in inputs.groups.items()}


# --- install ------------------------------------------------------------------------------------

def find_python(version: str) -> str:
    """An interpreter of the lock's GPU Python: $APPLIANCE_REHEARSAL_PYTHON, pythonX.Y on PATH, or pyenv's."""
    explicit = os.environ.get("APPLIANCE_REHEARSAL_PYTHON")
    candidates = [explicit] if explicit else []
    candidates.append(shutil.which(f"python{version}") or "")
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += [str(p) for p in sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)]
    for c in candidates:
        if not c:
            continue
        probe = subprocess.run([c, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return c
    raise RehearsalError(f"no Python {version} (versions.json python.gpu) found: set APPLIANCE_REHEARSAL_PYTHON "
                         f"to one (pyenv install {version}, or a distribution's python{version})")


def _run(cmd: list[str], step: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env or _pip_env(), check=False)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise RehearsalError(f"{step} failed (exit {out.returncode}):\n{tail}")
    return out.stdout


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def install(lock: dict, python: str | None = None) -> dict[str, object]:
    """Install the amd64 stack into a fresh venv as the Dockerfile does, check and exercise it."""
    if os.uname().machine != PLATFORM_ARCH[INSTALL_PLATFORM]:
        raise RehearsalError(f"the install step runs on {INSTALL_PLATFORM} only (this host is {os.uname().machine})")
    _, ch = channel_of(lock)
    pyver = str(ch["python"])
    python = python or find_python(pyver)
    inputs = stack_inputs(lock)
    root = cache_dir()
    wheels, venv = root / "wheels-linux_amd64", venv_dir()
    wheels.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(venv, ignore_errors=True)  # throwaway: every install starts from an empty venv
    lockdir = root / "lock"
    shutil.rmtree(lockdir, ignore_errors=True)
    lockdir.mkdir(parents=True)
    (lockdir / "requirements.txt").write_text("".join(f"{r}\n" for r in inputs.requirements))
    (lockdir / "constraints.txt").write_text("".join(f"{c}\n" for c in inputs.constraints))
    (lockdir / "last.txt").write_text("".join(f"{r}\n" for r in inputs.last))
    (lockdir / "reinstall.txt").write_text(buildargs.lock_files(ch, ROOT / "pyproject.toml")["reinstall.txt"])
    times: dict[str, float] = {}

    def timed(step: str, cmd: list[str], env: dict[str, str] | None = None) -> str:
        start = time.monotonic()
        out = _run(cmd, step, env)
        times[step] = round(time.monotonic() - start, 1)
        return out

    timed("venv", [python, "-m", "venv", str(venv)])
    vpy = str(venv / "bin" / "python")
    pip = [vpy, "-m", "pip"]
    extra = [a for url in inputs.extra_indexes for a in ("--extra-index-url", url)]
    timed("download", [*pip, "download", "--only-binary=:all:", "--dest", str(wheels), *extra,
                       "--cache-dir", str(root / "pip"), "-c", str(lockdir / "constraints.txt"),
                       "-r", str(lockdir / "requirements.txt"), "setuptools>=70.1"])
    timed("download-last", [*pip, "download", "--only-binary=:all:", "--no-deps", "--dest", str(wheels),
                            "--cache-dir", str(root / "pip"), "-r", str(lockdir / "last.txt")])
    # As the Dockerfile's gpu stage: everything with constraints, cutlass-dsl's libs-cu13 force-reinstalled over
    # the -libs-cu12 files that share its paths, then NCCL last with --no-deps (K15).
    timed("install", [*pip, "install", "--no-index", "--find-links", str(wheels), "-c",
                      str(lockdir / "constraints.txt"), "-r", str(lockdir / "requirements.txt")])
    timed("install-reinstall", [*pip, "install", "--no-index", "--find-links", str(wheels), "--no-deps",
                                "--force-reinstall", "-r", str(lockdir / "reinstall.txt")])
    if inputs.no_deps:  # the jit-cache shim and its provider, without the shim's every-architecture dependencies
        timed("download-no-deps", [*pip, "download", "--only-binary=:all:", "--no-deps", "--dest", str(wheels),
                                   *extra, "--cache-dir", str(root / "pip"), *inputs.no_deps])
        timed("install-no-deps", [*pip, "install", "--no-index", "--find-links", str(wheels), "--no-deps",
                                  *inputs.no_deps])
    timed("install-last", [*pip, "install", "--no-index", "--find-links", str(wheels), "--no-deps",
                           "-r", str(lockdir / "last.txt")])
    timed("install-appliance", [*pip, "install", "--no-index", "--no-deps", "--no-build-isolation", str(ROOT)])

    site = _run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "site").strip()
    env = _pip_env() | {"APPLIANCE_ROOT": str(ROOT), "CUDA_VISIBLE_DEVICES": "",
                        "VLLM_NCCL_SO_PATH": f"{site}/nvidia/nccl/lib/libnccl.so.2"}
    check = json.loads(_run_allow_drift([str(venv / "bin" / "appliance"), "versions", "--check", "--target", "gpu",
                                         "--json"], env, times))
    expected = {r.split("==")[0] for r in inputs.unchecked} | {NO_ENGINE_RECORD}
    unexpected = [d for d in check["drift"] if d["package"] not in expected]
    if unexpected:
        raise RehearsalError("appliance versions --check in the rehearsal venv:\n  "
                             + "\n  ".join(d["message"] for d in unexpected))
    # K15 read back as the cross-node check does it: ncclGetVersion of the very file VLLM_NCCL_SO_PATH names.
    from appliance.multinode.identity import library_nccl_version

    nccl_pin = next(p for p in lockfile.pins(ch) if p.get("rule") == "K15")
    from appliance.errors import ApplianceError

    try:
        nccl_loaded = library_nccl_version(env["VLLM_NCCL_SO_PATH"])
    except ApplianceError as exc:
        raise RehearsalError(f"K15 read back: {exc}") from None
    if nccl_loaded != nccl_pin["version"]:
        raise RehearsalError(f"K15 {env['VLLM_NCCL_SO_PATH']} is NCCL {nccl_loaded}, "
                             f"the lock says {nccl_pin['version']}")
    start = time.monotonic()
    probe = ("import importlib, json\n"
             f"mods = {list(IMPORTS)!r}\n"
             "out = {m: getattr(importlib.import_module(m), '__version__', '?') for m in mods}\n"
             "import torch; out['torch.version.cuda'] = torch.version.cuda;"
             " out['cuda_available'] = torch.cuda.is_available()\n"
             "print(json.dumps(out))\n")
    imported = json.loads(_run([vpy, "-c", probe], "import " + ", ".join(IMPORTS), env).strip().splitlines()[-1])
    times["imports"] = round(time.monotonic() - start, 1)
    # The image's build-time smoke step, its import half (the nvcc half needs the CUDA image's toolchain):
    # flashinfer, tilelang, tvm_ffi and cutlass in one process, where the K14 double registration would abort.
    from appliance.container.smoke import MODULES, import_problem

    start = time.monotonic()
    problem = import_problem(vpy, MODULES)
    if problem:
        raise RehearsalError(f"the image's smoke step: {problem}")
    times["smoke-imports"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    parsed = parse_in_venv(venv)
    times["parse"] = round(time.monotonic() - start, 1)
    readers = cache_variables_read(Path(site))
    unread = [var for var, where in readers.items() if not where]
    if unread:
        raise RehearsalError(f"no installed package reads the cache variable(s) {', '.join(unread)} "
                             f"(appliance/run/caches.py): a renamed variable would leave that cache outside the volume")
    summary = {"python": python, "venv": str(venv), "seconds": times,
               "wheelhouse_mb": round(_folder_bytes(wheels) / 1e6), "venv_mb": round(_folder_bytes(venv) / 1e6),
               "versions_check_drift": [d["package"] for d in check["drift"]], "unchecked": inputs.unchecked,
               "imports": imported, "parsed_profiles": parsed, "cache_variables": readers,
               "nccl_library": {"path": env["VLLM_NCCL_SO_PATH"], "version": nccl_loaded}}
    mark_passed(summary)
    return summary


def venv_dir() -> Path:
    return cache_dir() / f"venv-{INSTALL_PLATFORM.replace('/', '_')}"


def parse_in_venv(venv: Path | None = None) -> dict[str, list[int]]:
    """Every GPU profile's argv, as this checkout renders it, through the vLLM of the rehearsal venv."""
    venv = venv or venv_dir()
    vpy = venv / "bin" / "python"
    if not vpy.exists():
        raise RehearsalError(f"no rehearsal venv at {venv}: run `python -m tooling.rehearsal install` "
                             f"first (scripts/test.sh does when the lock or Dockerfile changed)")
    # This checkout's appliance (not the copy installed with the venv): the profiles and renderer under test.
    env = _pip_env() | {"APPLIANCE_ROOT": str(ROOT), "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    out = _run([str(vpy), "-m", "tooling.rehearsal", "parse-profiles"],
               "vLLM's own parser on every GPU profile", env)
    return json.loads(out.strip().splitlines()[-1])


def _run_allow_drift(cmd: list[str], env: dict[str, str], times: dict[str, float]) -> str:
    """`appliance versions --check` exits 1 on drift: the drift is judged by the caller, not the exit code."""
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    times["versions-check"] = round(time.monotonic() - start, 1)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        raise RehearsalError(f"appliance versions --check failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout


def parse_profiles() -> dict[str, list[int]]:
    """Inside the rehearsal venv: every profile of the default GPU channel, on every rank, through this vLLM's parser.
    Returns profile -> ranks parsed; raises naming the profile and vLLM's own message."""
    from appliance.engine_args import parse_serve_argv
    from appliance.placement import resolve_placement
    from appliance.profile import list_profiles, load_profile
    from appliance.render import Placement, build_plan
    from tooling.platform_double import install_sm12x_platform_double

    install_sm12x_platform_double()  # the SM12x GPU that is not here (tooling/platform_double.py)
    channel = lockfile.default_channel(lockfile.load(ROOT / "versions.json"), "gpu")
    done: dict[str, list[int]] = {}
    for name in list_profiles():
        profile = load_profile(name).profile
        if profile.hardware.target != "gpu" or profile.engine.channel != channel:
            continue  # another channel's profiles are parsed by its own engine (tooling/channel_rehearsal.py)
        for rank in range(profile.hardware.nodes):
            at = resolve_placement(profile, Placement(node_rank=rank, master_addr="10.1.0.1"))
            argv = build_plan(profile, at).argv
            try:
                parsed = parse_serve_argv(argv)
            except ValueError as exc:
                raise RehearsalError(f"profile {name} rank {rank}: vLLM's parser rejects the argv: {exc}") from None
            want = {"model": profile.model.checkpoint, "tensor_parallel_size": profile.parallel.tensor,
                    "max_model_len": profile.limits.max_model_len}
            got = {k: parsed.get(k) for k in want}
            if got != want:
                raise RehearsalError(f"profile {name} rank {rank}: vLLM parsed {got}, the profile says {want}")
            done.setdefault(name, []).append(rank)
    try:  # the parser is vLLM's real one: it refuses what vLLM 0.27.1 does not know
        parse_serve_argv([*argv, "--no-such-flag"])
    except ValueError:
        return done
    raise RehearsalError("vLLM's parser accepted --no-such-flag: it is not the real parser")


def cache_variables_read(site: Path) -> dict[str, list[str]]:
    """Each JIT cache variable the run path sets (appliance.run.caches) -> installed modules that read it."""
    from appliance.run.caches import CACHE_ENV

    sources = [p for p in site.rglob("*.py") if "appliance" not in p.relative_to(site).parts[:1]]
    texts = {p: p.read_text(errors="ignore") for p in sources}
    return {var: sorted(str(p.relative_to(site)) for p, t in texts.items() if var in t)[:3]
            for var in CACHE_ENV if var not in READ_BY_THE_DRIVER}


# --- when CI runs the install -------------------------------------------------------------------

def change_key(root: Path = ROOT) -> str:
    """sha256 over the default channel's lock digest and the files whose change can break the installed stack."""
    h = hashlib.sha256()
    lock = lockfile.load(root / "versions.json")
    h.update(b"channel\0" + lockfile.channel_digest(lock, lockfile.default_channel(lock, "gpu")).encode() + b"\0")
    for rel in CHANGE_INPUTS:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def _stamp() -> Path:
    return cache_dir() / "last-pass.json"


def mark_passed(summary: dict[str, object]) -> None:
    _stamp().parent.mkdir(parents=True, exist_ok=True)
    _stamp().write_text(json.dumps({"key": change_key(), "summary": summary}, indent=2))


def changed_since_last_pass() -> tuple[bool, str]:
    try:
        last = json.loads(_stamp().read_text())["key"]
    except (OSError, ValueError, KeyError):
        return True, f"no passing install recorded in {_stamp()}"
    now = change_key()
    if last != now:
        return True, (f"the default channel's lock or {', '.join(CHANGE_INPUTS)} changed since the last passing "
                      f"install ({last[:12]} -> {now[:12]})")
    return False, f"unchanged since the last passing install ({now[:12]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tooling.rehearsal",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=Path, default=ROOT / "versions.json", help="the lock (default: the repo's)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("resolve", help="resolve the locked GPU stack per platform (metadata only)")
    p.add_argument("--platform", action="append", choices=sorted(PLATFORM_ARCH))
    p.add_argument("--channel", help="the GPU channel (default: the lock's default_channel)")
    p = sub.add_parser("install", help="install the amd64 stack into a throwaway venv and exercise it")
    p.add_argument("--python", help="the interpreter of versions.json python.gpu (default: found)")
    sub.add_parser("changed", help="exit 0 when the install's inputs changed since its last pass")
    sub.add_parser("parse", help="every GPU profile through the rehearsal venv's vLLM (after an install)")
    sub.add_parser("parse-profiles", help="(inside the rehearsal venv) every GPU profile through vLLM's parser")
    args = parser.parse_args(argv)
    lock = lockfile.load(args.versions)
    try:
        if args.cmd == "resolve":
            platforms = args.platform or list(channel_of(lock, args.channel)[1]["images"]["platforms"])
            print(json.dumps(resolve(lock, platforms, channel=args.channel), indent=2))
        elif args.cmd == "install":
            print(json.dumps(install(lock, args.python), indent=2))
        elif args.cmd == "changed":
            changed, why = changed_since_last_pass()
            print(f"gpu-stack install rehearsal: {why}")
            return 0 if changed else 1
        elif args.cmd == "parse":
            print(json.dumps(parse_in_venv(), indent=2))
        elif args.cmd == "parse-profiles":
            print(json.dumps(parse_profiles()))
    except RehearsalError as exc:
        print(f"gpu-stack rehearsal: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
