"""What the report draws of one receipt, as plain typed values: the charts never read a receipt themselves."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchPoint:
    kind: str
    """pp | tg | ctx_pp | ctx_tg (llama-benchy's columns): which noise band applies."""
    t_s: float
    values: tuple[float, ...] = ()
    """Each repeated run's t/s."""


@dataclass(frozen=True)
class RecallPoint:
    found: int
    total: int
    needles_per_run: int
    runs_found: tuple[int, ...]
    pass_line: float
    """Fraction at or above which the serve is healthy (the receipt's own params)."""
    poisoned_max: float
    """Fraction at or below which it is in the poisoned band."""
    status: str


@dataclass(frozen=True)
class Gsm8kPoint:
    score: float
    stderr: float | None
    min_accuracy: float | None
    status: str


@dataclass(frozen=True)
class AcceptancePoint:
    positions: tuple[float | None, ...]
    """Per-position draft acceptance rates (0-1), first position first, as the serve log printed them last."""
    mean_length: float | None


@dataclass(frozen=True)
class CheckRow:
    name: str
    status: str
    summary: str


@dataclass(frozen=True)
class ReceiptView:
    label: str
    """Short, unique in the report (what a chart's x axis says)."""
    source: str
    verdict: str
    complete: bool
    profile: str
    engine: str
    lock: str
    stack: str
    started_at: str
    host: str
    engagement: str
    checks: tuple[CheckRow, ...] = ()
    bench: dict[str, BenchPoint] = field(default_factory=dict)
    recall: RecallPoint | None = None
    gsm8k: Gsm8kPoint | None = None
    acceptance: AcceptancePoint | None = None
