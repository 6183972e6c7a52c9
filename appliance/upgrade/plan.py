"""`appliance upgrade plan PROFILE --to CHANNEL`: what moving this profile's serve to another channel changes, before
anything is installed or started.

- packages: the pins that move between the two channels' locks;
- for this profile: each flag, env var and registered name (tokenizer mode, parsers, attention backend) the profile
  renders that the candidate's engine does not have, with the nearest name it does have (a rename), and flag values
  it no longer accepts; beside that, how many flags, env vars and backends each engine has that the other lacks;
- the rules whose verdict changes for this profile, and the log expectations that change (per role);
- the disk the candidate's engine takes and the memory its serve needs (K23), hence how qualify will run it (U3).

The candidate's own facts refusing the profile is U1: the plan is still shown, and the command exits 2 naming why.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from appliance.channels.capabilities import capabilities_of, capability_changes
from appliance.channels.engines import EngineInstall, engines_root, find_engine
from appliance.channels.facts import EngineFacts, load_facts, nearest
from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.lock import ChannelLock
from appliance.profile.loader import LoadedProfile
from appliance.profile.model import Profile
from appliance.profile.topology import role_for
from appliance.rules import Finding, context_for, evaluate
from appliance.upgrade.candidate import Pair
from appliance.upgrade.mode import Requested, choose_mode

_RENDER_HEAD = "192.0.2.1"  # a placeholder head address to render every rank (RFC 5737; never contacted)
GIB = 1024**3


def _rendered(profile: Profile) -> list[tuple[str, list[str], dict[str, str]]]:
    """(role, argv, env) of every rank; a profile the renderer refuses renders nothing (its rule says why)."""
    from appliance.render.plan import build_plan, rank_placements

    out = []
    for at in rank_placements(profile, _RENDER_HEAD):
        try:
            plan = build_plan(profile, at)
        except ApplianceError:
            continue
        out.append((at.role, plan.argv, plan.env))
    return out


def _options(argv: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.append((word.split("=", 1)[0], None if nxt is None or nxt.startswith("--") else nxt))
    return out


def _used_names(profile: Profile) -> dict[str, str]:
    """registry -> the name this profile uses from it."""
    s = profile.server
    used = {"tokenizer_modes": s.tokenizer_mode, "tool_parsers": s.tool_call_parser,
            "reasoning_parsers": s.reasoning_parser}
    return {k: v for k, v in used.items() if v}


def profile_facts_delta(profile: Profile, a: EngineFacts, b: EngineFacts) -> dict[str, list[JsonObject]]:
    """What this profile renders on channel A that channel B's engine lacks (each with B's nearest name)."""
    flags: dict[str, JsonObject] = {}
    values: dict[str, JsonObject] = {}
    env: dict[str, JsonObject] = {}
    b_options, b_env = b.options(), sorted(b.env)
    for role, argv, plan_env in _rendered(profile):
        for flag, value in _options(argv):
            if not a.has_option(flag):
                continue  # not the incumbent's either: E2 says it on the incumbent
            if not b.has_option(flag):
                flags.setdefault(flag, {"flag": flag, "nearest": nearest(flag, b_options), "roles": []})
                flags[flag]["roles"].append(role)
                continue
            choices = (b.flag(flag) or {}).get("choices")
            if value is not None and choices is not None and value not in choices:
                values.setdefault(flag, {"flag": flag, "value": value, "nearest": nearest(value, list(choices)),
                                         "choices": len(choices)})
        for name in plan_env:
            if name.startswith("VLLM_") and a.has_env(name) and not b.has_env(name):
                env.setdefault(name, {"name": name, "nearest": nearest(name, b_env), "roles": []})
                env[name]["roles"].append(role)
    names = [{"registry": reg, "name": used, "nearest": nearest(used, b.registry(reg))}
             for reg, used in _used_names(profile).items()
             if used in a.registry(reg) and b.registry(reg) and used not in b.registry(reg)]
    return {"flags": list(flags.values()), "values": list(values.values()), "env": list(env.values()),
            "registries": names}


def pin_delta(a: ChannelLock, b: ChannelLock) -> dict[str, list[str]]:
    pa, pb = {p.name: p.version for p in a.pins()}, {p.name: p.version for p in b.pins()}
    return {"added": sorted(set(pb) - set(pa)), "removed": sorted(set(pa) - set(pb)),
            "changed": [f"{n}: {pa[n]} -> {pb[n]}" for n in sorted(set(pa) & set(pb)) if pa[n] != pb[n]]}


def engine_counts(a: EngineFacts, b: EngineFacts) -> dict[str, dict[str, int]]:
    def count(x: set[str], y: set[str]) -> dict[str, int]:
        return {"added": len(y - x), "removed": len(x - y)}

    backends_a = {f"{r}:{n}" for r in ("attention_backends", "moe_backends") for n in a.registry(r)}
    backends_b = {f"{r}:{n}" for r in ("attention_backends", "moe_backends") for n in b.registry(r)}
    return {"flags": count(set(a.flags), set(b.flags)), "env": count(set(a.env), set(b.env)),
            "backends": count(backends_a, backends_b)}


def _finding_json(f: Finding) -> JsonObject:
    return {"rule": f.rule, "severity": f.severity, "path": f.path, "message": f.message, "fix": f.fix}


def rule_changes(incumbent: LoadedProfile, candidate: LoadedProfile) -> list[JsonObject]:
    """Findings that appear or go between the incumbent and the candidate (by rule, severity and field)."""
    def key(f: Finding) -> tuple[str, str, str]:
        return f.rule, f.severity, f.path

    before = {key(f): f for f in evaluate(context_for(incumbent.profile))}
    after = {key(f): f for f in evaluate(context_for(candidate.profile))}
    out = [{**_finding_json(f), "change": "new on the candidate"} for k, f in sorted(after.items()) if k not in before]
    out += [{**_finding_json(f), "change": "gone on the candidate"} for k, f in sorted(before.items())
            if k not in after]
    return out


def expectation_changes(incumbent: LoadedProfile, candidate: LoadedProfile) -> list[JsonObject]:
    from appliance.health.context import HealthContext

    out = []
    p = incumbent.profile
    roles = sorted({role_for(p, r) for r in range(p.hardware.nodes)})
    ctx_a, ctx_b = HealthContext.load(incumbent), HealthContext.load(candidate)
    for role in roles:
        judge_a, judge_b = ctx_a.judge(role), ctx_b.judge(role)
        a = {e.id: e.rule for e in judge_a.expectations}
        b = {e.id: e.rule for e in judge_b.expectations}
        out += [{"role": role, "expectation": e, "rule": np.rule,
                 "change": f"not provable on the candidate ({np.pattern}: no call site on its DeepSeek-V4 path)"}
                for e, np in sorted(judge_b.not_provable.items()) if e not in judge_a.not_provable]
        out += [{"role": role, "expectation": e, "rule": b[e], "change": "expected on the candidate"}
                for e in sorted(set(b) - set(a))]
        out += [{"role": role, "expectation": e, "rule": a[e], "change": "not expected on the candidate"}
                for e in sorted(set(a) - set(b))]
    return out


def unprinted_lines(candidate: LoadedProfile, facts: EngineFacts) -> list[JsonObject]:
    """Log patterns the candidate's expectations read that its engine's sources do not print (fail closed)."""
    from appliance.channels.facts import load_sources
    from appliance.health.context import HealthContext

    p = candidate.profile
    ctx = HealthContext.load(candidate)
    outside = {o.pattern for o in load_sources().printed_outside}
    out = []
    for role in sorted({role_for(p, r) for r in range(p.hardware.nodes)}):
        judge = ctx.judge(role)
        names = {n for e in judge.expectations for n in e.facts()}
        for pattern in ctx.table.facts:
            if names & set(pattern.produces()) and pattern.id not in outside and \
                    not (facts.line(pattern.id) or {}).get("found"):
                out.append({"role": role, "pattern": pattern.id})
    return out


def _size(install: EngineInstall | None) -> int | None:
    if install is None:
        return None
    if install.venv is not None:
        return install.size_bytes()
    import sys

    return sum(p.stat().st_size for p in Path(sys.prefix).rglob("*") if p.is_file() and not p.is_symlink())


def disk(from_ch: ChannelLock, to_ch: ChannelLock) -> JsonObject:
    """The candidate's engine on this host: there (its size), or what installing it would take (estimated by the
    incumbent's engine of the same target) against the free space where it would go."""
    if to_ch.target == "gpu":
        from appliance.lock import image_tag

        return {"kind": "image", "image": image_tag(to_ch.name),
                "note": "a GPU channel comes as its image (docker buildx bake / docker pull); its size is the "
                        "registry's"}
    found = find_engine(to_ch)
    if found is not None:
        return {"kind": "venv", "present": True, "where": found.where, "bytes": _size(found), "more_bytes": 0}
    root = engines_root()
    probe = next((p for p in [root, *root.parents] if p.exists()), Path("/"))
    free = shutil.disk_usage(probe).free
    estimate = _size(find_engine(from_ch)) if from_ch.target == to_ch.target else None
    return {"kind": "venv", "present": False, "where": str(root / f"{to_ch.name}-{to_ch.digest[:12]}" / "venv"),
            "more_bytes": estimate, "estimate_from": from_ch.name if estimate else None, "free_bytes": free,
            "fits": None if estimate is None else free > estimate * 1.2}


def make_plan(pair: Pair, *, procfs: Path, mode: Requested = "auto") -> JsonObject:
    a, b = pair.from_channel, pair.to_channel
    fa, fb = load_facts(a.name), load_facts(b.name)
    findings = evaluate(context_for(pair.candidate.profile))
    blocking = [_finding_json(f) for f in findings if f.severity == "error"]
    try:
        choice = choose_mode(pair.candidate.profile, mode, procfs).to_json()
    except ApplianceError as exc:
        choice = {"mode": None, "requested": mode, "why": exc.message}
    return {
        "profile": pair.name,
        "from": {"channel": a.name, "engine": a.engine.label, "status": a.status, "lock_digest": a.digest,
                 "facts": fa.label},
        "to": {"channel": b.name, "engine": b.engine.label, "status": b.status, "lock_digest": b.digest,
               "facts": fb.label},
        "sets": list(pair.sets),
        "profile_digests": {"from": pair.incumbent.digest, "to": pair.candidate.digest},
        "packages": pin_delta(a, b),
        "renders": profile_facts_delta(pair.incumbent.profile, fa, fb),
        "engines": engine_counts(fa, fb),
        "capabilities": capability_changes(capabilities_of(fa), capabilities_of(fb)),
        "rules": rule_changes(pair.incumbent, pair.candidate),
        "expectations": expectation_changes(pair.incumbent, pair.candidate),
        "unprinted_lines": unprinted_lines(pair.candidate, fb),
        "disk": disk(a, b),
        "memory": choice,
        "blocking": blocking,
        "renderable": not blocking,
    }


def _said(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def render_plan(plan: JsonObject) -> str:
    a, b = plan["from"], plan["to"]
    lines = [f"upgrade plan {plan['profile']}: {a['channel']} -> {b['channel']}",
             f"  from: {a['engine']} ({a['status']}, lock {a['lock_digest'][:12]}; facts {a['facts']})",
             f"  to:   {b['engine']} ({b['status']}, lock {b['lock_digest'][:12]}; facts {b['facts']})"]
    if plan["sets"]:
        lines.append(f"  with: {'; '.join(plan['sets'])}")
    pk = plan["packages"]
    lines.append("packages:")
    lines += [f"  ~ {c}" for c in pk["changed"]] + [f"  + {n}" for n in pk["added"]] + \
        [f"  - {n}" for n in pk["removed"]] or ["  (same pins)"]
    r = plan["renders"]
    lines.append("what this profile renders that the candidate's engine lacks:")
    body = [f"  - flag {f['flag']} ({', '.join(f['roles'])})" + (f": renamed {f['nearest']}?" if f["nearest"] else "")
            for f in r["flags"]]
    body += [f"  ~ {v['flag']} {v['value']}: not among its {v['choices']} choices"
             + (f" (nearest {v['nearest']})" if v["nearest"] else "") for v in r["values"]]
    body += [f"  - env {e['name']}" + (f": renamed {e['nearest']}?" if e["nearest"] else "") for e in r["env"]]
    body += [f"  - {n['registry']} {n['name']}" + (f": renamed {n['nearest']}?" if n["nearest"] else "")
             for n in r["registries"]]
    lines += body or ["  (nothing: every flag, env var and name it renders is there)"]
    e = plan["engines"]
    lines.append("the engines apart (all of their facts): " + ", ".join(
        f"{k} +{v['added']} -{v['removed']}" for k, v in e.items()) + "  (appliance channels diff for the names)")
    lines.append("engine capabilities that change (and what each moves for this profile):")
    for c in plan["capabilities"]:
        moved = [f"{'+' if r['change'].startswith('new') else '-'} {r['rule']} {r['severity']} on {r['path']}"
                 for r in plan["rules"] if r["rule"] == c["rule"]]
        lines.append(f"  ~ {c['name']} ({c['what']}; rule {c['rule']}): {_said(c['from'])} -> {_said(c['to'])}"
                     + (f"; for this profile: {', '.join(moved)}" if moved else ""))
    if not plan["capabilities"]:
        lines.append("  (none)")
    lines.append("rules whose verdict changes for this profile:")
    lines += [f"  {'+' if c['change'].startswith('new') else '-'} {c['rule']} {c['severity']} on {c['path']}: "
              f"{c['message']}" for c in plan["rules"]] or ["  (none)"]
    lines.append("log expectations that change:")
    lines += [f"  [{c['role']}] {c['expectation']} ({c['rule']}) {c['change']}" for c in plan["expectations"]] \
        or ["  (none)"]
    for u in plan["unprinted_lines"]:
        lines.append(f"  ! [{u['role']}] the candidate's engine never prints pattern {u['pattern']}: that "
                     f"expectation fails closed")
    d = plan["disk"]
    lines.append("disk:")
    if d["kind"] == "image":
        lines.append(f"  image {d['image']}: {d['note']}")
    elif d["present"]:
        lines.append(f"  the candidate's engine is on this host: {d['where']} ({_gib(d['bytes'])}); nothing to "
                     f"install")
    else:
        est = (f"about {_gib(d['more_bytes'])} (the size of {d['estimate_from']}'s engine here)"
               if d["more_bytes"] else "unknown")
        lines.append(f"  install into {d['where']}: {est}; free there {_gib(d['free_bytes'])}"
                     + ("" if d["fits"] is None else "" if d["fits"] else "  NOT ENOUGH"))
    m = plan["memory"]
    lines.append("memory and qualification mode (U3):")
    lines.append(f"  {m['mode'] or 'refused'}: {m['why']}")
    if plan["blocking"]:
        lines.append("U1 the profile cannot be rendered on the candidate:")
        lines += [f"  {f['rule']} {f['path']}: {f['message']} (fix: {f['fix']})" for f in plan["blocking"]]
    return "\n".join(lines)
