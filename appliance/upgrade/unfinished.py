"""A promote that never finished: killed (SIGKILL, the OOM killer, a reboot) after it switched the serve's files to
its candidate, so `active.json` names a promote record with no outcome. Nothing finishes it by itself: the
candidate is unqualified, and the next engine restart would serve it. The switch lock says whether it still runs
(the kernel drops a dead holder's lock), so `upgrade status` tells a killed promote from one in progress, a new
promote refuses to stack on it, and `upgrade rollback` returns to the incumbent and closes the record.
"""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ApplianceError
from appliance.profile.active import Active
from appliance.upgrade.history import Record, records, utc_now, write_record

KILLED = "killed"
"""The outcome rollback writes into a promote record that never got one."""


def switched_and_unfinished(profile: str, active: Active | None, home: Path | None = None) -> Record | None:
    """The promote record `active` names when it has no outcome (the promote switched the files and stopped)."""
    if active is None or not active.origin.startswith("upgrade:") or not active.decision:
        return None
    found = next((r for r in records(profile, home) if r.id == active.decision), None)  # never a path from the file
    if found is None or found.kind != "promote" or found.data.get("outcome"):
        return None
    return found


def refuse_stacking(profile: str, active: Active | None, run_dir: Path) -> None:
    """Called with the switch lock held: a promote record without an outcome then has no process left to end it."""
    stuck = switched_and_unfinished(profile, active)
    if stuck is None:
        return
    to = (stuck.data.get("to") or {}).get("channel")
    came = (stuck.data.get("from") or {}).get("channel")
    raise ApplianceError(
        f"U4 the promote {stuck.id} of {profile} to {to} never finished: it switched active.json (and maybe "
        f"launch.json) to its candidate and stopped without an outcome", field="active.json decision",
        value=stuck.id, fix=f"`appliance upgrade rollback {profile} --run-dir {run_dir}` returns the serve to {came} "
                            "and closes that record; then promote again",
        reason="the candidate was never proven ready and healthy, and a promote on top of it would make it the "
               "rollback target")


def either_side(stuck: Record) -> set[str]:
    """The profile digests a serve killed mid-switch may run: the incumbent's (launch.json not yet rewritten) or the
    candidate's; a rollback takes either."""
    return {str(side.get("profile_digest")) for side in (stuck.data.get("from") or {}, stuck.data.get("to") or {})
            if side.get("profile_digest")}


def close_killed(stuck: Record, rollback_id: str, rolled_back: bool) -> None:
    """The killed promote's record gets its outcome from the rollback that cleared it up."""
    how = "rolled back" if rolled_back else "a rollback that failed"
    write_record(stuck.path, {**stuck.data, "outcome": KILLED, "finished_at": utc_now(),
                              "why": f"stopped after the switch without an outcome (no process held its switch "
                                     f"lock); cleared up by {how}: {rollback_id}"})
