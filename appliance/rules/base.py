"""Findings, the rule context and the registry every rule module adds to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from appliance.bounds import show
from appliance.catalogue import CheckpointFacts, GpuFacts
from appliance.channels.capabilities import Capabilities, capabilities_of, profile_channel
from appliance.channels.facts import EngineFacts, load_facts
from appliance.lock import ChannelLock, CheckpointPin, channel_lock
from appliance.profile.model import Profile
from appliance.redact import redact
from appliance.weights.pins import checkpoint_pins

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    path: str
    value: object
    message: str
    fix: str
    reason: str

    def render(self) -> str:
        shown = show(self.value, 120)  # a profile string may be up to 128 KiB: never echoed whole
        # A value from outside may be a secret's (the channel rules echo names back): one redaction for all.
        return redact(f"{self.severity.upper()} {self.rule} {self.path}={shown}: {self.message}\n    fix: {self.fix}")


@dataclass(frozen=True)
class Channel:
    """The profile's engine channel: its lock, its engine's facts and what those say it can do."""

    lock: ChannelLock
    facts: EngineFacts
    caps: Capabilities

    @property
    def name(self) -> str:
        return self.lock.name

    @classmethod
    def named(cls, name: str, facts: EngineFacts | None = None) -> Channel:
        facts = facts or load_facts(name)
        return cls(channel_lock(name), facts, capabilities_of(facts))


@dataclass(frozen=True)
class RuleContext:
    profile: Profile
    checkpoint: CheckpointFacts
    gpu: GpuFacts
    channel: Channel = field(default=None)  # type: ignore[assignment]
    """The profile's channel (filled from engine.channel): the rules consult its capabilities, not the fork's."""
    pins: dict[str, CheckpointPin] = field(default_factory=checkpoint_pins)
    """The lock's pinned checkpoint revisions (W1, W2)."""

    def __post_init__(self) -> None:
        if self.channel is None:
            object.__setattr__(self, "channel", Channel.named(profile_channel(self.profile)))

    @property
    def caps(self) -> Capabilities:
        return self.channel.caps

    @property
    def is_deepseek(self) -> bool:
        return self.checkpoint.family == "deepseek-v4"


Check = Callable[[RuleContext, "Rule"], list[Finding]]
"""fn(ctx, rule): the rule passes itself, so a finding carries its id and reason."""


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    reason: str
    applies: Callable[[RuleContext], bool]
    check: Check
    fix: str = ""
    """What a user does about it, in general (each finding says it for the case at hand)."""

    def __call__(self, ctx: RuleContext) -> list[Finding]:
        return self.check(ctx, self) if self.applies(ctx) else []

    def finding(self, severity: Severity, path: str, value: object, message: str, fix: str) -> Finding:
        return Finding(self.id, severity, path, value, message, fix, self.reason)


REGISTRY: dict[str, Rule] = {}


def rule(rule_id: str, title: str, reason: str, applies: Callable[[RuleContext], bool],
         fix: str = "") -> Callable[[Check], Rule]:
    """Register ``fn(ctx, rule) -> findings`` under a stable id; the id appears once in the code base."""

    def wrap(fn: Check) -> Rule:
        if rule_id in REGISTRY:
            raise RuntimeError(f"rule id {rule_id} registered twice")
        made = REGISTRY[rule_id] = Rule(rule_id, title, reason, applies, fn, fix)
        return made

    return wrap


def deepseek(ctx: RuleContext) -> bool:
    return ctx.is_deepseek


def deepseek_on_gpu(ctx: RuleContext) -> bool:
    return ctx.is_deepseek and ctx.gpu.arch != "cpu"


def on_cpu(ctx: RuleContext) -> bool:
    return ctx.gpu.arch == "cpu"


def on_gpu(ctx: RuleContext) -> bool:
    return ctx.gpu.arch != "cpu"


def always(ctx: RuleContext) -> bool:
    return True
