"""The profile's `canary:` section: the schedule, the round's size, the thresholds, the step-down ladder."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from appliance.canary.degeneration import Thresholds

# A rung may only make the engine safer: it changes these sections, never where or what it serves.
RUNG_SECTIONS = ("cache", "engine", "speculative", "limits")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Rung(_Section):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Shown in /status, the metrics and the log, e.g. `no-prefix-caching`."""
    set: list[str] = Field(min_length=1)
    """Overrides (`section.key=value`, like --set) added to the previous rungs' when this rung is taken."""

    @field_validator("set")
    @classmethod
    def _safer_sections_only(cls, items: list[str]) -> list[str]:
        for item in items:
            key, sep, _ = item.partition("=")
            if not sep or key.split(".")[0].strip() not in RUNG_SECTIONS:
                raise ValueError(f"{item!r}: a rung overrides `section.key=value` in {', '.join(RUNG_SECTIONS)} only "
                                 "(it makes the engine safer; it never moves what or where it serves)")
        return items


class Canary(_Section):
    enabled: bool = True
    """Run canary rounds while serving (`appliance run`)."""
    interval_s: float = Field(300, ge=10, le=86_400)
    """Seconds between rounds."""
    max_defer_s: float = Field(900, ge=0, le=86_400)
    """A round yields to real traffic (requests running) for at most this long, then runs anyway: corruption
    that shows only under load must still be seen."""
    busy_requests: int = Field(0, ge=0, le=4096)
    """The engine counts as busy with real traffic above this many running requests."""
    budget_s: float = Field(300, ge=10, le=3600)
    """Most seconds a round may take; past it the round is an error (not corruption) and is abandoned."""
    long_decode_tokens: int = Field(192, ge=16, le=4096)
    """Length of the long greedy decode checked for degeneration."""
    concurrency: int = Field(4, ge=2, le=64)
    """Requests sharing one cached prefix at once."""
    confirm_after: int = Field(2, ge=1, le=10)
    """Consecutive failing rounds that confirm corruption (degraded, then the next rung)."""
    calibration: str | None = None
    """This model's calibration file (from `appliance canary --record-calibration`); null = model-agnostic checks."""
    thresholds: Thresholds = Thresholds()
    """When text counts as degenerate or two replies as disagreeing."""
    step_down: list[Rung] = Field(default_factory=list, max_length=8)
    """Safer settings, in order, taken one at a time on confirmed corruption; past the last the serve is failed."""

    @field_validator("step_down")
    @classmethod
    def _unique_names(cls, rungs: list[Rung]) -> list[Rung]:
        names = [r.name for r in rungs]
        if len(set(names)) != len(names):
            raise ValueError(f"rung names repeat: {names}")
        return rungs
