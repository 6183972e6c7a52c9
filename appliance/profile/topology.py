"""Where a node stands in a serve: its role from the profile's node count and the node's rank.

Beside the profile (not the rendered plan): the health path, the doctor and the launch all ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class RankView:
    """What one node's serve log can show: its role, and whether it hosts a rank that leads a device group.

    vLLM logs some lines only from the rank that is rank 0 of its process group, and its `*_once` messages (default
    scope "local") only from the first rank on each node: `vLLM is using nccl==X` is both
    (vllm/distributed/device_communicators/pynccl.py, `if self.rank == 0:` around `logger.info_once`, in 0.27.1 and
    0.32.0). A node prints it only when its first local rank is rank 0 of a group of more than one rank.
    """

    role: Role
    node_rank: int
    group_leader: bool


def group_leaders(profile: Profile) -> frozenset[int]:
    """Global ranks that are rank 0 of a device group of size > 1, in vLLM's layout (parallel_state.py:
    ranks = arange(world).reshape(dp, pp, pcp, tp); TP groups are rows of tp, PP groups columns of stride tp; the
    MoE EP group equals the TP group when dp = pcp = 1, which the profiles render)."""
    tp, pp = profile.parallel.tensor, profile.parallel.pipeline
    leaders: set[int] = set()
    if tp > 1:
        leaders |= {stage * tp for stage in range(pp)}
    if pp > 1:
        leaders |= set(range(tp))
    return frozenset(leaders)


def rank_view(profile: Profile, node_rank: int) -> RankView:
    """The view of node `node_rank` (validated like role_for). Node n hosts global ranks n*g .. n*g+g-1
    (g = GPUs per node: vLLM's multi-node launcher numbers ranks node by node)."""
    role = role_for(profile, node_rank)
    first = node_rank * profile.hardware.gpus_per_node
    return RankView(role, node_rank, first in group_leaders(profile))


def ib_devices(hca: str | None) -> list[str]:
    """The devices an NCCL_IB_HCA value names: `a,b`, `=a,b` (exact match), `a:1` (a port); `^a` excludes and
    so names none to use."""
    if not hca or hca.startswith("^"):
        return []
    return [d.split(":", 1)[0] for d in hca.lstrip("=").split(",") if d.strip()]
