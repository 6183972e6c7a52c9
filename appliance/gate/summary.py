"""The receipt for people: Markdown with provenance first, then one section per check."""

from __future__ import annotations

from appliance.gate.bench import table
from appliance.gate.receipt_model import (
    BatteryRef,
    BenchCheck,
    Check,
    Engagement,
    Hardware,
    Receipt,
    Target,
    verdict_word,
)


def _short(digest: str | None) -> str:
    return str(digest)[:12] if digest else "?"


def render(r: Receipt) -> str:
    prov, eng, target = r.provenance, r.engagement, r.target or Target()
    profile = r.profile
    state = "complete" if r.complete else "INCOMPLETE (interrupted; the checks below ran)"
    lines = [f"# Gate receipt: {profile.name or '?'} — {verdict_word(r.verdict)}", "",
             f"- run: {r.started_at} → {r.finished_at or '…'} ({state})",
             f"- serve: {target.url} model `{target.model}` ({target.checkpoint})",
             f"- engine: vLLM {r.engine_version}; channel {prov.channel}, lock {_short(prov.lock_digest)}",
             f"- profile: {profile.name} digest {_short(profile.digest)}"
             + (f", overrides {'; '.join(profile.overrides)}" if profile.overrides else ""),
             f"- image: {', '.join(f'{k}={v}' for k, v in prov.image.items()) if prov.image else 'none'}",
             f"- host: {_host(prov.hardware or Hardware())}", ""]
    lines += _engagement(eng)
    warnings = [f"> warning: {w}" for w in r.warnings]
    lines += [*warnings, ""] if warnings else []
    if r.battery:
        lines += _battery(r.battery, r.checks)
    if r.bench_protocol:
        from appliance.gate.protocol import summary_lines

        lines += summary_lines(r.bench_protocol)
    for c in r.checks:
        lines += [f"## {c.name}: {c.status}", "", c.summary, ""]
        if isinstance(c, BenchCheck) and c.metrics and c.metrics.rows:
            lines += [table(c.metrics.rows), ""]
    return "\n".join(lines).rstrip() + "\n"


def title(check: Check) -> str:
    """A battery line's title, as its check wrote it in its params."""
    return str((check.params or {}).get("title", ""))


def _battery(b: BatteryRef, checks: list[Check]) -> list[str]:
    from appliance.gate.battery.merge import check_line
    from appliance.gate.battery.verdict import word

    lines = [f"## Battery {b.name}, arm {b.arm} ({b.serve})", "", f"Source: {b.source}.", "", "```"]
    lines += [check_line(c.name, title(c), word(c.status), c.summary) for c in checks]
    recorded = {c.name for c in checks}
    lines += [check_line(d.id, d.title, "PENDING", f"the {d.arm} arm's serve")
              for d in b.definition if d.id not in recorded]
    lines += [check_line(o.id, o.title, "NOT RUN", f"outside the appliance: {o.why}") for o in b.not_run]
    lines += ["```", ""]
    if b.result:
        lines += [f"{b.result.passed}/{b.result.recorded} PASS; "
                  + ("ACCEPTED" if b.result.accepted else f"not accepted: {b.result.why}"), ""]
    return lines


def _host(hw: Hardware) -> str:
    gpus = ", ".join(str(g.name) for g in hw.gpus) or "no GPU"
    return f"{hw.host} {hw.machine}, {hw.cpus} CPUs, {hw.mem_total_gib} GiB, {gpus}"


def _engagement(eng: Engagement) -> list[str]:
    if not eng.available:
        return [f"Engagement: not read (health exporter: {eng.error})", ""]
    lines = [f"Engagement (read back from the serve log by the exporter; state {eng.state}, "
             f"verdict {eng.verdict}):", "",
             f"- guard {eng.guard or 'no line'}, runner {eng.runner or '?'}, "
             f"SM120 decode {'engaged' if eng.sm120_decode else 'not engaged'}, "
             f"attention {eng.attention_backend or '?'}, KV {eng.kv_tokens or '?'} tokens"]
    lines += [f"- {e.rule} {e.name}: {e.status} ({e.detail})" for e in eng.expectations]
    lines += [f"- FATAL {h.rule} {h.id}: {h.text}" for h in eng.fatal]
    return [*lines, ""]
