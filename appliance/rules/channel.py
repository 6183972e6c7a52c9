"""Channel rules (E1–E11): what a plan renders must exist in its channel's engine, and what the profile asks for must
have a mechanism there. Every name is checked against the channel's extracted facts (channels/facts/), so a flag,
env var or backend the engine does not know is refused before anything starts, naming the nearest one it knows."""

from __future__ import annotations

from appliance.channels.capabilities import DSV4_FLASHINFER, MOE_BACKEND_PACKAGES, NVFP4_CUTLASS
from appliance.channels.facts import nearest
from appliance.profile.model import Profile
from appliance.render.passthrough import passed_options
from appliance.rules.base import Finding, Rule, RuleContext, always, deepseek_on_gpu, rule

# A placeholder head address to render every rank's argv (never contacted; RFC 5737 documentation range).
_RENDER_HEAD = "192.0.2.1"


def _plans(profile: Profile) -> list[tuple[list[str], dict[str, str]]]:
    from appliance.render.plan import build_plan, rank_placements

    return [(plan.argv, plan.env) for plan in (build_plan(profile, at)
                                               for at in rank_placements(profile, _RENDER_HEAD))]


def _options(argv: list[str]) -> list[tuple[str, str | None]]:
    """(--flag, its value or None) of a `vllm serve` argv, in order."""
    out: list[tuple[str, str | None]] = []
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.append((word, None if nxt is None or nxt.startswith("--") else nxt))
    return out


def _nearest_hint(name: str, known: list[str]) -> str:
    close = nearest(name, known)
    return f"the nearest it knows is {close}" if close else "it knows nothing close"


def on_its_target(ctx: RuleContext) -> bool:
    """The channel runs the profile's hardware target: E1 refuses it otherwise, and the other E rules would judge the
    profile against an engine that cannot serve it."""
    return ctx.channel.lock.target == ctx.profile.hardware.target


@rule("E1", "the channel runs the profile's hardware target",
      "a GPU channel's engine cannot serve the cpu target and a CPU channel's cannot drive a GPU",
      always, fix="set engine.channel to a channel of the hardware's target (appliance channels)")
def e1_target(ctx: RuleContext, r: Rule) -> list[Finding]:
    want, ch = ctx.profile.hardware.target, ctx.channel
    if on_its_target(ctx):
        return []
    from appliance.lock import load_lock

    lock = load_lock()
    fits = sorted(n for n, c in lock.channels.items() if c.target == want)
    return [r.finding("error", "engine.channel", ch.name,
                      f"channel {ch.name} is a {ch.lock.target} channel; hardware {ctx.profile.hardware.gpu} needs a "
                      f"{want} channel", f"set engine.channel to one of {', '.join(fits)} (default "
                                         f"{lock.default_for(want)})")]


@rule("E2", "every flag the plan renders is one the channel's engine knows, with a value it accepts",
      "an unknown flag stops `vllm serve` at start; a removed one would have been a behaviour silently lost",
      on_its_target,
      fix="correct the profile field that renders the flag, or use a channel whose engine has it")
def e2_flags(ctx: RuleContext, r: Rule) -> list[Finding]:
    facts, name = ctx.channel.facts, ctx.channel.name
    out, seen, passed = [], set(), passed_options(ctx.profile)  # a passed flag is X1's to judge
    for argv, _ in _plans(ctx.profile):
        for option, value in _options(argv):
            if option in seen or option.partition("=")[0].replace("_", "-") in passed:
                continue
            seen.add(option)
            if not facts.has_option(option):
                out.append(r.finding("error", "render", option,
                                     f"channel {name} ({facts.label}) has no flag {option}; "
                                     f"{_nearest_hint(option, facts.options())}",
                                     "remove the profile setting that renders it, or use a channel whose engine "
                                     "has it (appliance channels diff)"))
                continue
            choices = (facts.flag(option) or {}).get("choices")
            if choices and value is not None and value not in choices:
                out.append(r.finding("error", "render", f"{option} {value}",
                                     f"channel {name} accepts {option} {' | '.join(choices)}; "
                                     f"{_nearest_hint(value, choices)}",
                                     f"use one of the values channel {name} knows"))
    return out


@rule("E3", "every VLLM_* variable the plan sets is one the channel's engine reads",
      "vLLM ignores an env var it does not read: the setting would be silently lost",
      on_its_target,
      fix="correct the profile field that sets it, or use a channel whose engine reads it")
def e3_env(ctx: RuleContext, r: Rule) -> list[Finding]:
    facts, name = ctx.channel.facts, ctx.channel.name
    passed = ctx.profile.engine.extra_env  # X3 judges those
    names = sorted({k for _, env in _plans(ctx.profile) for k in env if k.startswith("VLLM_") and k not in passed})
    return [r.finding("error", "render", var,
                      f"channel {name} ({facts.label}) reads no {var}; {_nearest_hint(var, sorted(facts.env))}",
                      "use a channel whose engine reads it, or turn off the setting that sets it")
            for var in names if not facts.has_env(var)]


_REGISTERED = (
    ("server.tokenizer_mode", "tokenizer_modes", "tokenizer mode"),
    ("server.tool_call_parser", "tool_parsers", "tool parser"),
    ("server.reasoning_parser", "reasoning_parsers", "reasoning parser"),
)


@rule("E4", "every registered name the plan uses (tokenizer mode, tool and reasoning parser, attention backend) "
            "is in the channel's registries",
      "vLLM resolves these names minutes into a start (or not until a request): a typo must fail at validate",
      on_its_target,
      fix="use a name from the channel's registries (appliance channels --json)")
def e4_registered(ctx: RuleContext, r: Rule) -> list[Finding]:
    facts, name, p = ctx.channel.facts, ctx.channel.name, ctx.profile
    out = []
    for path, registry, what in _REGISTERED:
        section, field = path.split(".")
        value = getattr(getattr(p, section), field)
        known = facts.registry(registry)
        if value and value not in known:
            out.append(r.finding("error", path, value, f"channel {name} has no {what} {value!r}; "
                                                       f"{_nearest_hint(value, known)}",
                                 f"set {path} to one of channel {name}'s {what}s"))
    backends = facts.registry("attention_backends")
    for argv, _ in _plans(p)[:1]:
        for option, value in _options(argv):
            if option == "--attention-backend" and value and value not in backends:
                out.append(r.finding("error", "render", value, f"channel {name} has no attention backend "
                                                                f"{value}; {_nearest_hint(value, backends)}",
                                     "use a channel whose engine has the backend"))
    return out


@rule("E5", "the speculative method exists on the channel (DSpark support)",
      "an engine without the method refuses the speculative config at start",
      lambda ctx: ctx.profile.speculative is not None and on_its_target(ctx),
      fix="use a channel whose engine has the method, or speculative: null")
def e5_spec_method(ctx: RuleContext, r: Rule) -> list[Finding]:
    assert ctx.profile.speculative is not None
    method, name = ctx.profile.speculative.method, ctx.channel.name
    known = ctx.channel.facts.registry("speculative_methods")
    if method in known:
        return []
    return [r.finding("error", "speculative.method", method,
                      f"channel {name} has no speculative method {method!r}; {_nearest_hint(method, known)}",
                      "use a channel with it (appliance channels diff), or set speculative: null")]


@rule("E6", "the SM120 decode and prefill switches have a mechanism on the channel",
      "the fork switches the FlashInfer SM120 paths by env var, upstream by attention backend; a switch the "
      "engine has no equivalent for would be silently ignored",
      deepseek_on_gpu,
      fix="keep engine.sm120_decode/sm120_prefill as the channel can render them, or use the fork's channel")
def e6_sm120(ctx: RuleContext, r: Rule) -> list[Finding]:
    e, caps, name = ctx.profile.engine, ctx.caps, ctx.channel.name
    if not ctx.gpu.is_sm12x:
        return []
    if caps.sm120_decode is None and e.sm120_decode:
        return [r.finding("error", "engine.sm120_decode", True,
                          f"channel {name} has neither the fork's SM120 decode switch nor upstream's "
                          f"{DSV4_FLASHINFER} attention backend: the SM120 FlashInfer path cannot be asked for",
                          "set engine.sm120_decode: false, or use a channel that has one (appliance channels)")]
    if caps.sm120_decode == "backend" and e.sm120_decode != e.sm120_prefill:
        return [r.finding("error", "engine.sm120_prefill", e.sm120_prefill,
                          f"channel {name} chooses the SM120 FlashInfer path by attention backend "
                          f"({DSV4_FLASHINFER}), for decode and prefill together: it has no separate prefill "
                          f"switch", f"set engine.sm120_prefill: {str(e.sm120_decode).lower()} (equal to "
                                     f"sm120_decode), or use the fork's channel (jasl-sm120-20260809)")]
    return []


@rule("E7", "the channel's status is said",
      "only a validated channel has had an acceptance run whose every check PASSed (the CPU channel's: CI); a partial "
      "one ran with checks that did not PASS, each a blocker (the fork's: the seed's, 17 of 18 passing), and community "
      "and unvalidated ones have had none here",
      lambda ctx: ctx.channel.lock.status != "validated",
      fix="run the acceptance gate on this channel (appliance gate) before users rely on it")
def e7_status(ctx: RuleContext, r: Rule) -> list[Finding]:
    ch = ctx.channel.lock
    blockers = f"; blockers: {'; '.join(ch.provenance.blockers)}" if ch.provenance.blockers else ""
    return [r.finding("warning", "engine.channel", ch.name,
                      f"channel {ch.name} is {ch.status}: {ch.provenance.source}{blockers}",
                      "gate it on your hardware (appliance gate, several fresh serves) before serving users")]


@rule("E8", "NVFP4 MoE: the channel has the backend the seed's NVFP4 checkpoint auto-selects",
      "the seed's NVFP4 MoE auto-selects the FlashInfer CUTLASS backend; an engine without it picks another, "
      "unmeasured one",
      lambda ctx: ctx.checkpoint.quantization == "nvfp4" and ctx.gpu.arch != "cpu",
      fix="use a channel whose NVFP4 MoE backends include FLASHINFER_CUTLASS")
def e8_nvfp4_moe(ctx: RuleContext, r: Rule) -> list[Finding]:
    known = list(ctx.caps.nvfp4_moe_backends)
    if NVFP4_CUTLASS in known:
        return []
    return [r.finding("warning", "model.quantization", "nvfp4",
                      f"channel {ctx.channel.name}'s NVFP4 MoE backends are {', '.join(known) or 'none'}: not "
                      f"{NVFP4_CUTLASS}, the one the seed's NVFP4 runs used", "prefer the MXFP4 checkpoint here, or "
                      "a channel with the FlashInfer CUTLASS NVFP4 MoE backend")]


@rule("E9", "the eager scratch pool switch exists on the channel",
      "only the fork has the DeepSeek-V4 eager scratch pool switch; elsewhere the setting would be ignored",
      lambda ctx: ctx.profile.engine.eager_scratch_pool,
      fix="set engine.eager_scratch_pool: false on this channel")
def e9_scratch_pool(ctx: RuleContext, r: Rule) -> list[Finding]:
    if ctx.caps.scratch_pool:
        return []
    return [r.finding("error", "engine.eager_scratch_pool", True,
                      f"channel {ctx.channel.name} has no eager scratch pool switch (the fork's "
                      f"VLLM_DEEPSEEK_V4_EAGER_SCRATCH_POOL): the setting would be ignored",
                      "set engine.eager_scratch_pool: false")]


@rule("E10", "the channel's FlashInfer carries the DeepSeek-V4 SM120 sparse-MLA decode dispatch its engine demands",
      "engines from upstream vLLM 0.32.0 on refuse to build DeepSeek-V4's SM120 FlashInfer attention "
      "(DeepseekV4FlashInferSM120Attention, their default on SM12x) when FlashInfer's DSV4 decode dispatch has no "
      "specialization for the layer's (heads, top-k): a RuntimeError at model construction naming "
      "flashinfer-ai/flashinfer#4380 (the vllm-0.33.0 channel's "
      "vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py:660-670)",
      lambda ctx: deepseek_on_gpu(ctx) and ctx.gpu.is_sm12x and ctx.caps.dsv4_topk_check and on_its_target(ctx),
      fix="use a channel whose FlashInfer carries the DSV4 SM120 decode dispatch (appliance channels)")
def e10_dsv4_topk(ctx: RuleContext, r: Rule) -> list[Finding]:
    if not ctx.profile.engine.sm120_decode or ctx.caps.flashinfer_dsv4_decode:
        return []
    return [r.finding("error", "engine.channel", ctx.channel.name,
                      f"channel {ctx.channel.name}'s engine builds DeepSeek-V4's SM120 FlashInfer attention only "
                      f"with FlashInfer's DSV4 sparse-MLA decode dispatch, and its FlashInfer "
                      f"({ctx.channel.lock.pin('flashinfer-python').version}) has none: every rank would stop at "
                      f"model construction", "use a channel whose FlashInfer carries it (flashinfer-ai/flashinfer"
                                          "#4380), or set engine.sm120_decode: false (FlashMLA's sparse path)")]


@rule("E11", "a MoE backend asked for by name (opt-in) has its kernels in the channel's lock",
      "the engine picks its MoE backend itself unless one is named; a named one whose kernel package the image "
      "does not install fails when the MoE layers are built (upstream's b12x needs vLLM's optional b12x extra)",
      lambda ctx: ctx.profile.engine.moe_backend is not None and on_its_target(ctx),
      fix="set engine.moe_backend: null (the engine's own choice), or use a channel whose lock installs the kernels")
def e11_moe_backend(ctx: RuleContext, r: Rule) -> list[Finding]:
    backend = ctx.profile.engine.moe_backend
    package = MOE_BACKEND_PACKAGES.get(str(backend))
    locked = {p.name for p in ctx.channel.lock.pins()}
    if package is None or package in locked:
        return []
    return [r.finding("error", "engine.moe_backend", backend,
                      f"--moe-backend {backend} runs the {package} package's kernels, which channel "
                      f"{ctx.channel.name}'s lock does not install", "set engine.moe_backend: null, or use a channel "
                      f"whose lock pins {package} (vllm-0.33.0 carries vLLM's b12x extra)")]
