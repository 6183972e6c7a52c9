"""`appliance upgrade promote --beside`: a promote with no time out of service, for a serve behind its front
(server.front, appliance/run/front.py).

The candidate first serves as a **bridge**: a serve of its own beside the incumbent, started the way `qualify`
starts a side-by-side candidate (U3 must find room for both: on discrete GPUs, cards that run nothing, as many as
the serve has ranks; hostmem/cards.py), without a front. Once it is ready, the front routes
each new request to it. The serve's own engine runs no request any more once those in flight have finished, and only
then does it restart on the new channel (the promote's usual switch and proof, its canary on the engine itself).
Then the front routes back, and the bridge stops once its engine runs no request. The serve keeps its identity: its
run folder, supervisord, exporter and crash guard.

Whatever ends the promote (proven, rolled back, failed, interrupted), the front is pointed back at the serve's own
engine before the bridge stops. The front falls back to its own engine by itself when the bridge does not answer,
so a promote killed outright (the bridge dies with it, run/tether.py) costs a restart's gap, no more.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.health.engine import wait_idle
from appliance.upgrade.candidate import Pair, Request
from appliance.upgrade.serve import RunningServe, StartedServe

Report = Callable[[str], None]
SETTLE_S = 1.0
"""After a switch of the front: a request it forwarded just before reaches the old engine within this."""
DRAIN_POLL_S = 0.25


def point_front(run_dir: Path, backend: str) -> None:
    """front.json names `backend`, replaced by a rename through the one writer (the front reads it again when its
    stat changes)."""
    from appliance.run.launch import front_state
    from appliance.safe_write import write_file
    from appliance.serve.resolved import FRONT_STATE

    write_file(run_dir / FRONT_STATE, front_state(backend), field="--run-dir")


def drained(engine_url: str, bound_s: float) -> tuple[bool, float]:
    """Until the engine at `engine_url` runs no request, or has stopped answering, at most `bound_s`:
    (drained, seconds)."""
    time.sleep(SETTLE_S)
    result, took, _ = wait_idle(engine_url, max(0.0, bound_s - SETTLE_S), DRAIN_POLL_S)
    return result != "busy", SETTLE_S + took


def require_front(serve: RunningServe) -> str:
    """The serve's own engine URL, where the serve runs behind its front; exit 2 otherwise."""
    from appliance.serve.resolved import FRONT

    if FRONT not in serve.launch.programs or serve.launch.placement.engine_url is None:
        raise ApplianceError(f"--beside: the serve in {serve.run_dir} has no front", field="--beside",
                             value=str(serve.run_dir),
                             fix="set server.front: true in the profile and restart the serve (appliance run), or "
                                 "promote without --beside (a restart: out of service while the engine starts)",
                             reason="clients must reach the serve through a front that can route them to the bridge")
    return serve.launch.placement.engine_url


def reset_front(serve: RunningServe, report: Report) -> None:
    """A front that a promote killed outright left on its bridge routes to the serve's own engine again, before
    anything else switches: the bridge's port was a free one, and something else may take it."""
    from appliance.serve.resolved import FRONT, FRONT_STATE

    own = serve.launch.placement.engine_url
    if FRONT not in serve.launch.programs or own is None:
        return
    try:
        said = json.loads((serve.run_dir / FRONT_STATE).read_text()).get("backend")
    except (OSError, ValueError, AttributeError):
        said = None
    if said != own:
        point_front(serve.run_dir, own)
        report(f"the front routed to {said}, left by an earlier promote; it routes to the serve's own engine again")


def require_same_cards(pair: Pair) -> None:
    """On GPUs, the serve's engine restarts on the candidate's ranks with the environment it has: on the very cards
    it holds only while the count stays (more would reach cards the bridge takes); exit 2 otherwise."""
    from appliance.hostmem.admission import ranks_on_node

    before, after = ranks_on_node(pair.incumbent.profile), ranks_on_node(pair.candidate.profile)
    if pair.candidate.profile.hardware.target == "gpu" and before != after:
        raise ApplianceError(f"--beside: the candidate runs {after} rank(s) on the node, the serve {before}",
                             field="--beside", value=pair.candidate.profile.name,
                             fix="promote without --beside (a restart), or keep the ranks and change them in a "
                                 "promote of their own",
                             reason="the serve's engine restarts on the cards it holds; with more ranks it would "
                                    "reach the cards the bridge runs on")


@dataclass
class Bridge:
    """The candidate serving beside the incumbent while the incumbent restarts."""

    serve: StartedServe
    run_dir: Path
    """The incumbent's run folder (its front.json)."""
    own_engine: str
    report: Report
    cards: str | None = None
    """On discrete GPUs, the cards the bridge runs on (NVML's indices)."""

    @property
    def engine_url(self) -> str:
        return str(self.serve.launch.placement.engine_url)

    def take_traffic(self, bound_s: float) -> tuple[bool, float]:
        """The front to the bridge, then until the serve's own engine runs no request."""
        point_front(self.run_dir, self.engine_url)
        self.report(f"the front routes to the bridge ({self.engine_url}); waiting for the serve's own engine to "
                    f"finish its requests")
        return drained(self.own_engine, bound_s)

    def hand_back(self, bound_s: float) -> tuple[bool, float]:
        """The front to the serve's own engine, then until the bridge runs no request; the bridge stops whatever
        happened (it is tethered to this command, run/tether.py: it could not outlive it)."""
        try:
            point_front(self.run_dir, self.own_engine)
            self.report(f"the front routes to the serve's own engine again ({self.own_engine})")
            return drained(self.engine_url, bound_s)
        finally:
            self.serve.stop()
            self.report("the bridge stopped")


def open_bridge(req: Request, pair: Pair, incumbent: RunningServe, folder: Path, budget_s: float,
                procfs: Path, report: Report) -> Bridge:
    """The candidate started beside the incumbent (U3 must find room for both) and ready; ApplianceError (exit 2)
    when it does not fit, or it did not turn ready (it is stopped again then)."""
    from appliance.rules.upgrade import RULES
    from appliance.upgrade.mode import choose_mode
    from appliance.upgrade.qualify import free_port, serve_beside

    own = require_front(incumbent)
    require_same_cards(pair)
    # U3: the host must hold both; on discrete GPUs the bridge takes free cards of its own
    choice = choose_mode(pair.candidate.profile, "auto", procfs)
    if choice.mode != "side-by-side":
        raise ApplianceError(f"--beside: the host cannot hold the bridge beside the serve: {choice.why}",
                             field="--beside", value=pair.candidate.profile.name,
                             fix="promote without --beside (a restart: out of service while the engine starts)"
                                 + (f"; or {choice.admission.fix}" if choice.admission and choice.admission.fix
                                    else ""),
                             reason=RULES["U3"].reason)
    place = incumbent.launch.placement
    taken = {place.api_port, place.listen_port, incumbent.launch.exporter.port}
    api = free_port(taken)
    ports = (api, free_port(taken | {api}))
    # The bridge serves its API on a port of its own, without a front of its own (qualify.side_sets).
    serve, ready, _ = serve_beside(req, pair, folder / "bridge-serve", ports, budget_s, report, cards=choice.cards)
    if not ready.ok:
        said = serve.tail()
        serve.stop()
        raise ApplianceError(f"--beside: the bridge on channel {pair.to_channel.name} did not turn ready: {ready.why}"
                             f"\n{said}", field="--to", value=pair.to_channel.name,
                             fix="nothing was switched; read the bridge's output above (in "
                                 f"{folder / 'bridge-serve'}), or qualify the candidate first")
    return Bridge(serve, incumbent.run_dir, own, report, choice.cards.indices if choice.cards else None)
