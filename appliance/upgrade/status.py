"""`appliance upgrade status [PROFILE]`: per profile, the active channel (and where it comes from), the rollback
target, and the history of plans, qualifications and decisions with the receipts each rests on."""

from __future__ import annotations

import re

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.profile.active import Active, ActiveError, read_active
from appliance.upgrade.exclusive import holder_now
from appliance.upgrade.history import Record, profiles_with_history, records
from appliance.upgrade.unfinished import switched_and_unfinished

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
"""A profile's name as the history keys it (its file's stem): one path component, never `.` or `..`."""


def history_name(given: str) -> str:
    """The name `given` keeps its history under: a profile's (a shipped name or a YAML file: its stem), or a name
    with a history whose profile file is gone. Anything else is exit 2: an empty history for a typo would read as
    "nothing was ever upgraded" and send the user looking in the wrong place."""
    from appliance.bounds import check_text
    from appliance.profile.loader import resolve_path

    check_text("profile", given, max_bytes=4096)
    with_history = profiles_with_history()
    if _NAME.match(given) and given in with_history:
        return given
    try:
        stem = resolve_path(given).stem
    except ApplianceError as exc:
        known = ", ".join(with_history) or "none yet"
        raise ApplianceError(f"unknown profile {given!r}: no such profile and no upgrade history under that name",
                             field="profile", value=given,
                             fix=f"{exc.fix}; profiles with an upgrade history: {known}" if exc.fix else
                                 f"profiles with an upgrade history: {known}",
                             reason="status reads APPLIANCE_HOME/upgrades/<profile>/, named after the profile "
                                    "`appliance run` served") from None
    return stem


def _unfinished(profile: str, rec: Record, active: Active | None, holder: str | None) -> str:
    """A record without an outcome: still running (its switch lock is held), or stopped for good; a stopped promote
    whose candidate is still the active channel needs a rollback (upgrade/unfinished.py)."""
    if holder is not None:
        return f"unfinished: {holder} is running now"
    stuck = switched_and_unfinished(profile, active)
    if stuck is not None and stuck.id == rec.id:
        return (f"unfinished: stopped after switching to its candidate, which is still active; `appliance upgrade "
                f"rollback {profile} --run-dir {rec.data.get('run_dir') or 'RUN_DIR'}` returns to the incumbent")
    return "unfinished: stopped without an outcome (no process is finishing it)"


def _one(profile: str) -> JsonObject:
    try:
        active = read_active(profile)
        error = None
    except ActiveError as exc:
        active, error = None, str(exc)
    history = []
    holder = holder_now(profile)
    for rec in records(profile):
        d = rec.data
        row: JsonObject = {"id": rec.id, "kind": d.get("kind"), "at": d.get("started_at") or d.get("at"),
                           "path": str(rec.path)}
        if d.get("kind") == "plan":
            plan = d.get("plan") or {}
            row |= {"from": (plan.get("from") or {}).get("channel"), "to": (plan.get("to") or {}).get("channel"),
                    "result": "renderable" if plan.get("renderable") else "U1: cannot be rendered"}
        else:
            to = d.get("candidate") or d.get("to") or {}
            row |= {"from": (d.get("from") or {}).get("channel"), "to": to.get("channel"),
                    "result": d.get("verdict") or d.get("outcome") or _unfinished(profile, rec, active, holder),
                    "why": (d.get("reasons") or [d.get("why")] if d.get("why") else d.get("reasons") or [])[:3],
                    "receipts": d.get("receipts") or {}, "seconds": d.get("seconds")}
            if d.get("window"):
                row["window_s"] = d["window"].get("seconds")
        history.append(row)
    previous = (active.previous or {}).get("channel") if active else None
    return {"profile": profile, "active": active.to_json() | {"origin": active.origin} if active else None,
            "error": error, "rollback_target": previous or ("the profile's own channel" if active else None),
            "history": history}


def status(profile: str | None) -> list[JsonObject]:
    from appliance.redact import redact_tree

    names = [history_name(profile)] if profile else profiles_with_history()
    # A record's text (an engine's error, a path) comes from outside: no secret leaves in it, as text or JSON.
    return redact_tree([_one(n) for n in names])


def render_status(rows: list[JsonObject]) -> str:
    if not rows:
        return "no upgrade history (APPLIANCE_HOME/upgrades/ is empty)"
    lines = []
    for r in rows:
        a = r["active"]
        lines.append(f"{r['profile']}: " + (f"active channel {a['channel']} ({a['origin']}, since {a['since']}); "
                                            f"rollback target {r['rollback_target']}" if a else
                                            "the profile's own channel (nothing promoted)"))
        if r["error"]:
            lines.append(f"  ERROR {r['error']}")
        for h in r["history"]:
            extra = f"; window {h['window_s']:g} s" if h.get("window_s") is not None else ""
            lines.append(f"  {h['id']}: {h['kind']} {h.get('from')} -> {h.get('to')}: {h['result']}{extra}")
            lines += [f"      {why}" for why in h.get("why") or [] if why]
            lines += [f"      receipt ({side}): {path}" for side, path in (h.get("receipts") or {}).items()]
    from appliance.redact import printable, redact

    return "\n".join(printable(redact(line)) for line in lines)  # no raw terminal code reaches the screen
