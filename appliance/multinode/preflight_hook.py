"""The call `appliance run` makes between render and supervisord on a head or worker."""

from __future__ import annotations

from appliance.multinode.identity import local_identity
from appliance.multinode.rendezvous import Peer, preflight
from appliance.profile.model import Profile
from appliance.render.plan import Placement, ServePlan


def cross_node_preflight(profile: Profile, plan: ServePlan, place: Placement, *, timeout_s: float,
                         health_port: int | None = None) -> dict[int, Peer]:
    """Exchange identities with the other nodes; ApplianceError (exit 2) when they differ or never come.

    A worker tells the head its exporter's `health_port`; the head gets back its workers (rank -> Peer)."""
    return preflight(profile, plan, place, local_identity(profile), timeout_s, health_port)
