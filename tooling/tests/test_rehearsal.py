"""The GPU-stack rehearsal (tooling/rehearsal.py, docs/gpu-rehearsal.md): the locked GPU Python stack
resolved for both platforms from the real index (metadata only), and on amd64 installed for real, checked with
`appliance versions --check`, imported without a GPU and used to parse every GPU profile's argv with vLLM
0.27.1's own parser. Marker `rehearsal`: needs the package index. Marker `gpu_stack_install`: the ≈ 10 GB
install, which scripts/test.sh runs when the lock or the Dockerfile changed since the last passing one."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import pytest

from appliance import lockfile
from appliance.profile import list_profiles, load_profile
from tooling import rehearsal

ROOT = rehearsal.ROOT
LOCK = lockfile.load(ROOT / "versions.json")
FORK = lockfile.channel(LOCK, lockfile.default_channel(LOCK, "gpu"))
GPU_PINS = {p["name"]: p["version"] for p in lockfile.pins(FORK)}
ELSEWHERE = {p["name"] for p in lockfile.pins(FORK) if p.get("index", "pypi") != "pypi"}
GPU_PROFILES = {n: load_profile(n).profile.hardware.nodes for n in list_profiles()
                if load_profile(n).profile.engine.channel == LOCK["default_channel"]}
"""The default GPU channel's profiles: the fork's stack parses them (others: tooling/channel_rehearsal.py)."""


def with_pin(name: str, version: str) -> dict:
    lock = copy.deepcopy(LOCK)
    fork = lock["channels"][lock["default_channel"]]
    next(p for p in fork["packages"] if p["name"] == name)["version"] = version
    return lock


# --- no network ---------------------------------------------------------------------------------

def test_platform_tags_cover_every_manylinux_a_glibc_2_39_host_accepts() -> None:
    flags = rehearsal.platform_flags("linux/arm64", "2.39")
    tags = flags[1::2]
    assert set(flags[::2]) == {"--platform"}
    assert tags[0] == "manylinux_2_17_aarch64" and "manylinux_2_39_aarch64" in tags
    assert "manylinux_2_40_aarch64" not in tags and "manylinux2014_aarch64" in tags


def test_the_stack_is_the_locks_pins_plus_the_upstream_stand_in_and_names_what_it_cannot_check() -> None:
    inputs = rehearsal.stack_inputs(LOCK, env={})
    base = FORK["engine"]["base"]
    assert f"{base['name']}=={base['version']}" == "vllm==0.27.1"
    assert "vllm==0.27.1" in inputs.requirements
    assert inputs.last == ["nvidia-nccl-cu13==2.30.7"]  # K15: --no-deps, after everything
    assert {r.split("==")[0] for r in inputs.unchecked} == ELSEWHERE == {"flashinfer-cubin", "flashinfer-jit-cache"}
    assert "FLASHINFER_JIT_CACHE_INDEX_URL" in inputs.unchecked["flashinfer-jit-cache==0.6.16.post3"]
    named = {r.split("==")[0].split("[")[0] for r in [*inputs.requirements, *inputs.last]}
    assert set(GPU_PINS) - ELSEWHERE <= named
    # With the index given, the pin is checked against it instead of named as unchecked.
    given = rehearsal.stack_inputs(LOCK, env={"FLASHINFER_INDEX_URL": "http://127.0.0.1:9/simple"})
    assert "flashinfer-cubin==0.6.16.post3" in given.requirements and given.extra_indexes == ["http://127.0.0.1:9/simple"]


def test_pips_failures_are_turned_into_the_pins_that_failed() -> None:
    # pip's own wording, as it printed it here for a pin and for a conflict.
    missing = ("ERROR: Could not find a version that satisfies the requirement nvidia-nccl-cu13==2.30.7 "
               "(from versions: 0.0.0a0, 2.27.7)\nERROR: No matching distribution found for nvidia-nccl-cu13==2.30.7\n")
    assert rehearsal.explain_pip_failure(missing, "linux/amd64") == (
        "nvidia-nccl-cu13==2.30.7 does not resolve for linux/amd64 (cp312, binary wheels)(from versions: 0.0.0a0, "
        "2.27.7)")
    conflict = ("ERROR: Cannot install -r req.txt (line 1) and vllm==0.27.1 because these package versions have "
                "conflicting dependencies.\n\nThe conflict is caused by:\n    The user requested torch==2.12.0\n"
                "    vllm 0.27.1 depends on torch==2.13.0\n\nTo fix this you could try to:\n")
    text = rehearsal.explain_pip_failure(conflict, "linux/arm64")
    assert "vllm==0.27.1 conflict on linux/arm64" in text
    assert "The user requested torch==2.12.0; vllm 0.27.1 depends on torch==2.13.0" in text
    # With the pin also a constraint (as the rehearsal passes it), pip 26 words a missing version this way.
    pinned = ("ERROR: Cannot install apache-tvm-ffi==0.1.999 because these package versions have conflicting "
              "dependencies.\n\nThe conflict is caused by:\n    The user requested apache-tvm-ffi==0.1.999\n"
              "    The user requested (constraint) apache-tvm-ffi==0.1.999\n\nAdditionally, some packages in these "
              "conflicts have no matching distributions available for your environment:\n    apache-tvm-ffi\n\n"
              "To fix this you could try to:\n")
    assert rehearsal.explain_pip_failure(pinned, "linux/amd64", {"apache-tvm-ffi": "apache-tvm-ffi==0.1.999"}) == (
        "apache-tvm-ffi==0.1.999 does not resolve for linux/amd64: no cp312 binary wheel of that version for this "
        "platform")


def test_the_install_runs_again_when_the_lock_or_dockerfile_changes(tmp_path: Path, monkeypatch) -> None:
    for rel in (*rehearsal.CHANGE_INPUTS, "versions.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    before = rehearsal.change_key(tmp_path)
    assert before == rehearsal.change_key(ROOT)
    # Another channel's edit leaves the default channel's installed stack as it is ...
    lock = json.loads((tmp_path / "versions.json").read_text())
    lock["channels"]["vllm-0.32.0"]["provenance"]["source"] += " (edited)"
    (tmp_path / "versions.json").write_text(json.dumps(lock))
    assert rehearsal.change_key(tmp_path) == before
    # ... the default channel's own lock, or the Dockerfile, installs it again.
    next(p for p in lock["channels"][lock["default_channel"]]["packages"] if p["name"] == "tilelang")["version"] = "0"
    (tmp_path / "versions.json").write_text(json.dumps(lock))
    assert rehearsal.change_key(tmp_path) != before
    shutil.copy(ROOT / "versions.json", tmp_path / "versions.json")
    (tmp_path / "Dockerfile").write_text((tmp_path / "Dockerfile").read_text() + "\n# touched\n")
    assert rehearsal.change_key(tmp_path) != before
    monkeypatch.setenv("APPLIANCE_REHEARSAL_CACHE", str(tmp_path / "cache"))
    changed, why = rehearsal.changed_since_last_pass()
    assert changed and "no passing install recorded" in why
    rehearsal.mark_passed({"seconds": {}})
    assert rehearsal.changed_since_last_pass() == (False, f"unchanged since the last passing install "
                                                          f"({rehearsal.change_key()[:12]})")
    assert rehearsal.main(["changed"]) == 1


def _platform_wheel(index: Path, name: str, version: str, tag: str, requires: tuple[str, ...] = ()) -> None:
    """One wheel of a simple index folder (PEP 503: index/<name>/index.html links the file). No files inside but
    its metadata: pip reads only that in a dry run."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    folder = index / name
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-{tag}.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{dist}.dist-info/METADATA": meta,
             f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n"}
    record = [f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(v.encode())}" for k, v in files.items()]
    with zipfile.ZipFile(wheel, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n")
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(folder.glob("*.whl")))
    (folder / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


def test_the_jit_cache_shim_and_its_provider_resolve_per_platform_or_leave_together(tmp_path: Path) -> None:
    """FlashInfer's jit-cache as packaged since its #5096: a shim whose dependencies name every architecture's
    provider, and per-architecture providers. A local simple index stands in for FlashInfer's CUDA-13 sub-index
    (which this machine cannot reach): the shim for both CPU architectures, the SM12x provider for x86_64 only.
    The rehearsal resolves each alone without its dependencies, as the build fetches them: on amd64 both resolve;
    on arm64 the provider has no wheel, so both are left out, named, because the lock makes them optional there."""
    index = tmp_path / "simple"
    version = "0.7.0.post1+cu130"
    for arch in ("x86_64", "aarch64"):
        _platform_wheel(index, "flashinfer-jit-cache", version, f"cp39-abi3-manylinux_2_28_{arch}",
                        requires=("flashinfer-jit-cache-sm90a==0.7.0.post1+cu130",
                                  "flashinfer-jit-cache-sm120f==0.7.0.post1+cu130"))
    _platform_wheel(index, "flashinfer-jit-cache-sm120f", version, "cp39-abi3-manylinux_2_28_x86_64")
    url = index.as_uri()
    inputs = rehearsal.stack_inputs(LOCK, env={"FLASHINFER_JIT_CACHE_INDEX_URL": url}, channel="vllm-0.32.0")
    assert inputs.no_deps == ["flashinfer-jit-cache==0.7.0.post1", "flashinfer-jit-cache-sm120f==0.7.0.post1"]
    assert inputs.groups == {"flashinfer-jit-cache": inputs.no_deps}
    assert "flashinfer-cubin==0.7.0.post1" in inputs.unchecked  # its own index is not given: named, not passed
    inputs.index_url = url  # nothing else is asked of any index here
    ch = lockfile.channel(LOCK, "vllm-0.32.0")
    glibc, pyver = str(ch["images"]["glibc"]), str(ch["python"])
    errors: list[str] = []
    got, left = rehearsal._resolve_no_deps(sys.executable, "linux/amd64", glibc, pyver, inputs, tmp_path / "a", errors)
    assert errors == [] and left == {}
    assert got == {"flashinfer-jit-cache": version, "flashinfer-jit-cache-sm120f": version}  # no sm90a: --no-deps
    got, left = rehearsal._resolve_no_deps(sys.executable, "linux/arm64", glibc, pyver, inputs, tmp_path / "b", errors)
    assert errors == [] and got == {}
    assert "no linux/arm64 wheel on its index; optional on linux/arm64: GB10" in left[inputs.no_deps[1]]
    assert left[inputs.no_deps[0]] == (f"left out with {inputs.no_deps[1]} (installed together or not at all)")
    assert rehearsal._group_report(inputs, left) == {"flashinfer-jit-cache": {
        "installed": [], "left_out": inputs.no_deps, "unchecked": []}}
    # A pin that is required on the platform is an error, never left out.
    inputs.optional = {}
    rehearsal._resolve_no_deps(sys.executable, "linux/arm64", glibc, pyver, inputs, tmp_path / "c", errors)
    assert len(errors) == 1 and "flashinfer-jit-cache-sm120f==0.7.0.post1 does not resolve for linux/arm64" in errors[0]


# --- the real index: every CI run ---------------------------------------------------------------

@pytest.mark.rehearsal
def test_the_complete_locked_gpu_stack_resolves_for_both_platforms() -> None:
    out = rehearsal.resolve(LOCK, list(FORK["images"]["platforms"]))
    assert set(out["platforms"]) == {"linux/amd64", "linux/arm64"}
    for platform, got in out["platforms"].items():
        resolved = got["resolved"]
        for name, version in GPU_PINS.items():
            if name not in ELSEWHERE:
                assert resolved[name] == version, (platform, name)
        assert resolved["vllm"] == "0.27.1"
        assert got["packages"] > 100  # the engine's whole dependency tree, not only the pins
    assert set(out["unchecked"]) == {f"{n}=={GPU_PINS[n]}" for n in ELSEWHERE}


@pytest.mark.rehearsal
def test_a_pin_that_does_not_exist_is_named() -> None:
    with pytest.raises(rehearsal.RehearsalError) as err:
        rehearsal.resolve(with_pin("apache-tvm-ffi", "0.1.999"), ["linux/amd64"])
    assert "apache-tvm-ffi==0.1.999 does not resolve for linux/amd64" in str(err.value)


@pytest.mark.rehearsal
def test_a_pin_the_engine_conflicts_with_is_named_with_the_cause() -> None:
    with pytest.raises(rehearsal.RehearsalError) as err:
        rehearsal.resolve(with_pin("torch", "2.12.0"), ["linux/arm64"])
    text = str(err.value)
    # pip's own cause: torch 2.12.0 wants another triton than the lock's.
    assert "conflict on linux/arm64" in text and "torch 2.12.0 depends on triton==" in text
    assert "The user requested triton==3.7.1" in text


@pytest.mark.rehearsal
def test_the_command_exits_2_naming_the_pin_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "versions.json").write_text(json.dumps(with_pin("tilelang", "0.0.999")))
    out = subprocess.run([sys.executable, "-m", "tooling.rehearsal", "--versions",
                          str(tmp_path / "versions.json"), "resolve", "--platform", "linux/amd64"],
                         capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "gpu-stack rehearsal: the locked GPU stack does not resolve" in out.stderr
    assert "tilelang==0.0.999 does not resolve for linux/amd64" in out.stderr


# --- the real install: when the lock or Dockerfile changed (scripts/test.sh decides) --------------

@pytest.mark.gpu_stack_install
def test_the_amd64_stack_installs_passes_versions_check_imports_and_parses_every_gpu_profile() -> None:
    summary = rehearsal.install(LOCK)
    # `appliance versions --check` in the installed stack: only the pins no reachable index carries are missing,
    # and the NCCL library path the Dockerfile sets is the locked wheel's (K15 read back).
    # The stand-in engine (vLLM from PyPI) has no engine-source.json: the one more drift the image would not have.
    assert set(summary["versions_check_drift"]) == ELSEWHERE | {rehearsal.NO_ENGINE_RECORD}
    assert {"install-reinstall", "smoke-imports"} <= set(summary["seconds"])  # the two steps the image has too
    assert summary["nccl_library"]["version"] == GPU_PINS["nvidia-nccl-cu13"]  # ncclGetVersion of that very file
    assert summary["nccl_library"]["path"].endswith("/site-packages/nvidia/nccl/lib/libnccl.so.2")  # as the image
    assert all(summary["cache_variables"].values())  # every JIT cache variable is one an installed package reads
    imported = summary["imports"]
    assert imported["torch"].startswith(GPU_PINS["torch"]) and imported["torch.version.cuda"].startswith("13.")
    assert imported["flashinfer"] == GPU_PINS["flashinfer-python"]
    assert imported["tilelang"].startswith(GPU_PINS["tilelang"]) and imported["vllm"] == "0.27.1"
    assert imported["cuda_available"] is False  # no GPU: the imports themselves are what is rehearsed
    # vLLM 0.27.1's own parser accepted every GPU profile's argv on every rank with the profile's values.
    assert summary["parsed_profiles"] == {n: list(range(nodes)) for n, nodes in GPU_PROFILES.items()}
    assert json.loads((rehearsal.cache_dir() / "last-pass.json").read_text())["key"] == rehearsal.change_key()


@pytest.mark.rehearsal
def test_every_gpu_profile_as_rendered_now_parses_with_vllm_0_27_1() -> None:
    # The venv of the last passing install (a fresh machine has none: its first run is an install run).
    assert rehearsal.parse_in_venv() == {n: list(range(nodes)) for n, nodes in GPU_PROFILES.items()}
