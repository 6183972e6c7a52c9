"""What a plan reads beyond the profile (render/plan.py builds it, render/flags.py's entries read it): a module of its
own so the flag table and the plan do not import each other."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.catalogue import GpuFacts
from appliance.channels.capabilities import Capabilities


@dataclass(frozen=True)
class PlanFacts:
    """What a plan reads beyond the profile, passed in (no hidden read below `plan_facts`): the catalogue's facts of
    the profile's GPU and checkpoint family, and the capabilities of the profile's engine channel."""

    gpu: GpuFacts
    family: str | None
    """The checkpoint's family in the catalogue (deepseek-v4, ...); None for a checkpoint it does not list."""
    caps: Capabilities
