"""Passthrough rules (X1-X5): what `engine.extra_args` / `engine.extra_env` pass must exist in the channel's engine
(its extracted facts), must not be something the appliance manages (render/managed.py names the owning key), must
be well formed, and is said to be unmodelled and unvalidated."""

from __future__ import annotations

from appliance.channels.facts import nearest
from appliance.render.managed import FLAG_OWNERS, managed_env_owner
from appliance.render.passthrough import canonical, split_args
from appliance.rules.base import Finding, Rule, RuleContext, rule

ARGS, ENV = "engine.extra_args", "engine.extra_env"


def _passes_args(ctx: RuleContext) -> bool:
    return bool(ctx.profile.engine.extra_args)


def _passes_anything(ctx: RuleContext) -> bool:
    return bool(ctx.profile.engine.extra_args or ctx.profile.engine.extra_env)


def _flags(ctx: RuleContext):  # type: ignore[no-untyped-def]
    return split_args(list(ctx.profile.engine.extra_args), ctx.channel.facts)


@rule("X1", "every passed flag is one the channel's engine knows, with a value it accepts",
      "an unknown flag stops `vllm serve` at start, minutes in on a large model; the channel's facts know them all",
      _passes_args, fix="correct the flag's spelling, or use a channel whose engine has it (appliance channels diff)")
def x1_known(ctx: RuleContext, r: Rule) -> list[Finding]:
    facts, name = ctx.channel.facts, ctx.channel.name
    out = []
    for f in _flags(ctx)[0]:
        if not facts.has_option(f.flag):
            close = nearest(f.flag, facts.options())
            out.append(r.finding("error", ARGS, f.word, f"channel {name} ({facts.label}) has no flag {f.flag}; "
                                 + (f"the nearest it knows is {close}" if close else "it knows nothing close"),
                                 f"write {close}" if close else "remove it, or use a channel whose engine has it"))
            continue
        choices = (facts.flag(f.flag) or {}).get("choices")
        if choices and f.value is not None and f.value not in choices:
            close = nearest(f.value, choices)
            out.append(r.finding("error", ARGS, f.word, f"channel {name} accepts {f.flag} {' | '.join(choices)}",
                                 f"use {close}" if close else f"use one of the values channel {name} knows"))
    return out


@rule("X2", "a passed flag is none the appliance manages",
      "a managed flag passed again would override, behind the rules' back, what they validated (fp8 KV, the block "
      "size, prefix caching, the guard); a secret on the command line is shown by ps and rendered output",
      _passes_args, fix="set the profile key that owns the flag instead (the finding names it)")
def x2_managed(ctx: RuleContext, r: Rule) -> list[Finding]:
    out = []
    for f in _flags(ctx)[0]:
        name = canonical(ctx.channel.facts, f.flag)
        owner = FLAG_OWNERS.get(name) or FLAG_OWNERS.get(f.flag)
        if owner:
            out.append(r.finding("error", ARGS, f.word, f"{name}, which the appliance manages: {owner} owns it",
                                 f"remove it from {ARGS} and set {owner}"))
    return out


@rule("X3", "a passed env var is none the appliance sets, no secret, and (VLLM_*) one the channel's engine reads",
      "a managed variable passed again would change what the rules validated; a secret in a profile is rendered "
      "and logged; vLLM ignores a VLLM_* variable it does not read, so the setting would be silently lost",
      lambda ctx: bool(ctx.profile.engine.extra_env),
      fix="set the profile key that owns the variable, or correct its name")
def x3_env(ctx: RuleContext, r: Rule) -> list[Finding]:
    facts, channel = ctx.channel.facts, ctx.channel.name
    out = []
    for var in sorted(ctx.profile.engine.extra_env):
        owner = managed_env_owner(var)
        if owner:
            out.append(r.finding("error", f"{ENV}.{var}", var, f"{var}, which the appliance sets: {owner} owns it",
                                 f"remove it from {ENV} and set {owner}"))
        elif var.startswith("VLLM_") and not facts.has_env(var):
            close = nearest(var, sorted(facts.env))
            out.append(r.finding("error", f"{ENV}.{var}", var, f"channel {channel} ({facts.label}) reads no {var}; "
                                 + (f"the nearest it reads is {close}" if close else "it reads nothing close"),
                                 f"write {close}" if close else "remove it, or use a channel whose engine reads it"))
    return out


@rule("X4", "the passed words are well formed: flags with their values, no value that starts with '-', no bare "
            "word, no flag twice",
      "the engine's parser reads a '-'-led value as a flag of its own and a bare word as a positional (the model); "
      "a flag given twice keeps only the last",
      _passes_args, fix="write each as --flag VALUE (or --flag=VALUE), once")
def x4_shape(ctx: RuleContext, r: Rule) -> list[Finding]:
    return [r.finding("error", ARGS, bad.word, bad.problem, "write it as --flag VALUE (or --flag=VALUE), once")
            for bad in _flags(ctx)[1]]


@rule("X5", "passthrough is said: unmodelled and unvalidated",
      "no rule knows what a passed flag or variable does to the serve: the gate has not measured it",
      _passes_anything, fix="model the setting as a profile key if it matters, and gate the serve with it")
def x5_said(ctx: RuleContext, r: Rule) -> list[Finding]:
    e = ctx.profile.engine
    out = []
    if e.extra_args:
        out.append(r.finding("warning", ARGS, " ".join(e.extra_args),
                             "passed to the engine unmodelled and unvalidated (rendered last, as given)",
                             "gate the serve with it (appliance gate) before users rely on it"))
    if e.extra_env:
        out.append(r.finding("warning", ENV, ", ".join(sorted(e.extra_env)),
                             "set on every rank unmodelled and unvalidated",
                             "gate the serve with it (appliance gate) before users rely on it"))
    return out
