"""The profile's `canary:` section: the schedule, the round's size, the thresholds, the step-down ladder."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Thresholds(BaseModel):
    """When text counts as degenerate. Defaults are loose enough for a tiny model's healthy greedy text;
    the profile's `canary.thresholds` may tighten them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    loop_max_period_chars: int = Field(200, ge=1, le=2000)
    """Longest repeating unit looked for at the end of a reply."""
    loop_min_repeats: int = Field(8, ge=2, le=1000)
    """A unit repeated back to back this many times at the end of the text is a loop…"""
    loop_min_chars: int = Field(64, ge=1, le=100_000)
    """…when the loop also covers at least this many characters."""
    distinct_min_ratio: float = Field(0.08, ge=0, le=1)
    """Collapsed vocabulary: distinct words / words below this…"""
    distinct_min_words: int = Field(60, ge=1, le=100_000)
    """…over at least this many words."""
    garbage_max_ratio: float = Field(0.02, ge=0, le=1)
    """Replacement, control, private-use or unassigned characters above this share of the text…"""
    garbage_min_count: int = Field(3, ge=1, le=100_000)
    """…and at least this many of them."""
    script_window_letters: int = Field(40, ge=5, le=10_000)
    """A script switch: the first half's dominant script is absent from a trailing window of this many letters."""
    consistency_min_prefix_chars: int = Field(48, ge=1, le=100_000)
    """Two greedy replies to one request (streamed/not, chat/completions, solo/concurrent) must agree on at least
    this many leading characters (or all of the shorter); later divergence is batch-order noise on a GPU."""
    golden_min_prefix_chars: int = Field(32, ge=1, le=100_000)
    """A calibrated greedy reply must agree with the recorded one on at least this many leading characters."""


# A rung may only make the engine safer: it changes these sections, never where or what it serves.
RUNG_SECTIONS = ("cache", "engine", "speculative", "limits")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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
