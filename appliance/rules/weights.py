"""W1, W2: the checkpoint's weights are pinned like every package; W4: one download shared with every rank.

The lock pins each checkpoint's hub commit (versions.json `checkpoints`); `model.revision` in a profile overrides
it. A revision other than the locked one is a warning naming both (the weights differ from the ones the lock names);
a checkpoint with no pin at all is refused: its weights would move under the locked image whenever `main` moves.
"""

from __future__ import annotations

from appliance.rules.base import Finding, Rule, RuleContext, always, rule


@rule("W1", "the checkpoint revision is the locked pin",
      "a profile that overrides the pinned revision serves other weights than the ones the lock names: the image, "
      "the lock and every gate receipt of this profile name the pinned commit",
      always,
      fix="remove model.revision to use the lock's pin, or keep the override knowing no gate has run on it")
def w1_revision_override(ctx: RuleContext, r: Rule) -> list[Finding]:
    m = ctx.profile.model
    pin = ctx.pins.get(m.checkpoint)
    if m.revision is None or pin is None or pin.revision is None or m.revision == pin.revision:
        return []
    return [r.finding("warning", "model.revision", m.revision,
                      f"overrides the locked revision {pin.revision} of {m.checkpoint} (versions.json: "
                      f"{pin.confirmed})",
                      f"remove model.revision (or set it to {pin.revision}) to serve the locked weights")]


@rule("W2", "every checkpoint is pinned to a commit",
      "without a pinned revision the weights under a locked image move whenever the repository's main branch "
      "moves, and two nodes or two restarts may load different weights",
      always,
      fix="pin the checkpoint in versions.json `checkpoints.<id>.revision` (with its source), or set "
          "model.revision to a 40-hex commit you verified")
def w2_unpinned(ctx: RuleContext, r: Rule) -> list[Finding]:
    m = ctx.profile.model
    pin = ctx.pins.get(m.checkpoint)
    if m.revision is not None or (pin is not None and pin.revision is not None):
        return []
    why = f"versions.json says: {pin.confirmed}" if pin else "versions.json has no entry for it"
    return [r.finding("error", "model.revision", None, f"{m.checkpoint} has no pinned revision ({why})",
                      "set model.revision to the 40-hex commit you fetched and verified, or add the pin with its "
                      "source to versions.json `checkpoints`")]


@rule("W4", "workers take the head's verified snapshot (distributed.sync_model)",
      "each rank downloading ~160 GB on its own multiplies the slowest step of a cold start by the rank count; "
      "the head's copy, checked complete, moves over the fabric incrementally and is checked again on arrival",
      always,
      fix="set distributed.sync_model: true on multi-node serves whose ranks have their own storage")
def w4_sync_single_node(ctx: RuleContext, r: Rule) -> list[Finding]:
    d = ctx.profile.distributed
    if not d.sync_model or ctx.profile.hardware.nodes > 1:
        return []
    return [r.finding("warning", "distributed.sync_model", True, "a single-node serve has no other rank to copy to",
                      "set distributed.sync_model: false (or use `appliance sync-model --to` to fill another "
                      "machine)")]
