"""Where this process stands in a serve: the values a node is given (flags, APPLIANCE_*) and their one resolution
against the profile, each with its origin.

    Placement           what was given (None: not given), as `cliargs.placement_from_args` reads it: flags over
                        APPLIANCE_* (that precedence is written there, once)
    resolve_placement   given values over the profile's (this precedence is written here, once) -> ResolvedPlacement:
                        rank and role, master port (+ the rendezvous and qualification ports above it), API and
                        exporter ports, the engine URL the exporter asks, this node's fabric address
    ResolvedPlacement   what `appliance run` renders, rendezvous and qualifies with, and writes to launch.json
    rank_placements     every rank's, for a render that stands on no node (the rules, the manifests)

Origins read like a profile value's (`appliance config`): `cli:--master-port`, `env:APPLIANCE_NODE_RANK`,
`profile:distributed.master_port`, `derived:…` (computed from other values, which it names), `default`, `given`
(a caller that named no source: tests, another node's render).

Standard library only at run time: launch.json carries a ResolvedPlacement to programs that do not import pydantic
(run/launchfile.py). The profile is read through its attributes; its types are named for the type checker only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.bounds import MODEL_SYNC_PORT_OFFSET, QUALIFY_PORT_OFFSET, RENDEZVOUS_PORT_OFFSET, check_health_port
from appliance.jsonstrict import JsonObject

if TYPE_CHECKING:
    from appliance.profile.model import Profile
    from appliance.profile.topology import Role

ROLES = ("head", "worker", "single")
GIVEN = "given"
DEFAULT = "default"
RESOLVED_KINDS = ("default", "profile:", "derived:")
"""Origins the resolution itself assigns; every other origin names an input (a flag, a variable, a caller)."""


@dataclass(frozen=True)
class Placement:
    """What this node was told about its place in the serve; None = not told (the profile or a derivation
    decides). `origins` names where each given value came from (field -> origin; missing = `given`)."""

    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    host_ip: str | None = None
    fabric_ifname: str | None = None
    model_dir: Path | None = None
    health_port: int | None = None
    """The exporter's port (APPLIANCE_HEALTH_PORT, `appliance exporter --port`): not in the profile's digest, so two
    ranks on one host can differ."""
    engine_url: str | None = None
    """Where the exporter asks vLLM (`appliance exporter --engine-url`); else derived from the role."""
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    def origin(self, name: str) -> str:
        return self.origins.get(name, GIVEN)


@dataclass(frozen=True)
class ResolvedPlacement:
    """Every value of this node's place, resolved once (`resolve_placement`), with its origin."""

    node_rank: int
    role: Role
    master_addr: str | None
    master_port: int
    """vLLM's own rendezvous (mp launcher / Ray); the appliance's exchange, the fabric qualification and the model
    sync use the three ports above it."""
    host_ip: str | None
    """This node's address on the fabric (VLLM_HOST_IP; a worker's source address at the exchange)."""
    fabric_ifname: str | None
    model_dir: Path | None
    api_port: int
    health_port: int
    engine_url: str | None
    """The vLLM API this node's exporter asks: its own, or on a headless worker the head's (K22)."""
    rdma_device: str | None = None
    """The RDMA device NCCL uses on this node (NCCL_IB_HCA), and below its RoCE v2 GID index: resolved at run time
    on a multi-node rank (multinode/netident.py, K39), None elsewhere."""
    gid_index: int | None = None
    engine_port: int | None = None
    """With the front (server.front): the port the engine listens on, on loopback behind it; None: the engine listens
    on api_port itself."""
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def listen_port(self) -> int:
        """The port the engine's own API server binds (its --port)."""
        return self.engine_port if self.engine_port is not None else self.api_port

    @property
    def rendezvous_port(self) -> int:
        return self.master_port + RENDEZVOUS_PORT_OFFSET

    @property
    def qualify_port(self) -> int:
        return self.master_port + QUALIFY_PORT_OFFSET

    @property
    def model_sync_port(self) -> int:
        """Where the head serves its verified snapshot to the workers (distributed.sync_model, W4), and the default
        port of `appliance sync-model`."""
        return self.master_port + MODEL_SYNC_PORT_OFFSET

    def origin(self, name: str) -> str:
        return self.origins.get(name, GIVEN)

    def given(self) -> Placement:
        """The inputs this resolution started from (what a flag, a variable or a caller said), so that another
        profile (a canary rung) can be resolved from them again: its own ports, its own derivations."""
        names = {f.name for f in fields(Placement)} - {"origins"}
        kept = {n: getattr(self, n) for n in sorted(names)
                if not self.origin(n).startswith(RESOLVED_KINDS) and getattr(self, n) is not None}
        return Placement(**kept, origins={n: self.origin(n) for n in kept})

    def with_model_dir(self, model_dir: Path, origin: str) -> ResolvedPlacement:
        if model_dir == self.model_dir:
            return self
        return replace(self, model_dir=model_dir, origins={**self.origins, "model_dir": origin})

    def to_json(self) -> JsonObject:
        """{field: {"value": …, "origin": …}}: what launch.json's `placement` holds."""
        out: JsonObject = {}
        for f in fields(self):
            if f.name == "origins":
                continue
            value = getattr(self, f.name)
            out[f.name] = {"value": str(value) if isinstance(value, Path) else value, "origin": self.origin(f.name)}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResolvedPlacement:
        """Raises KeyError / TypeError / ValueError on a shape this appliance did not write."""
        # rdma_device and gid_index are newer than the other fields: a launch.json without them read as unresolved
        data = {"rdma_device": {"value": None, "origin": DEFAULT}, "gid_index": {"value": None, "origin": DEFAULT},
                "engine_port": {"value": None, "origin": DEFAULT}, **data}
        values = {f.name: data[f.name]["value"] for f in fields(cls) if f.name != "origins"}
        origins = {f.name: str(data[f.name]["origin"]) for f in fields(cls) if f.name != "origins"}
        for name in ("node_rank", "master_port", "api_port", "health_port", "gid_index", "engine_port"):
            if name in ("gid_index", "engine_port") and values[name] is None:
                continue
            if not isinstance(values[name], int) or isinstance(values[name], bool):
                raise TypeError(f"placement.{name} is {values[name]!r}, not a number")
        if values["role"] not in ROLES:
            raise ValueError(f"placement.role is {values['role']!r}, not head, worker or single")
        if values["model_dir"] is not None:
            values["model_dir"] = Path(values["model_dir"])
        return cls(**values, origins=origins)


def http_url(host: str, port: int) -> str:
    """http://HOST:PORT, an IPv6 literal in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def engine_api_url(role: Role, port: int, master_addr: str | None) -> str | None:
    """Where a rank's exporter asks vLLM: its own API server, or on a headless worker (no API of its own)
    the head's, so the worker is healthy only while its head serves (K22)."""
    if role == "worker":
        return http_url(master_addr, port) if master_addr else None
    return http_url("127.0.0.1", port)


def api_port_of(profile: Profile) -> int:
    """The port a serve of this profile answers its API on: server.port, read here alone (no given value overrides
    it). The argv's --port, the exporter's engine URL, the doctor, the manifests and the upgrade's probe all read
    it from here, through a resolved placement's api_port where they hold one."""
    return profile.server.port


def resolve_placement(profile: Profile, given: Placement | None = None, *,
                      interface_ip: Callable[[str], str] | None = None) -> ResolvedPlacement:
    """Given values over the profile's: the one place that precedence is written. `interface_ip` reads the fabric
    interface's address (run time only: a render for another node must not need that node's interface).
    Raises ApplianceError for a rank outside the profile and for an exporter port that is the API's."""
    from appliance.profile.topology import role_for

    g = given or Placement()
    origins: dict[str, str] = {}

    def pick(name: str, value: Any, fallback: Any, fallback_origin: str) -> Any:
        if value is not None:
            origins[name] = g.origin(name)
            return value
        origins[name] = fallback_origin
        return fallback

    node_rank = pick("node_rank", g.node_rank, 0, DEFAULT)
    role = role_for(profile, node_rank)
    origins["role"] = "derived:node_rank, hardware.nodes"
    master_port = pick("master_port", g.master_port, profile.distributed.master_port, "profile:distributed.master_port")
    api_port = pick("api_port", None, api_port_of(profile), "profile:server.port")
    health_port = pick("health_port", g.health_port, profile.server.health_port, "profile:server.health_port")
    if role != "worker":  # a headless worker serves no API of its own
        check_health_port(_source(origins["health_port"]), health_port, api_port)
    host_ip = g.host_ip
    if host_ip is not None:
        origins["host_ip"] = g.origin("host_ip")
    elif g.fabric_ifname and interface_ip is not None:
        host_ip, origins["host_ip"] = interface_ip(g.fabric_ifname), f"derived:fabric_ifname {g.fabric_ifname}"
    elif role == "head" and g.master_addr:
        host_ip, origins["host_ip"] = g.master_addr, "derived:master_addr (the head's own address)"
    else:
        origins["host_ip"] = DEFAULT
    engine_port = profile.server.behind_front_port if profile.server.front else None
    origins["engine_port"] = "profile:server.engine_port (server.front)" if engine_port is not None else DEFAULT
    engine_url = pick("engine_url", g.engine_url, engine_api_url(role, engine_port or api_port, g.master_addr),
                      "derived:master_addr, server.port (the head's API)" if role == "worker"
                      else "derived:server.port on loopback")
    for name in ("master_addr", "fabric_ifname", "model_dir"):
        pick(name, getattr(g, name), None, DEFAULT)
    origins["rdma_device"] = origins["gid_index"] = DEFAULT  # a run-time rank's are resolved in multinode/netident
    return ResolvedPlacement(node_rank=node_rank, role=role, master_addr=g.master_addr, master_port=master_port,
                             host_ip=host_ip, fabric_ifname=g.fabric_ifname, model_dir=g.model_dir,
                             api_port=api_port, health_port=health_port, engine_url=engine_url,
                             engine_port=engine_port, origins=origins)


def rank_placements(profile: Profile, head_addr: str | None = None, origin: str = GIVEN) -> list[ResolvedPlacement]:
    """Every rank's place in a render that stands on no node: rank N, told only the head's address (`head_addr`: a
    placeholder that is never contacted, or the pod's variable; `origin` says which). The rules' check of what each
    rank renders, `upgrade plan`, `appliance profiles` and the manifests draw their plans from these; a node that
    stands somewhere is resolved once, by appliance/serve/resolve.py."""
    told = {"master_addr": origin} if head_addr is not None else {}
    return [resolve_placement(profile, Placement(node_rank=rank, master_addr=head_addr, origins=told))
            for rank in range(profile.hardware.nodes)]


def _source(origin: str) -> str:
    """The name a person sets: `cli:--port` -> --port, `env:APPLIANCE_HEALTH_PORT` -> APPLIANCE_HEALTH_PORT."""
    return origin.split(":", 1)[1] if origin.startswith(("cli:", "env:", "profile:")) else origin
