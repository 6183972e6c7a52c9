"""resolve(): one serve's facts, resolved once, in one place; every command and program of a serve takes the
ResolvedServe (or its launch.json) from here and resolves no piece of it again.

    placement      where a program stands that serves nothing itself (the gate's target, `sync-model`'s port, an
                   exporter run by hand), and the first step of resolve(): the one call of placement.resolve_placement
    resolve        the lock and facts of the profile's channel, the placement (+ a multi-node rank's network identity
                   from this host's tables, and the checkpoint folder located on disk), the plan

A render that stands on no node (the rules' check of each rank's argv, the manifests, `upgrade plan`, `appliance
profiles`) renders every rank from the placement owner's `rank_placements` instead: no node, no serve.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from appliance.lock import channel_lock
from appliance.multinode.netident import Tables, with_identity
from appliance.placement import Placement, ResolvedPlacement, resolve_placement
from appliance.profile.loader import LoadedProfile
from appliance.profile.model import Profile
from appliance.render.plan import build_plan, plan_facts
from appliance.serve.resolved import ResolvedServe

MODEL_DIR_LOCATED = "derived:the checkpoint located on disk"


def placement(profile: Profile, given: Placement | ResolvedPlacement | None = None, *,
              interface_ip: Callable[[str], str] | None = None, tables: Tables | None = None,
              model_dir: Path | None = None) -> ResolvedPlacement:
    """This node's placement: given values over the profile's (appliance/placement.py), resolved here alone;
    `interface_ip` reads the fabric interface's address (a node that runs something, never a render for another
    node). A placement already resolved is taken as it is (`appliance run` reads the role and the head's address
    before it locates the checkpoint). `tables`: this host's network tables, to resolve a multi-node rank's network
    identity (K39: before the rendezvous, so before NCCL); `model_dir`: the checkpoint folder located on disk."""
    place = given if isinstance(given, ResolvedPlacement) else resolve_placement(profile, given,
                                                                                 interface_ip=interface_ip)
    if tables is not None:
        place = with_identity(profile, place, tables)
    return place if model_dir is None else place.with_model_dir(model_dir, MODEL_DIR_LOCATED)


def resolve(loaded: LoadedProfile, at: Placement | ResolvedPlacement | None = None, *,
            interface_ip: Callable[[str], str] | None = None, tables: Tables | None = None,
            model_dir: Path | None = None) -> ResolvedServe:
    """The serve of `loaded` on this node: its placement (`placement`, with the same arguments), the lock and facts
    of its channel, the plan. Raises ApplianceError (exit 2) where the plan cannot be made (a multi-node rank without
    the head's address)."""
    profile = loaded.profile
    place = placement(profile, at, interface_ip=interface_ip, tables=tables, model_dir=model_dir)
    lock = channel_lock(profile.engine.channel, profile.hardware.target)
    facts = plan_facts(profile)
    return ResolvedServe(loaded, lock, facts, place, build_plan(profile, place, facts=facts))

