"""The ServePlan (argv + env + role): the type every view of a plan shares. Where a process stands (Placement, and
its one resolution against the profile) is appliance/placement.py, re-exported here for the views."""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.placement import Placement, ResolvedPlacement, engine_api_url, http_url, rank_placements
from appliance.profile.topology import Role


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


__all__ = ["Placement", "ResolvedPlacement", "ServePlan", "engine_api_url", "http_url", "rank_placements"]
