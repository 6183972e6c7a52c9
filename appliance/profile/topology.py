"""Where a node stands in a serve: its role from the profile's node count and the node's rank.

Beside the profile (not the rendered plan): the health path, the doctor and the launch all ask it.
"""

from __future__ import annotations

from typing import Literal

from appliance.errors import ApplianceError
from appliance.profile.model import Profile

Role = Literal["head", "worker", "single"]


def role_for(profile: Profile, node_rank: int) -> Role:
    if profile.hardware.nodes == 1:
        if node_rank != 0:
            raise ApplianceError(
                f"node rank {node_rank} given for the single-node profile {profile.name}",
                field="APPLIANCE_NODE_RANK", value=node_rank, fix="unset APPLIANCE_NODE_RANK (or use 0)")
        return "single"
    if not 0 <= node_rank < profile.hardware.nodes:  # a negative rank from any source is no worker
        raise ApplianceError(
            f"node rank {node_rank} is outside the {profile.hardware.nodes}-node profile {profile.name}",
            field="APPLIANCE_NODE_RANK", value=node_rank,
            fix=f"use a rank from 0 (head) to {profile.hardware.nodes - 1}")
    return "head" if node_rank == 0 else "worker"


def ib_devices(hca: str | None) -> list[str]:
    """The devices an NCCL_IB_HCA value names: `a,b`, `=a,b` (exact match), `a:1` (a port); `^a` excludes and
    so names none to use."""
    if not hca or hca.startswith("^"):
        return []
    return [d.split(":", 1)[0] for d in hca.lstrip("=").split(",") if d.strip()]
