"""U3: how a candidate is qualified, from the host's memory and the profile's need (K23).

- side by side: the candidate starts beside the running incumbent, on other ports. Only when the host holds both:
  the candidate's K23 need per node fits what the host has *with the incumbent running* (MemAvailable on GB10's
  unified memory and the CPU target). On discrete GPUs the candidate takes cards of its own: as many as it has ranks
  on the node, each running nothing and with its need free (hostmem/cards.py; on a 4-card box, a TP=2
  candidate beside a TP=2 serve). Single-node only: a multi-node candidate would need a second set of nodes.
- window: the incumbent's engine is stopped, the candidate served and judged, and the incumbent restored whatever
  the verdict (a DeepSeek serve on 2 x GB10 cannot hold two).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from appliance.errors import ApplianceError
from appliance.hostmem.admission import RULE, Admission, admit, need_for, ranks_on_node
from appliance.hostmem.cards import ORDER_ENV, VISIBLE_ENV, CardPick, pick_free, read_cards, visible
from appliance.hostmem.sources import mem_available_gib
from appliance.profile.model import Profile
from appliance.rules import context_for
from appliance.rules.upgrade import RULES

Mode = Literal["side-by-side", "window"]
Requested = Literal["auto", "side-by-side", "window"]
MODES: tuple[Requested, ...] = ("auto", "side-by-side", "window")


@dataclass(frozen=True)
class ModeChoice:
    mode: Mode
    requested: Requested
    why: str
    admission: Admission | None
    """The candidate's K23 need against what the host has now (None where it was not asked: multi-node)."""
    cards: CardPick | None = None
    """Side by side on discrete GPUs: the cards the candidate takes (its engine's CUDA_VISIBLE_DEVICES)."""

    def to_json(self) -> dict[str, object]:
        a = self.admission
        return {"mode": self.mode, "requested": self.requested, "why": self.why,
                "need_gib": round(a.need.total_gib, 2) if a else None,
                "need": a.need.breakdown() if a else None,
                "available_gib": round(a.available_gib, 2) if a and a.available_gib is not None else None,
                "source": a.source if a else None,
                "cards": self.cards.indices if self.cards else None}


def host_admission(candidate: Profile, procfs: Path) -> tuple[Admission, CardPick | None]:
    """The candidate's need against what this host has now (the incumbent, if running, already counted in), and on
    discrete GPUs the cards it would take."""
    ctx = context_for(candidate)
    gpu = ctx.gpu
    if gpu.arch == "cpu" or gpu.unified_memory:
        return admit(candidate, mem_available_gib(procfs), f"MemAvailable in {procfs}/meminfo", ctx), None
    need = need_for(ctx)
    pinned = {k: v for k, v in candidate.engine.extra_env.items() if k in (VISIBLE_ENV, ORDER_ENV)}
    if pinned:
        named = ", ".join(f"engine.extra_env.{k}={v}" for k, v in pinned.items())
        return Admission(RULE, "fail", need, None, "the profile",
                         f"{RULE} the profile names its cards ({named}): a second engine of it would start on the "
                         "cards the incumbent holds", "remove it from engine.extra_env: the appliance gives a second "
                         "engine free cards of its own"), None
    cards, source = read_cards()
    if cards is None:
        return admit(candidate, None, source, ctx), None
    count = ranks_on_node(candidate)
    try:
        usable = visible(cards, os.environ)
    except ApplianceError as exc:  # a MIG instance: no whole card to give a second engine
        return Admission(RULE, "fail", need, None, source, f"{RULE} {exc.message}", exc.fix), None
    pick, found = pick_free(usable, count, need.total_gib)
    if pick is None:
        narrowed = os.environ.get(VISIBLE_ENV)
        among = "" if narrowed is None else f" among the cards {VISIBLE_ENV}={narrowed} lets this process use"
        return Admission(RULE, "fail", need, None, found,
                         f"{RULE} the candidate needs {count} GPU(s) of its own with {need.total_gib:.1f} GiB free "
                         f"each ({need.breakdown()}){among}: {found}",
                         f"free {count} card(s) beside the incumbent's: stop what else runs on them"
                         + ("" if narrowed is None else f", or widen {VISIBLE_ENV} (or unset it)")), None
    return admit(candidate, pick.least_free_gib, found, ctx), pick


def choose_mode(candidate: Profile, requested: Requested, procfs: Path) -> ModeChoice:
    """U3. `requested` side-by-side on a host that cannot hold both is exit 2 naming both figures."""
    if candidate.hardware.nodes > 1:
        why = (f"a {candidate.hardware.nodes}-node serve: a candidate beside it would need a second set of "
               f"{candidate.hardware.nodes} nodes")
        if requested == "side-by-side":
            raise ApplianceError(f"U3 --mode side-by-side: {why}", field="--mode", value=requested,
                                 fix="use --mode window (or auto)")
        return ModeChoice("window", requested, why, None)
    a, cards = host_admission(candidate, procfs)
    fits = a.verdict == "ok"
    if requested == "window":
        return ModeChoice("window", requested, "asked for (--mode window)" +
                          (f"; the host could hold both ({a.detail})" if fits else ""), a)
    if fits:
        return ModeChoice("side-by-side", requested, f"the host holds both: {a.detail}", a, cards)
    if requested == "side-by-side":
        raise ApplianceError(f"U3 --mode side-by-side: the host cannot hold the candidate beside the incumbent: "
                             f"{a.detail}", field="--mode", value=requested,
                             fix="use --mode window (or auto): the incumbent is stopped for the window and restored "
                                 "whatever the verdict", reason=RULES["U3"].reason)
    why = a.detail if a.verdict == "fail" else f"what the host has is unknown ({a.detail}): not risking two serves"
    return ModeChoice("window", requested, why, a)


OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's CPU worker binds its OpenMP threads by this (channels/facts/vllm-cpu-*.json: vllm.envs, default `auto`).
`auto` takes the lowest cores, so a second engine beside the first would spin on the very cores the incumbent's
worker busy-waits on: on 2 cores the candidate's worker never finished starting in 8 minutes."""


def candidate_cpu_bind(allowed: set[int]) -> str | None:
    """The cores a CPU candidate served side by side binds to: the upper half of the cores this process may use (the
    incumbent's `auto` binding starts from the lowest), or None with a single core (nothing to split)."""
    cores = sorted(allowed)
    if len(cores) < 2:
        return None
    return ",".join(str(c) for c in cores[len(cores) // 2:])
