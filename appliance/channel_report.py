"""`appliance channels` and `appliance channels diff A B` as data: each channel's summary, and what a user moving
from one channel to another must know (packages, flags, env vars, backends, log lines, capabilities, and the rules
and log expectations whose verdicts change for the shipped profiles)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from appliance.channels.capabilities import capabilities_of, capability_changes
from appliance.channels.facts import EngineFacts, load_facts
from appliance.jsonstrict import JsonObject
from appliance.lock import ChannelLock, Lock, load_lock
from appliance.profile.topology import Role


def summary(ch: ChannelLock, lock: Lock) -> JsonObject:
    facts = load_facts(ch.name)
    caps = capabilities_of(facts)
    return {
        "name": ch.name, "default": ch.name == lock.default_for(ch.target),
        "target": ch.target, "engine": ch.engine.label, "status": ch.status, "provenance": ch.provenance.source,
        "lock_digest": ch.digest, "image_target": ch.image.get("target"), "pins": ch.key_pins(),
        "facts": {"engine": facts.label, **facts.counts(),
                  "lines_found": sum(1 for v in facts.log_lines.values() if v.get("found")),
                  "lines": len(facts.log_lines)},
        "capabilities": caps.to_json(),
    }


def summaries() -> list[JsonObject]:
    lock = load_lock()
    return [summary(ch, lock) for _, ch in sorted(lock.channels.items())]


@dataclass
class Delta:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        return {"added": self.added, "removed": self.removed, "changed": self.changed}

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def _keys(a: Mapping[str, object], b: Mapping[str, object], show_change: bool = True) -> Delta:
    d = Delta(sorted(set(b) - set(a)), sorted(set(a) - set(b)))
    if show_change:
        d.changed = [f"{k}: {a[k]} -> {b[k]}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    return d


def choice_list(values: list[str]) -> str:
    """Choices joined by ", ", a choice that holds a comma or a space quoted (`"all,model"` stays one choice)."""
    return ", ".join(json.dumps(v) if not v or "," in v or " " in v else v for v in map(str, values))


def _flags(a: EngineFacts, b: EngineFacts) -> Delta:
    d = Delta(sorted(set(b.flags) - set(a.flags)), sorted(set(a.flags) - set(b.flags)))
    for name in sorted(set(a.flags) & set(b.flags)):
        ca, cb = a.flags[name].get("choices"), b.flags[name].get("choices")
        if ca != cb and ca is not None and cb is not None:
            gone, new = sorted(set(ca) - set(cb)), sorted(set(cb) - set(ca))
            d.changed.append(f"{name} choices" + (f" removed [{choice_list(gone)}]" if gone else "")
                             + (f" added [{choice_list(new)}]" if new else ""))
        elif a.flags[name].get("form") != b.flags[name].get("form"):
            d.changed.append(f"{name}: {a.flags[name].get('form')} -> {b.flags[name].get('form')}")
    return d


def _defaults(a: EngineFacts, b: EngineFacts, unset_in: set[str] | None = None) -> list[str]:
    """Flags both engines take whose default moved (what a serve that does not set them gets now); with `unset_in`
    (a command's flags), only those that command leaves to the default."""
    return [f"{name}: {a.flags[name].get('default')!r} -> {b.flags[name].get('default')!r}"
            for name in sorted(set(a.flags) & set(b.flags) - (unset_in or set()))
            if a.flags[name].get("default") != b.flags[name].get("default")]


def _env(a: EngineFacts, b: EngineFacts) -> Delta:
    d = Delta(sorted(set(b.env) - set(a.env)), sorted(set(a.env) - set(b.env)))
    d.changed = [f"{k} default {a.env[k].get('default')!r} -> {b.env[k].get('default')!r}"
                 for k in sorted(set(a.env) & set(b.env)) if a.env[k].get("default") != b.env[k].get("default")]
    return d


def _registries(a: EngineFacts, b: EngineFacts) -> dict[str, Delta]:
    out = {}
    for reg in sorted(set(a.registries) | set(b.registries)):
        ra, rb = set(a.registry(reg)), set(b.registry(reg))
        if ra != rb:
            out[reg] = Delta(sorted(rb - ra), sorted(ra - rb))
    return out


def _who(printers: list[tuple[str, str]]) -> str:
    """Which processes and ranks print a line: `worker (all ranks) + worker (local_rank0)`."""
    return " + ".join(f"{process} ({'all ranks' if ranks == 'all' else ranks})" for process, ranks in printers)


def _lines(a: EngineFacts, b: EngineFacts) -> Delta:
    fa = {k for k, v in a.log_lines.items() if v.get("found")}
    fb = {k for k, v in b.log_lines.items() if v.get("found")}
    d = Delta(sorted(fb - fa), sorted(fa - fb))
    for k in sorted(fa & fb):
        who_a = sorted({(s["process"], s["ranks"]) for s in a.log_lines[k].get("sources", [])})
        who_b = sorted({(s["process"], s["ranks"]) for s in b.log_lines[k].get("sources", [])})
        if who_a != who_b:
            d.changed.append(f"{k} printed by {_who(who_a)} -> {_who(who_b)}")
    return d


def _verdicts(a: str, b: str, target: str, only: str | None = None) -> tuple[list[JsonObject], list[JsonObject]]:
    """For each shipped profile of this target (or `only` that one): the rule findings and the log expectations that
    differ between running it on channel a and on channel b."""
    from appliance.health.context import HealthContext
    from appliance.profile import list_profiles, load_profile
    from appliance.profile.topology import role_for
    from appliance.rules import context_for, evaluate

    rules, expectations = [], []
    for name in [only] if only else list_profiles():
        base = load_profile(name).profile
        if base.hardware.target != target:
            continue
        loaded = {c: load_profile(name, cli_overrides=[f"engine.channel={c}"]) for c in (a, b)}
        found = {c: {(f.rule, f.severity, f.path) for f in evaluate(context_for(lp.profile))} for c, lp in
                 loaded.items()}
        for rule_id, severity, path in sorted(found[b] - found[a]):
            rules.append({"profile": name, "rule": rule_id, "severity": severity, "path": path, "on": b})
        for rule_id, severity, path in sorted(found[a] - found[b]):
            rules.append({"profile": name, "rule": rule_id, "severity": severity, "path": path, "on": a,
                          "gone": True})
        roles: list[Role] = sorted({role_for(base, r) for r in range(base.hardware.nodes)})
        for role in roles:
            judges = {c: HealthContext.load(lp).judge(role) for c, lp in loaded.items()}
            ids = {c: {e.id: e.rule for e in j.expectations} for c, j in judges.items()}
            # Applies on b but b's DeepSeek-V4 path prints no line it needs (health/provable.py): said, not waited for.
            for exp, np in sorted(judges[b].not_provable.items()):
                if exp not in judges[a].not_provable:
                    expectations.append({"profile": name, "role": role, "expectation": exp, "rule": np.rule,
                                         "change": f"not provable on {b} ({np.pattern}: no call site on its path)"})
            for exp in sorted(set(ids[b]) - set(ids[a])):
                expectations.append({"profile": name, "role": role, "expectation": exp, "rule": ids[b][exp],
                                     "change": "expected on " + b})
            for exp in sorted(set(ids[a]) - set(ids[b])):
                expectations.append({"profile": name, "role": role, "expectation": exp, "rule": ids[a][exp],
                                     "change": "not expected on " + b})
    return rules, expectations


HEAD_ADDRESS = "head-fabric-address"
"""Where a multi-node profile's command needs the head's address (the same on both channels: no difference)."""


def _flag_values(argv: list[str]) -> dict[str, str]:
    """`--flag value` and bare `--flag` of a serve command (after `vllm serve MODEL`), a repeated flag's values
    joined."""
    out: dict[str, str] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            out[word] = f"{out[word]} {value}" if word in out else value
    return out


def _command(name: str, a: str, b: str) -> tuple[dict[str, dict[str, list[str]]], set[str]]:
    """What the profile's rendered command (the head's, or the single node's) sets differently on b than on a: its
    flags and its env vars, added, removed and changed; and the flags its command on b sets."""
    from appliance.placement import rank_placements
    from appliance.profile import load_profile
    from appliance.render import build_plan

    plans = {}
    for c in (a, b):
        p = load_profile(name, cli_overrides=[f"engine.channel={c}"]).profile
        plans[c] = build_plan(p, rank_placements(p, HEAD_ADDRESS)[0])
    on_b = _flag_values(plans[b].argv)
    return ({"flags": _settings(_flag_values(plans[a].argv), on_b, " ").to_json(),
             "env": _settings(plans[a].env, plans[b].env, "=").to_json()}, set(on_b))


def _settings(a: dict[str, str], b: dict[str, str], joint: str) -> Delta:
    """Flags or env vars of two commands: each added or removed one with its value, each changed one from -> to."""
    d = _keys(a, b)
    d.added = [f"{k}{joint}{b[k]}" if b[k] else k for k in d.added]
    d.removed = [f"{k}{joint}{a[k]}" if a[k] else k for k in d.removed]
    return d


def _profile_on(name: str, la: ChannelLock, lb: ChannelLock) -> str:
    """The profile `--profile` names, loaded: it must run on both channels' target."""
    from appliance.errors import ApplianceError
    from appliance.profile import load_profile

    p = load_profile(name).profile
    if not p.hardware.target == la.target == lb.target:
        raise ApplianceError(f"--profile {name}: a {p.hardware.target} profile; channels {la.name} ({la.target}) and "
                             f"{lb.name} ({lb.target})", field="--profile", value=name,
                             fix="name a profile of both channels' target (appliance profiles --all lists them)",
                             reason="what changes for a profile is asked of channels it can run on")
    return p.name


def diff(a: str, b: str, profile: str | None = None) -> JsonObject:
    """What moving from channel a to b changes; with `profile`, only what changes for that profile: its packages,
    the capabilities, its rendered command, its rules and its log expectations (not every flag the engine knows)."""
    lock = load_lock()
    la, lb = lock.channel(a), lock.channel(b)
    fa, fb = load_facts(a), load_facts(b)
    out: JsonObject = {
        "from": summary(la, lock), "to": summary(lb, lock),
        "packages": _keys({p.name: p.version for p in la.pins()}, {p.name: p.version for p in lb.pins()}).to_json(),
        "capabilities": capability_changes(capabilities_of(fa), capabilities_of(fb)),
    }
    if profile is not None:
        name = _profile_on(profile, la, lb)
        out["profile"], (out["command"], sets) = name, _command(name, a, b)
        out["defaults"] = _defaults(fa, fb, unset_in=sets)
        out["rules"], out["expectations"] = _verdicts(a, b, la.target, only=name)
        return out
    out |= {"flags": _flags(fa, fb).to_json(), "defaults": _defaults(fa, fb), "env": _env(fa, fb).to_json(),
            "registries": {k: v.to_json() for k, v in _registries(fa, fb).items()},
            "log_lines": _lines(fa, fb).to_json()}
    if la.target == lb.target:
        out["rules"], out["expectations"] = _verdicts(a, b, la.target)
    else:
        out["rules"], out["expectations"] = [], []
        out["note"] = f"{a} is a {la.target} channel and {b} a {lb.target} one: no profile runs on both"
    return out
