"""The call `appliance run` makes between render and supervisord on a head or worker."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from appliance.errors import ApplianceError
from appliance.multinode.identity import local_identity
from appliance.multinode.rendezvous import DEFAULT_TIMEOUT_S, preflight
from appliance.profile.model import Profile
from appliance.render.plan import Placement, ServePlan

ENV_TIMEOUT = "APPLIANCE_RENDEZVOUS_TIMEOUT_S"


def rendezvous_timeout(env: Mapping[str, str] | None = None) -> float:
    raw = (os.environ if env is None else env).get(ENV_TIMEOUT, "")
    if not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 1 <= value <= 86400:
        raise ApplianceError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds from 1 to 86400",
                             field=ENV_TIMEOUT, value=raw, fix=f"unset it (default {DEFAULT_TIMEOUT_S:g}s)")
    return value


def cross_node_preflight(profile: Profile, profile_digest: str, plan: ServePlan, place: Placement,
                         timeout_s: float | None = None) -> None:
    """Exchange identities with the other nodes; ApplianceError (exit 2) when they differ or never come."""
    identity = replace(local_identity(profile), profile_digest=profile_digest)
    preflight(profile, plan, place, identity, rendezvous_timeout() if timeout_s is None else timeout_s)
