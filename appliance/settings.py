"""Run-time settings from the environment (prefix APPLIANCE_), read once by the CLI.

pydantic-settings reads them, and is imported only when the environment holds an APPLIANCE_ variable: with none,
the settings are the fields' defaults, and a data-only command (`validate`, `render`) does not pay the ~50 ms of
CPU its import costs (asyncio, dotenv, the cloud secret sources)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from appliance.bounds import (
    MAX_MASTER_PORT,
    PORT_MAX,
    PORT_MIN,
    check_fabric_ifnames,
    check_host,
    check_text,
    show,
)

ENV_PREFIX = "APPLIANCE_"


class ApplianceSettings(BaseModel):
    # The docstrings under the fields are for readers, as in profile/model.py (use_attribute_docstrings is off)
    model_config = ConfigDict(extra="ignore")

    profile: str | None = None
    """Serve profile name (`appliance profiles` lists them) or a YAML file's path."""
    set: str = ""
    """Semicolon-separated `a.b=value` overrides, applied after the profile and before --set."""
    node_rank: int = Field(0, ge=0, le=15)
    """This machine's rank in a multi-node serve (0 = head with the API server)."""
    master_addr: str | None = None
    """The head's address on the fast fabric (multi-node rendezvous)."""
    master_port: int | None = Field(None, ge=1024, le=MAX_MASTER_PORT)
    """Overrides distributed.master_port."""
    fabric_ifname: str | None = None
    """Network interface of the fast fabric (NCCL/Gloo socket interface, VLLM_HOST_IP), or one per rank
    `0=IF,1=IF` (each node takes its own: ports are often named differently per node)."""
    host_ip: str | None = None
    """This node's address on the fabric; derived from fabric_ifname when unset."""
    health_port: int | None = Field(None, ge=PORT_MIN, le=PORT_MAX)
    """This node's exporter port, overriding server.health_port without changing the profile (and its digest):
    two ranks on one host need two."""
    rendezvous_timeout_s: float = Field(900, ge=1, le=86400)
    """How long a rank waits for the other nodes at the cross-node consistency exchange: long, because pulls
    of a ~20 GB engine image can start nodes minutes apart."""
    model_dir: Path | None = None
    """A local checkpoint folder; served instead of downloading the checkpoint id."""
    log_dir: Path | None = None
    """Where the serve log and supervisor files go."""
    procfs: Path = Path("/proc")
    """Root of the host's procfs (meminfo, pressure/memory), as node_exporter's --path.procfs: a container that
    mounts the host's /proc elsewhere sets it, so doctor and the memory watchdog read the host, not the cgroup."""
    sysfs: Path = Path("/sys")
    """Root of the host's sysfs (class/infiniband, class/net): where a multi-node rank finds its RDMA device's netdev
    and GID (multinode/netident.py, K39)."""
    kmsg: Path | None = None
    """A kernel-log file to read (NVRM NV_ERR_NO_MEMORY, Xid lines); unset = this boot's kernel log
    (/dev/kmsg, else `journalctl -k -b` / `dmesg`)."""
    exporter_host: str | None = None
    """The exporter's bind address. Unset: loopback on a single node or a head, a worker's fabric address (where
    the head's exporter asks it), resolved by run/exposure.exporter_bind; compose and the Kubernetes manifests set
    0.0.0.0 (Prometheus scrapes from another node or the pod network). `run` warns while /status and /metrics listen
    beyond loopback on a single node. The probe asks over its own socket, so it works either way."""
    tether_pid: int | None = Field(None, ge=1)
    """Set by `appliance upgrade qualify` for the candidate it starts: `run` ties the serve to that process, so that
    the serve stops when its starter dies, even by SIGKILL (run/tether.py)."""
    log_format: Literal["text", "json"] = "text"
    """How the exporter says state changes and start-up progress in the container's output: text lines, or one
    JSON object per line for a log pipeline."""

    # The same bounds as the flags and the profile (appliance/bounds.py), named by the variable.
    @field_validator("profile", "set", "model_dir", "log_dir", mode="before")
    @classmethod
    def _printable(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            check_text(f"{ENV_PREFIX}{info.field_name.upper()}", value)
        return value

    @field_validator("master_addr", "host_ip", "exporter_host")
    @classmethod
    def _address(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else check_host(f"{ENV_PREFIX}{str(info.field_name).upper()}", value)

    @field_validator("fabric_ifname")
    @classmethod
    def _ifname(cls, value: str | None) -> str | None:
        return value if value is None else check_fabric_ifnames("APPLIANCE_FABRIC_IFNAME", value)

    @field_validator("model_dir", "log_dir", "procfs", "sysfs", "kmsg")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        # A compose .env or a shell rc often says `~/models/...`; no shell expands it on the way in.
        return value.expanduser() if value is not None else None

    def overrides(self) -> list[str]:
        return [part.strip() for part in self.set.split(";") if part.strip()]


@cache
def _from_environment() -> type[ApplianceSettings]:
    """The settings read from the environment: built once, on the first call that has an APPLIANCE_ variable."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class FromEnvironment(BaseSettings, ApplianceSettings):
        # pydantic-settings' default is case-insensitive names: `appliance_profile` counts too
        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    return FromEnvironment


def load_settings() -> ApplianceSettings:
    from pydantic import ValidationError

    from appliance.errors import ApplianceError

    try:
        if any(name.upper().startswith(ENV_PREFIX) for name in os.environ):
            return _from_environment()()
        return ApplianceSettings()
    except ValidationError as exc:
        problems = [f"{ENV_PREFIX}{str(e['loc'][0]).upper()}={show(e.get('input'))}: {e['msg']}" for e in exc.errors()]
        raise ApplianceError(
            "invalid environment: " + "; ".join(problems),
            field=problems[0].split("=")[0], fix="correct or unset the variable(s) named",
        ) from None
