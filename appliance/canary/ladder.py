"""The step-down ladder: on confirmed corruption, the next safer rung, validated, then the engine
restarted with it through supervisord.

Rung 0 is the profile as written; rung k adds the `set` of the profile's `canary.step_down[k-1]` to
those of the rungs before it. A rung is taken only if the profile with its overrides loads and passes
the rules (K*), and only if no command-line --set outweighs one of its keys. The engine is restarted
by re-rendering the launch through `appliance run --dry-run` (the one place a serve is rendered) with the
rung in APPLIANCE_SET — launch.json changes, supervisord.conf (which names only that file) does not — then
`supervisorctl restart vllm`: the engine starts again from the new launch.json; the exporter and the canary
keep running, and the exporter judges the rung's profile from then on (run/launch_profile.py). Single-node only
(rule Q1): other ranks would keep the old settings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.profile.canary import Canary


@dataclass(frozen=True)
class RungPlan:
    index: int
    """0 = the profile as written; k = after taking step_down[k-1]."""
    name: str
    sets: list[str]
    """Every override this rung adds to the profile (cumulative)."""

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "name": self.name, "set": self.sets}


def rung(canary: Canary, index: int) -> RungPlan:
    if index == 0:
        return RungPlan(0, "profile", [])
    taken = canary.step_down[:index]
    return RungPlan(index, taken[-1].name, [item for r in taken for item in r.set])


def last_index(canary: Canary) -> int:
    return len(canary.step_down)


def validate_rung(source: str, env_overrides: list[str], cli_overrides: list[str], plan: RungPlan) -> dict[str, str]:
    """Load the profile with the rung and run the rules; the rung's keys and their values as loaded.
    Raises ApplianceError naming why the rung cannot be taken."""
    from appliance.profile.loader import load_profile
    from appliance.rules import context_for, require_valid

    loaded = load_profile(source, env_overrides=[*env_overrides, *plan.sets], cli_overrides=cli_overrides)
    require_valid(context_for(loaded.profile), f"rung {plan.name} not taken")
    effective: dict[str, str] = {}
    for item in plan.sets:
        key = item.partition("=")[0].strip()
        origin = loaded.origin(key)
        if origin.startswith("cli"):
            raise ApplianceError(f"rung {plan.name}: {key} is pinned by --set on the command line ({origin})",
                                 field=f"canary.step_down.{plan.name}", value=item,
                                 fix=f"drop --set {key}=… from `appliance run`, or this rung from the ladder",
                                 reason="the rung would be outweighed: a restart that changes nothing")
        effective[key] = item.partition("=")[2].strip() or "null"
    return effective


def restart_with(plan: RungPlan, *, source: str, run_dir: Path, cli_overrides: list[str],
                 env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Re-render the launch with the rung (launch.json; supervisord.conf names only that file, so it does not
    change) and restart the engine program, which reads it again; supervisorctl's output."""
    from appliance.paths import venv_executable

    env = dict(os.environ if env is None else env)
    env["APPLIANCE_SET"] = ";".join([s for s in [env.get("APPLIANCE_SET", "")] if s] + plan.sets)
    argv = [sys.executable, "-m", "appliance", "run", source, "--run-dir", str(run_dir), "--dry-run", "--skip-doctor"]
    for item in cli_overrides:
        argv += ["--set", item]
    rendered = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if rendered.returncode != 0:
        raise ApplianceError(f"rung {plan.name}: re-rendering the serve failed: {rendered.stderr.strip()[-800:]}",
                             field=f"canary.step_down.{plan.name}", value=plan.sets,
                             fix="run `appliance validate` with these overrides to see why")
    ctl = venv_executable("supervisorctl") or "supervisorctl"
    done = subprocess.run([ctl, "-c", str(run_dir / "supervisord.conf"), "restart", "vllm"], capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ApplianceError(f"rung {plan.name}: supervisorctl restart failed: {(done.stdout + done.stderr).strip()}",
                             field="supervisord", value=str(run_dir), fix="see the supervisord log in the run dir")
    return done.stdout.strip()
