"""A switch that never finished, killed (SIGKILL, the OOM killer, a reboot) part way. Two kinds:

- a promote killed after it switched the serve's files to its candidate: `active.json` names a promote record with
  no outcome. Nothing finishes it by itself: the candidate is unqualified, and the next engine restart would serve
  it. `upgrade rollback` returns to the incumbent (active.json's `previous`) and closes the record;
- a return killed part way: a promote switching back after its candidate failed (its record says `switching_back`),
  or a rollback. Both write active.json first and then launch.json, then restart the engine; killed after the first
  write, active.json already names where the serve returns, but launch.json (which the next engine start reads) and
  the running engine may still be the candidate's, and a plain rollback would step back once more. `upgrade
  rollback` finishes that return instead: launch.json re-resolved from active.json, the engine restarted, the record
  closed.

The switch lock says whether a switch still runs (the kernel drops a dead holder's lock), so `upgrade status` tells
a killed switch from one in progress, and a new promote refuses to stack on either.
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


SWITCHING_BACK = "switching_back"
"""Written into a promote's record (the time) before it switches the serve back from a candidate that failed."""


def returning(profile: str, active: Active | None, home: Path | None = None) -> Record | None:
    """The newest switch record when it has no outcome and was returning the serve (a promote switching back, or a
    rollback) and active.json no longer names it as the candidate: killed part way through the return."""
    latest = next((r for r in reversed(records(profile, home)) if r.kind in ("promote", "rollback")), None)
    if latest is None or latest.data.get("outcome"):
        return None
    if latest.kind == "promote" and not latest.data.get(SWITCHING_BACK):
        return None  # killed before its switch (nothing changed) or after it (switched_and_unfinished)
    if active is not None and active.origin.startswith("upgrade:") and active.decision == latest.id:
        return None
    return latest


def returns_to(rec: Record) -> str | None:
    """The profile digest a return record takes the serve back to (the promote's incumbent, the rollback's target)."""
    side = rec.data.get("from") if rec.kind == "promote" else rec.data.get("to")
    return (side or {}).get("profile_digest")


def refuse_stacking(profile: str, active: Active | None, run_dir: Path) -> None:
    """Called with the switch lock held: a switch record without an outcome then has no process left to end it."""
    back = returning(profile, active)
    if back is not None:
        raise ApplianceError(
            f"U4 the {back.kind} {back.id} of {profile} was stopped while it returned the serve to "
            f"{(back.data.get('from' if back.kind == 'promote' else 'to') or {}).get('channel')}: launch.json and the "
            "engine may still be on the channel it left", field="active.json decision", value=back.id,
            fix=f"`appliance upgrade rollback {profile} --run-dir {run_dir}` finishes that return; then promote again",
            reason="a promote on top of a half-finished return would take a serve whose files disagree as its "
                   "incumbent")
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
    """The killed switch's record gets its outcome from the rollback that cleared it up."""
    how = "rolled back" if rolled_back else "a rollback that failed"
    write_record(stuck.path, {**stuck.data, "outcome": KILLED, "finished_at": utc_now(),
                              "why": f"stopped part way without an outcome (no process held its switch lock); "
                                     f"cleared up by {how}: {rollback_id}"})


def close_chain(profile: str, first: Record | None, rollback_id: str, rolled_back: bool) -> None:
    """`first`, and the killed switch it was itself clearing when it was killed (its `cleared`), and so on: each
    record still without an outcome closed by the rollback that finished them all."""
    seen: set[str] = set()
    rec = first
    while rec is not None and rec.id not in seen:
        seen.add(rec.id)
        if not rec.data.get("outcome"):
            close_killed(rec, rollback_id, rolled_back)
        cleared = rec.data.get("cleared")  # an id, matched against the history's folders: never a path
        rec = next((r for r in records(profile) if r.id == cleared), None) if isinstance(cleared, str) else None
