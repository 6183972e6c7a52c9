"""Rules for the correctness canary's `canary:` section (appliance/profile/canary.py)."""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, rule


def _ladder(ctx: RuleContext) -> bool:
    c = ctx.profile.canary
    return c is not None and c.enabled and bool(c.step_down)


@rule("Q1", "the step-down ladder is for a single-node serve",
      "a rung re-renders this node's launch.json and restarts only this node's engine: the other ranks of a "
      "multi-node serve would keep the old settings (a mismatch that hangs or garbles tensor parallelism), and "
      "the head's re-render would redo the rendezvous",
      _ladder,
      fix="drop canary.step_down on a multi-node profile: the canary still detects, and confirmed corruption "
          "still turns the serve degraded")
def q1_single_node_ladder(ctx: RuleContext, r: Rule) -> list[Finding]:
    nodes = ctx.profile.hardware.nodes
    if nodes == 1:
        return []
    assert ctx.profile.canary is not None
    names = [rung.name for rung in ctx.profile.canary.step_down]
    return [r.finding("error", "canary.step_down", names,
                      f"a step-down ladder on a {nodes}-node serve would restart the head's engine alone", r.fix)]
