"""The ServePlan (argv + env + role) and where a process stands (Placement): the types every view of a plan
shares, with the addresses derived from them (engine API URL, rendezvous port)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from appliance.bounds import MODEL_SYNC_PORT_OFFSET, QUALIFY_PORT_OFFSET, RENDEZVOUS_PORT_OFFSET
from appliance.profile.model import Profile
from appliance.profile.topology import Role

"""The appliance's own rendezvous listens one above the engine's master port."""


@dataclass(frozen=True)
class Placement:
    """Where this process runs in the serve: from APPLIANCE_* settings or CLI flags."""

    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    host_ip: str | None = None
    fabric_ifname: str | None = None
    model_dir: Path | None = None


@dataclass(frozen=True)
class ServePlan:
    argv: list[str]
    env: dict[str, str]
    role: Role
    setup: list[list[str]] = field(default_factory=list)
    """Commands that must run before argv on this node (the Ray backend's `ray start`)."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"argv": self.argv, "env": self.env, "role": self.role}
        if self.setup:
            out["setup"] = self.setup
        return out


def http_url(host: str, port: int) -> str:
    """http://HOST:PORT, an IPv6 literal in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def engine_api_url(role: Role, port: int, master_addr: str | None) -> str | None:
    """Where a rank's exporter asks vLLM: its own API server, or on a headless worker (no API of its own)
    the head's, so the worker is healthy only while its head serves (K22)."""
    if role == "worker":
        return http_url(master_addr, port) if master_addr else None
    return http_url("127.0.0.1", port)


def rendezvous_port(profile: Profile, placement: Placement) -> int:
    return (placement.master_port or profile.distributed.master_port) + RENDEZVOUS_PORT_OFFSET


def qualify_port(profile: Profile, placement: Placement) -> int:
    return (placement.master_port or profile.distributed.master_port) + QUALIFY_PORT_OFFSET


def model_sync_port(profile: Profile, placement: Placement) -> int:
    """Where the head serves its verified snapshot to the workers (distributed.sync_model), and the default port of
    `appliance sync-model`."""
    return (placement.master_port or profile.distributed.master_port) + MODEL_SYNC_PORT_OFFSET
