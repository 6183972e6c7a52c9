"""The memory watchdog's ladder must be a ladder (K24): the floor under the not-ready mark, resume above it."""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, always, rule


@rule("K24", "memory watchdog thresholds form a ladder",
      "the watchdog takes the serve out of traffic at not_ready_below_gib, stops the engine before stop_below_gib "
      "and starts it again above resume_above_gib: out of order, it stops without warning or restarts into the "
      "shortage it stopped for (GB10's unified memory can hang the host)",
      always,
      fix="order the memory section: stop_below_gib < not_ready_below_gib < resume_above_gib")
def k24_memory_ladder(ctx: RuleContext, r: Rule) -> list[Finding]:
    m = ctx.profile.memory
    if m.watchdog == "off":
        return []
    out: list[Finding] = []
    if m.stop_below_gib >= m.not_ready_below_gib:
        out.append(r.finding("error", "memory.stop_below_gib", m.stop_below_gib,
                             f"the floor {m.stop_below_gib:g} GiB is not under memory.not_ready_below_gib "
                             f"{m.not_ready_below_gib:g} GiB: the engine would stop with no not-ready step first",
                             f"set memory.stop_below_gib below {m.not_ready_below_gib:g}"))
    if m.resume_above_gib <= m.not_ready_below_gib:
        out.append(r.finding("error", "memory.resume_above_gib", m.resume_above_gib,
                             f"resume at {m.resume_above_gib:g} GiB is not above memory.not_ready_below_gib "
                             f"{m.not_ready_below_gib:g} GiB: the engine would restart into the shortage",
                             f"set memory.resume_above_gib above {m.not_ready_below_gib:g}"))
    return out
