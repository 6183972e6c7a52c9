"""The sections of a resolved serve that launch.json carries to the programs of a running serve, typed in the
standard library alone: `appliance exec` (every engine restart) and the exporter read them without pydantic
(appliance/run/launchfile.py reads and writes the file).

    Program          one supervisord program as it runs (the engine, a setup step, the canary's watch)
    ExporterSection  every input of `appliance exporter --launch`, as data
    PlanSection      the plan the engine's program was made from: its argv, the env it sets, the setup steps
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.jsonstrict import JsonObject
from appliance.multinode.fabric_report import FabricReport
from appliance.placement import ROLES

if TYPE_CHECKING:
    from appliance.profile.topology import Role


@dataclass(frozen=True)
class Program:
    """One program as it runs: argv (argv[0] absolute where this environment has it) and the env it adds."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExporterSection:
    """What this node's exporter needs from the launch, as data: `appliance exporter --launch` builds its config from
    it. Fields other issues add (bind and probe settings, load progress, ...) go here, with a default, so a section
    written without them still reads."""

    log: Path
    """The engine's log in the run folder."""
    port: int
    host: str
    """Bind address: every interface, so the head's exporter reaches a worker's over the fabric."""
    role: Role
    engine_url: str | None
    peers: Mapping[int, str] = field(default_factory=dict)
    """On the head: each worker's exporter (rank -> URL), from the rendezvous, to compare what each rank loaded."""
    canary_state: Path | None = None
    """The correctness canary's state file, where the profile runs one on this node."""
    fabric: FabricReport | None = None
    """This rank's fabric qualification (K25), for /status and the metrics."""

    def to_json(self) -> JsonObject:
        return {"log": str(self.log), "port": self.port, "host": self.host, "role": self.role,
                "engine_url": self.engine_url, "peers": {str(r): u for r, u in sorted(self.peers.items())},
                "canary_state": None if self.canary_state is None else str(self.canary_state),
                "fabric": None if self.fabric is None else self.fabric.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExporterSection:
        port, host = data["port"], data["host"]
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ValueError(f"exporter.port is {str(port)[:40]!r}, not a port (1-65535)")
        if not isinstance(host, str) or not host.strip():
            # "" would bind every interface: the launch names the address it binds, always
            raise ValueError(f"exporter.host is {str(host)[:80]!r}, not an address to bind")
        canary, fabric, role = data.get("canary_state"), data.get("fabric"), data["role"]
        if role not in ROLES:
            raise ValueError(f"exporter.role is {role!r}, not one of {', '.join(ROLES)}")
        return cls(log=Path(data["log"]), port=port, host=host, role=role,
                   engine_url=data["engine_url"], peers={int(r): str(u) for r, u in data.get("peers", {}).items()},
                   canary_state=None if canary is None else Path(canary),
                   fabric=None if fabric is None else FabricReport.from_json(fabric))


def _words(name: str, value: object) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(w, str) and w for w in value):
        raise ValueError(f"{name} must be a non-empty list of words")
    return list(value)


@dataclass(frozen=True)
class PlanSection:
    """The plan (render/serveplan.py's ServePlan, its programs made absolute) as launch.json holds it; its role is
    the placement's."""

    argv: list[str]
    env: dict[str, str]
    setup: list[list[str]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"argv": self.argv, "env": self.env, "setup": self.setup}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PlanSection:
        env, setup = data["env"], data.get("setup", [])
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError("plan.env must map names to text")
        if not isinstance(setup, list):
            raise ValueError("plan.setup must be a list of commands")
        return cls(_words("plan.argv", data["argv"]), dict(env), [_words("plan.setup", s) for s in setup])
