"""Which expectations a channel's engine can prove on a DeepSeek-V4 serve: an expectation waits for log lines, and a
line counts only when a call site that prints it is reached on the DeepSeek-V4 code path of that engine (the
`code_path` section of channels/facts/<channel>.json, tooling/code_path.py). One that needs a line the path never
prints is "not provable on this channel": said as such (/status, doctor, config) and never waited for, so it can
neither fail the serve nor hold ready back forever.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.channels.capabilities import profile_channel
from appliance.channels.facts import EngineFacts, load_facts, load_sources
from appliance.health.predicates import holds
from appliance.health.table import Expectation, LogTable
from appliance.profile.model import Profile


@dataclass(frozen=True)
class NotProvable:
    expectation: str
    rule: str
    channel: str
    fact: str
    pattern: str
    why: str

    @property
    def detail(self) -> str:
        return (f"not provable on channel {self.channel}: its DeepSeek-V4 code path prints no `{self.pattern}` line "
                f"({self.fact}): {self.why}")

    def to_json(self) -> dict[str, str]:
        return {"expectation": self.expectation, "rule": self.rule, "channel": self.channel, "fact": self.fact,
                "pattern": self.pattern, "why": self.why}


def unprovable_fact(table: LogTable, facts: EngineFacts, name: str, outside: set[str]) -> tuple[str, str] | None:
    """(pattern, why) when no line that sets `name` is printed on the channel's DeepSeek-V4 path; None when one is
    (or is printed outside the engine's source: NCCL's banner, Python's exception names), or when the channel
    records no path for them."""
    producers = [p.id for p in table.facts if name in p.produces()]
    if not producers or any(p in outside or facts.on_dsv4_path(p) is not False for p in producers):
        return None
    first = producers[0]
    return first, str(facts.code_path[first].get("why", "no call site on the path"))


def unprovable(e: Expectation, table: LogTable, profile: Profile) -> NotProvable | None:
    """Why `e` cannot be proven on the profile's channel (a DeepSeek-V4 profile on a channel with a recorded code
    path), or None."""
    if not holds(["deepseek"], profile):
        return None
    facts = load_facts(profile_channel(profile))
    if not facts.code_path:
        return None
    return unprovable_on(e, table, facts, {o.pattern for o in load_sources().printed_outside})


def unprovable_on(e: Expectation, table: LogTable, facts: EngineFacts, outside: set[str]) -> NotProvable | None:
    """Why `e` cannot be proven with `facts`' code path: a fact it needs each of, or every alternative of its
    `present_any`, set by no line the path reaches."""
    for name in e.needed_each():
        found = unprovable_fact(table, facts, name, outside)
        if found:
            return NotProvable(e.id, e.rule, facts.channel, name, found[0], found[1])
    # One reachable alternative of present_any is enough: not provable only when none of them is.
    off_path = [(name, found) for name in e.present_any if (found := unprovable_fact(table, facts, name, outside))]
    if e.present_any and len(off_path) == len(e.present_any):
        name, (pattern, why) = off_path[0]
        return NotProvable(e.id, e.rule, facts.channel, name, pattern, why)
    return None


def profile_unprovable(table: LogTable, profile: Profile) -> list[NotProvable]:
    """Every expectation whose predicates hold for the profile (any role) that its channel cannot prove."""
    out = []
    for e in table.expectations:
        if holds(e.when, profile):
            found = unprovable(e, table, profile)
            if found:
                out.append(found)
    return out
