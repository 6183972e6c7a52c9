"""The rule registry: every rule is a small pure function with a stable id (K1…, C1…, E1…, X1…)."""

from __future__ import annotations

from appliance.catalogue import CheckpointFacts, load_catalogue
from appliance.profile.model import Profile
from appliance.rules import (  # noqa: F401  (registration)
    canary,
    channel,
    cpu,
    deepseek,
    hardware,
    jit,
    memory,
    model_facts,
    passthrough,
    pitfalls,
    provenance,
    weights,
)
from appliance.rules.base import REGISTRY, Finding, Rule, RuleContext

__all__ = ["REGISTRY", "Finding", "Rule", "RuleContext", "context_for", "evaluate", "has_errors", "require_valid"]


def context_for(profile: Profile, checkpoint: CheckpointFacts | None = None) -> RuleContext:
    """Facts for the rules: the real checkpoint's when given (config.json), else the catalogue's."""
    cat = load_catalogue()
    return RuleContext(profile, checkpoint or cat.checkpoint(profile.model.checkpoint), cat.gpus[profile.hardware.gpu])


def evaluate(ctx: RuleContext) -> list[Finding]:
    findings = [f for r in REGISTRY.values() for f in r(ctx)]
    return sorted(findings, key=lambda f: (f.severity != "error", f.rule))


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def require_valid(ctx: RuleContext, consequence: str) -> list[Finding]:
    """Every finding; raises ApplianceError (exit 2) listing each error when there is one.
    `consequence` says what was not done, e.g. "nothing started"."""
    from appliance.errors import ApplianceError

    findings = evaluate(ctx)
    if has_errors(findings):
        listed = "\n    ".join(f.render() for f in findings if f.severity == "error")
        raise ApplianceError(
            f"profile {ctx.profile.name} is invalid ({ctx.checkpoint.source}); {consequence}:\n    {listed}",
            fix="correct the fields named above (appliance validate lists every finding)")
    return findings
