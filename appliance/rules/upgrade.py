"""The upgrade rules U1–U5: what `appliance upgrade` refuses, and why. Each is cited by the code that enforces it
(plan, qualify, promote, the rendezvous) and listed by `appliance rules`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpgradeRule:
    id: str
    title: str
    reason: str
    fix: str
    enforced: tuple[tuple[str, str], ...]
    """(where, what): `upgrade` = the `appliance upgrade` commands, `run` = the launch's rendezvous."""


RULES: dict[str, UpgradeRule] = {r.id: r for r in (
    UpgradeRule(
        "U1", "the candidate channel renders and validates the profile",
        "a channel that lacks a flag, env var, backend or parser the profile needs would fail at start, or silently "
        "serve something else; the rules judge the profile on the candidate's own engine facts before anything "
        "is installed or started",
        "give the overrides the plan names (`--with a.b=v` on every upgrade command), or pick another channel",
        (("upgrade", "upgrade plan / qualify / promote: exit 2 naming each error on the candidate"),)),
    UpgradeRule(
        "U2", "the candidate is no worse than the incumbent's receipt",
        "a new engine line can pass its own checks and still be slower, lose recall or stop engaging a kernel; "
        "the candidate's gate receipt is compared with the incumbent's by the gate's noise rules, so only a "
        "difference beyond the noise refuses it, and recall between its bands is inconclusive, not a pass",
        "read the qualification's reasons; run more serves (`gate serves`) for an inconclusive recall",
        (("upgrade", "upgrade qualify: promote / refuse / inconclusive, with reasons"),)),
    UpgradeRule(
        "U3", "the candidate is served beside the incumbent only when the host holds both",
        "two engines that do not fit together end in an OOM (on GB10's unified memory a hung host); where they "
        "do not fit, the incumbent is stopped for a window and restored whatever the verdict",
        "let qualify choose (--mode auto), or free memory for a side-by-side qualification",
        (("upgrade", "upgrade qualify: the candidate's K23 need against what the host has with the incumbent "
                     "running"),)),
    UpgradeRule(
        "U4", "a promoted channel proves itself or is rolled back",
        "a switch that was qualified can still fail on the serve itself (another start, other traffic): it must "
        "turn ready, pass its log expectations and a first canary round within a stated budget, else the previous "
        "channel is put back at once; a promote with no qualification of this candidate is refused",
        "qualify the candidate first (`appliance upgrade qualify`); read the rollback's reason in `upgrade status`",
        (("upgrade", "upgrade promote: qualification required; readiness, expectations and first canary rounds "
                     "within --budget-s, else automatic rollback"),)),
    UpgradeRule(
        "U5", "one channel for every rank of a multi-node serve",
        "ranks on different engine lines hang in the NCCL handshake instead of failing (K15); a channel change is "
        "one decision for all of them, switched through what every rank reads",
        "promote through the compose env file every node reads, or the Kubernetes manifests; bring a rank that "
        "runs another lock back to the serve's channel first",
        (("upgrade", "upgrade promote: refused while any rank runs another lock"),
         ("run", "the rendezvous: a half-upgraded pair is refused at once, naming both channels and the fix"))),
)}
