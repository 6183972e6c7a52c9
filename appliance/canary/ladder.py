"""The step-down ladder: on confirmed corruption, the next safer rung, validated, then the engine
restarted with it through supervisord.

Rung 0 is the profile as written; rung k adds the `set` of the profile's `canary.step_down[k-1]` to
those of the rungs before it. The rung's overrides go on top of the profile the serve runs now, as launch.json
holds it (resolved, with each value's origin): no program of a running serve loads the YAML again, and a channel
that `appliance upgrade promote` switched to meanwhile stays. The sets are cumulative assignments, so the same rung
comes out on rung 0's profile or on an earlier rung's. A rung is taken only if the profile with its overrides passes
the rules (K*), and only if no command-line --set outweighs one of its keys. The engine is restarted
by resolving the launch again in this process (run/launch.py `relaunch`: the same steps `appliance run` takes,
from the placement the serve was started with, with the rung's profile) — launch.json changes, supervisord.conf
(which names only that file) does not — then `supervisorctl restart vllm`: the engine starts again from the new
launch.json; the exporter and the canary keep running, and the exporter judges the rung's profile from then on
(run/launch_profile.py). Single-node only (rule Q1): other ranks would keep the old settings.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.errors import ApplianceError
from appliance.health.canary_state import RungJson
from appliance.profile.canary import Canary

if TYPE_CHECKING:
    from appliance.profile.loader import LoadedProfile


@dataclass(frozen=True)
class RungPlan:
    index: int
    """0 = the profile as written; k = after taking step_down[k-1]."""
    name: str
    sets: list[str]
    """Every override this rung adds to the profile (cumulative)."""

    def to_json(self) -> RungJson:
        return {"index": self.index, "name": self.name, "set": self.sets}


def rung(canary: Canary, index: int) -> RungPlan:
    if index == 0:
        return RungPlan(0, "profile", [])
    taken = canary.step_down[:index]
    return RungPlan(index, taken[-1].name, [item for r in taken for item in r.set])


def last_index(canary: Canary) -> int:
    return len(canary.step_down)


RUNG_ORIGIN = "canary:step_down"
"""The origin a rung's values carry in launch.json (`appliance config` style)."""


def load_rung(base: LoadedProfile, plan: RungPlan) -> LoadedProfile:
    """`base` (the profile the serve runs, from launch.json) with the rung's overrides. A key a command-line --set
    pinned is refused: `appliance run`'s --set outweighs every layer below it, the ladder included."""
    from appliance.profile.loader import with_overrides

    for item in plan.sets:
        key = item.partition("=")[0].strip()
        origin = base.origin(key)
        if origin.startswith("cli"):
            raise ApplianceError(f"rung {plan.name}: {key} is pinned by --set on the command line ({origin})",
                                 field=f"canary.step_down.{plan.name}", value=item,
                                 fix=f"drop --set {key}=… from `appliance run`, or this rung from the ladder",
                                 reason="the rung would be outweighed: a restart that changes nothing")
    return with_overrides(base, plan.sets, f"{RUNG_ORIGIN}.{plan.name}")


def validate_rung(base: LoadedProfile, plan: RungPlan) -> dict[str, str]:
    """The rung on `base`, through the rules; the rung's keys and their values as given.
    Raises ApplianceError naming why the rung cannot be taken."""
    from appliance.rules import context_for, require_valid

    loaded = load_rung(base, plan)
    require_valid(context_for(loaded.profile), f"rung {plan.name} not taken")
    return {item.partition("=")[0].strip(): item.partition("=")[2].strip() or "null" for item in plan.sets}


def restart_with(plan: RungPlan, *, base: LoadedProfile, run_dir: Path, report: Callable[[str], None] = print,
                 timeout: float = 120) -> str:
    """Resolve the launch again with the rung (launch.json; supervisord.conf names only that file, so it does not
    change) and restart the engine program, which reads it again; supervisorctl's output. `report`: the launch's
    own notes (warnings the rung's profile draws)."""
    from appliance.paths import appliance_home, venv_executable
    from appliance.render.supervisord import CONF_FILE
    from appliance.run.launch import LAUNCH_FILE, relaunch
    from appliance.settings import load_settings

    loaded = load_rung(base, plan)
    try:
        relaunch(loaded, run_dir / LAUNCH_FILE, load_settings(), appliance_home(), report)
    except ApplianceError as exc:
        raise ApplianceError(f"rung {plan.name}: resolving the serve again failed: {exc.message}",
                             field=exc.field or f"canary.step_down.{plan.name}", value=plan.sets,
                             fix=exc.fix or "run `appliance validate` with these overrides to see why",
                             reason=exc.reason) from None
    ctl = venv_executable("supervisorctl") or "supervisorctl"
    done = subprocess.run([ctl, "-c", str(run_dir / CONF_FILE), "restart", "vllm"], capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ApplianceError(f"rung {plan.name}: supervisorctl restart failed: {(done.stdout + done.stderr).strip()}",
                             field="supervisord", value=str(run_dir), fix="see the supervisord log in the run dir")
    return done.stdout.strip()
