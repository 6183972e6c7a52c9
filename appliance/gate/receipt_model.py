"""The receipt's schema, checked when a receipt is read back (`gate compare`): what the comparison reads is typed
and bounded, so a hand-edited or truncated receipt is exit 2 naming the field, never a traceback, and NaN or
infinity can never be judged an improvement. Strict types: "5" is no count. Unknown keys are kept (a newer gate
may add some); only the ones the comparison reads are held to a shape, and what it indexes is required."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from appliance.bounds import show
from appliance.errors import ApplianceError

Finite = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ProfileRef(_Part):
    name: str | None = None
    digest: str | None = None


class Engine(_Part):
    version: str | None = None


class Provenance(_Part):
    profile: ProfileRef | None = None
    channel: str | None = None
    """The engine channel the serve ran (versions.json channels); `gate compare` refuses two unless asked."""
    lock_digest: str | None = None
    engine: Engine | None = None


class Expectation(_Part):
    rule: str
    name: str
    status: str
    detail: Any = None


class Engagement(_Part):
    available: bool | None = None
    guard: str | None = None
    runner: str | None = None
    sm120_decode: bool | None = None
    expectations: list[Expectation] | None = None
    fatal: list[dict[str, Any]] | None = None
    verdict: str | None = None


Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class BenchRow(_Part):
    test: str
    kind: str
    t_s: Rate | None = None
    values: list[Rate] | None = None
    """Each repeated run's t/s: their spread is what `compare` calls noise."""
    verify_steps_s: Rate | None = None


class SpecDecode(_Part):
    drafts: Count | None = None
    accepted_tokens: Count | None = None
    mean_acceptance_length: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None


class BenchMetrics(_Part):
    rows: list[BenchRow] = []
    spec_decode: SpecDecode | None = None


class _PartOfTotal(_Part):
    """A count of a total (`part` of `total`): both there or neither, and the part never above the total."""

    _part: ClassVar[str]
    total: Count | None = None

    @model_validator(mode="after")
    def _part_of_total(self) -> _PartOfTotal:
        part = getattr(self, self._part)
        if (part is None) != (self.total is None):
            raise ValueError(f"{self._part} and total come together (got {self._part}={part}, total={self.total})")
        if part is not None and self.total is not None and part > self.total:
            raise ValueError(f"{self._part}={part} exceeds total={self.total}: a count of a total cannot exceed it")
        return self


class RecallMetrics(_PartOfTotal):
    _part: ClassVar[str] = "found"
    found: Count | None = None


class StructuredMetrics(_PartOfTotal):
    _part: ClassVar[str] = "valid"
    valid: Count | None = None


class ReasoningMetrics(_Part):
    accepted: Count = 0
    think_leaks: Count = 0
    effort_problems: Count = 0
    tool_call_parsed: bool | None = None


class Gsm8kMetrics(_Part):
    strict_match: Fraction | None = None
    strict_match_stderr: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


class RecallParams(_Part):
    min_found: Fraction | None = None
    poisoned_max: Fraction | None = None


METRICS: dict[str, type[_Part]] = {"bench": BenchMetrics, "recall": RecallMetrics, "structured": StructuredMetrics,
                                   "reasoning": ReasoningMetrics, "gsm8k": Gsm8kMetrics}


class Check(_Part):
    name: str
    status: str
    summary: str
    params: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _typed_metrics(self) -> Check:
        model = METRICS.get(self.name)
        try:
            if model is not None and self.metrics:
                model.model_validate(self.metrics)
            if self.name == "recall" and self.params:
                RecallParams.model_validate(self.params)
        except ValidationError as exc:  # said as one line: which metric of which check, and its value
            where = "metrics" if model is not None and self.metrics else "params"
            raise ValueError(f"{self.name}: {_describe(exc.errors()[0], where)}") from None
        return self


class Receipt(_Part):
    schema_: Literal["appliance-gate-receipt/1"] = Field(alias="schema")
    complete: bool
    verdict: Literal["pass", "fail", "inconclusive", "incomplete"]
    started_at: str
    size: str | None = None
    provenance: Provenance
    engagement: Engagement
    checks: list[Check]

    @model_validator(mode="after")
    def _checks_named_once(self) -> Receipt:
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ValueError(f"a check appears twice: {sorted({n for n in names if names.count(n) > 1})}")
        return self


def _describe(error: Any, prefix: str = "") -> str:
    """`path=value: message`; a cross-field error (found > total) says its own values and names no input."""
    path = ".".join(str(p) for p in (prefix, *error["loc"]) if p != "") or "(top)"
    if error["type"] == "value_error":
        return f"{path}: {error['msg'].removeprefix('Value error, ')}"
    return f"{path}={show(error.get('input'))}: {error['msg']}"


def validate_receipt(data: Any, source: str) -> dict[str, Any]:
    """`data` unchanged when it is a receipt; else ApplianceError naming the file, the field and the value."""
    try:
        Receipt.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(e) for e in exc.errors()[:5]]
        raise ApplianceError(f"{source}: not a valid receipt ({len(exc.errors())} problem(s))\n    "
                             + "\n    ".join(problems), field=problems[0].split("=")[0].split(":")[0], value=source,
                             fix="give a receipt.json written by `appliance gate`, unedited",
                             reason="the comparison must not judge numbers it cannot trust") from None
    return data
