"""Rules held to the seed's own lines (issue 15): each test quotes the line it follows."""

from __future__ import annotations

from dataclasses import replace

from appliance.profile import load_profile
from appliance.rules import context_for, evaluate
from appliance.rules.engine_pin import EnginePin, pinned_engine


def _ctx(profile: str, *overrides: str):
    return context_for(load_profile(profile, cli_overrides=list(overrides)).profile)


def _hits(ctx, rule_id: str):
    return [f for f in evaluate(ctx) if f.rule == rule_id]


# Seed: "VLLM_USE_V2_MODEL_RUNNER=0 → V1, guard still 5/5, c=1 2/2" (acceptance on the exact published SHA);
# "Upstream vllm-project#51768 added _validate_mrv1_piecewise_cudagraph ... now fails to boot" (a later merge).
def test_k5_v1_with_piecewise_is_a_warning_on_the_pinned_engine_which_predates_51768() -> None:
    assert not pinned_engine().refuses_v1_piecewise
    hits = _hits(_ctx("rtx-pro-6000-tp2", "engine.runner=v1"), "K5")
    assert [h.severity for h in hits] == ["warning"]
    assert "#51768" in hits[0].message and "FULL_DECODE_ONLY" in hits[0].fix


def test_k5_v1_with_piecewise_is_an_error_on_an_engine_that_carries_51768() -> None:
    later = EnginePin("jasl/vllm", "sm120-pr-41834-stable-preview-20260815", "1234567890")
    ctx = replace(_ctx("rtx-pro-6000-tp2", "engine.runner=v1"), engine=later)
    hits = _hits(ctx, "K5")
    assert [h.severity for h in hits] == ["error"] and "fails to boot" in hits[0].message
