"""The receipt for people: Markdown with provenance first, then one section per check."""

from __future__ import annotations

from typing import Any

from appliance.gate.bench import table


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "?"


def render(r: dict[str, Any]) -> str:
    prov, eng = r["provenance"], r["engagement"]
    profile, engine = prov.get("profile") or {}, prov.get("engine") or {}
    state = "complete" if r["complete"] else "INCOMPLETE (interrupted; the checks below ran)"
    lines = [f"# Gate receipt: {profile.get('name', '?')} — {r['verdict'].upper()}", "",
             f"- run: {r['started_at']} → {r.get('finished_at') or '…'} ({state})",
             f"- serve: {r['target'].get('url')} model `{r['target'].get('model')}` "
             f"({r['target'].get('checkpoint')})",
             f"- engine: vLLM {engine.get('version')}; channel {prov.get('channel')}, "
             f"lock {_short(prov.get('lock_digest'))}",
             f"- profile: {profile.get('name')} digest {_short(profile.get('digest'))}"
             + (f", overrides {'; '.join(profile['overrides'])}" if profile.get("overrides") else ""),
             f"- image: {', '.join(f'{k}={v}' for k, v in prov['image'].items()) if prov.get('image') else 'none'}",
             f"- host: {_host(prov.get('hardware') or {})}", ""]
    lines += _engagement(eng)
    warnings = [f"> warning: {w}" for w in r.get("warnings") or []]
    lines += [*warnings, ""] if warnings else []
    if r.get("battery"):
        lines += _battery(r)
    for c in r["checks"]:
        lines += [f"## {c['name']}: {c['status']}", "", c["summary"], ""]
        if c["name"] == "bench" and c["metrics"].get("rows"):
            lines += [table(c["metrics"]["rows"]), ""]
    return "\n".join(lines).rstrip() + "\n"


def _battery(r: dict[str, Any]) -> list[str]:
    from appliance.gate.battery.merge import check_line
    from appliance.gate.battery.verdict import word

    b = r["battery"]
    result = b.get("result") or {}
    lines = [f"## Battery {b['name']}, arm {b['arm']} ({b['serve']})", "", f"Source: {b['source']}.", "", "```"]
    lines += [check_line(c["name"], c["params"].get("title", ""), word(c["status"]), c["summary"])
              for c in r["checks"]]
    recorded = {c["name"] for c in r["checks"]}
    lines += [check_line(d["id"], d["title"], "PENDING", f"the {d['arm']} arm's serve")
              for d in b["definition"] if d["id"] not in recorded]
    lines += [check_line(o["id"], o["title"], "NOT RUN", f"outside the appliance: {o['why']}") for o in b["not_run"]]
    lines += ["```", ""]
    if result:
        lines += [f"{result.get('passed')}/{result.get('recorded')} PASS; "
                  + ("ACCEPTED" if result.get("accepted") else f"not accepted: {result.get('why')}"), ""]
    return lines


def _host(hw: dict[str, Any]) -> str:
    gpus = ", ".join(g["name"] for g in hw.get("gpus") or []) or "no GPU"
    return f"{hw.get('host')} {hw.get('machine')}, {hw.get('cpus')} CPUs, {hw.get('mem_total_gib')} GiB, {gpus}"


def _engagement(eng: dict[str, Any]) -> list[str]:
    if not eng.get("available"):
        return [f"Engagement: not read (health exporter: {eng.get('error')})", ""]
    lines = [f"Engagement (read back from the serve log by the exporter; state {eng.get('state')}, "
             f"verdict {eng.get('verdict')}):", "",
             f"- guard {eng.get('guard') or 'no line'}, runner {eng.get('runner') or '?'}, "
             f"SM120 decode {'engaged' if eng.get('sm120_decode') else 'not engaged'}, "
             f"attention {eng.get('attention_backend') or '?'}, KV {eng.get('kv_tokens') or '?'} tokens"]
    lines += [f"- {e['rule']} {e['name']}: {e['status']} ({e['detail']})" for e in eng.get("expectations") or []]
    lines += [f"- FATAL {h.get('rule')} {h.get('id')}: {h.get('text')}" for h in eng.get("fatal") or []]
    return [*lines, ""]
