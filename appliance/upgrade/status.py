"""`appliance upgrade status [PROFILE]`: per profile, the active channel (and where it comes from), the rollback
target, and the history of plans, qualifications and decisions with the receipts each rests on."""

from __future__ import annotations

from typing import Any

from appliance.profile.active import ActiveError, read_active
from appliance.upgrade.history import profiles_with_history, records


def _one(profile: str) -> dict[str, Any]:
    try:
        active = read_active(profile)
        error = None
    except ActiveError as exc:
        active, error = None, str(exc)
    history = []
    for rec in records(profile):
        d = rec.data
        row: dict[str, Any] = {"id": rec.id, "kind": d.get("kind"), "at": d.get("started_at") or d.get("at"),
                               "path": str(rec.path)}
        if d.get("kind") == "plan":
            plan = d.get("plan") or {}
            row |= {"from": (plan.get("from") or {}).get("channel"), "to": (plan.get("to") or {}).get("channel"),
                    "result": "renderable" if plan.get("renderable") else "U1: cannot be rendered"}
        else:
            to = d.get("candidate") or d.get("to") or {}
            row |= {"from": (d.get("from") or {}).get("channel"), "to": to.get("channel"),
                    "result": d.get("verdict") or d.get("outcome") or "unfinished",
                    "why": (d.get("reasons") or [d.get("why")] if d.get("why") else d.get("reasons") or [])[:3],
                    "receipts": d.get("receipts") or {}, "seconds": d.get("seconds")}
            if d.get("window"):
                row["window_s"] = d["window"].get("seconds")
        history.append(row)
    previous = (active.previous or {}).get("channel") if active else None
    return {"profile": profile, "active": active.to_json() | {"origin": active.origin} if active else None,
            "error": error, "rollback_target": previous or ("the profile's own channel" if active else None),
            "history": history}


def status(profile: str | None) -> list[dict[str, Any]]:
    names = [profile] if profile else profiles_with_history()
    return [_one(n) for n in names]


def render_status(rows: list[dict[str, Any]]) -> str:
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
    return "\n".join(lines)
