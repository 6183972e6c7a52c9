"""The call `appliance run` makes between render and supervisord on a head or worker."""

from __future__ import annotations

from appliance.multinode.identity import local_identity
from appliance.multinode.rendezvous import preflight
from appliance.profile.model import Profile
from appliance.render.plan import Placement, ServePlan


def cross_node_preflight(profile: Profile, plan: ServePlan, place: Placement, timeout_s: float | None = None) -> None:
    """Exchange identities with the other nodes; ApplianceError (exit 2) when they differ or never come.

    The timeout defaults to APPLIANCE_RENDEZVOUS_TIMEOUT_S (settings, 900 s)."""
    if timeout_s is None:
        from appliance.settings import load_settings

        timeout_s = load_settings().rendezvous_timeout_s
    preflight(profile, plan, place, local_identity(profile), timeout_s)
