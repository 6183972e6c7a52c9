"""The receipt's schema, checked when a receipt is read back (`gate compare`, `serves`, `paired`): `validate_receipt`
returns the typed Receipt, and the readers read its attributes, so a hand-edited or truncated receipt is exit 2
naming the field, never a traceback, and NaN or infinity can never be judged an improvement. Strict types: "5" is no
count. Unknown keys are kept (a newer gate may add some); the ones the readers use are held to a shape. Each check
the readers understand has its own model (BenchCheck, RecallCheck, …), chosen by its `name`; any other is a Check."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    ValidationError,
    model_validator,
)

from appliance.bounds import show
from appliance.errors import ApplianceError

# Every number the readers use is bounded to what a gate can measure (issue 22): a count of 10^400, a rate of
# 5e-324 (whose ratio overflows) or 1e308 is no measurement. The document itself is read by appliance/jsonstrict.py
# (duplicate keys, NaN, 400-digit numbers, deep nesting, lone surrogates refused) before it reaches this schema.
MAX_COUNT = 10**12
MIN_RATE, MAX_RATE = 1e-9, 1e9
"""tokens/s: a nonzero rate below a token in 30 years, or above a billion a second, is no measurement."""
MAX_TEXT = 1 << 20
"""A summary, a name or a detail; the receipt file as a whole is capped by gate/receipt.py."""


def _rate(value: float) -> float:
    if value and not MIN_RATE <= value <= MAX_RATE:
        raise ValueError(f"a rate of {value:g} is outside {MIN_RATE:g}..{MAX_RATE:g} (or 0)")
    return value


Finite = Annotated[float, Field(allow_inf_nan=False, ge=-1e15, le=1e15)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Guard = Annotated[str, Field(pattern=r"^[0-9]{1,6}/[0-9]{1,6}$")]
"""The guard's `active/total` KV managers (K4), as the gate writes it."""



def verdict_word(verdict: str) -> str:
    """How a receipt's verdict is printed: PASS, FAIL, NOTHING MEASURED."""
    return verdict.replace("_", " ").upper()

class _Part(BaseModel):
    # a receipt read back is evidence: read-only
    model_config = ConfigDict(extra="allow", strict=True, frozen=True, str_max_length=MAX_TEXT)


class ProfileRef(_Part):
    name: str | None = None
    digest: str | None = None
    source: str | None = None
    overrides: list[str] = []


class Engine(_Part):
    version: str | None = None


class Gpu(_Part):
    name: str | None = None


class Hardware(_Part):
    """This host as the gate saw it (gate/provenance.py `hardware`); the doctor's lines are kept as written."""
    host: str | None = None
    machine: str | None = None
    cpus: Count | None = None
    mem_total_gib: Finite | None = None
    gpus: list[Gpu] = []


class Provenance(_Part):
    appliance_version: str | None = None
    channel: str | None = None
    """The engine channel the serve ran (versions.json channels); `gate compare` refuses two unless asked."""
    lock_digest: str | None = None
    profile: ProfileRef | None = None
    engine: Engine | None = None
    image: dict[str, str] | None = None
    """The image's labels (APPLIANCE_IMAGE_*), none outside an image."""
    hardware: Hardware | None = None
    stack: str | None = None


class Target(_Part):
    url: str | None = None
    exporter: str | None = None
    model: str | None = None
    checkpoint: str | None = None
    tokenizer: str | None = None


class Expectation(_Part):
    rule: str
    name: str
    status: str
    detail: Any = None
    """What the exporter's expectation said: its own free-form value."""


class FatalHit(_Part):
    id: str | None = None
    rule: str | None = None
    text: str | None = None


class Engagement(_Part):
    available: bool | None = None
    error: str | None = None
    """Why the exporter could not be read (available: false)."""
    state: str | None = None
    verdict: str | None = None
    guard: Guard | None = None
    runner: str | None = None
    sm120_decode: bool | None = None
    attention_backend: str | None = None
    kv_tokens: Count | None = None
    expectations: list[Expectation] = []
    fatal: list[FatalHit] = []
    facts: dict[str, JsonValue] = {}
    """The engine log's facts as the exporter extracted them: open names (each channel's engine prints its own),
    JSON values."""

    @model_validator(mode="before")
    @classmethod
    def _null_lists(cls, data: Any) -> Any:
        """An older gate wrote null for "none seen"."""
        if isinstance(data, dict):
            return {k: [] if k in ("expectations", "fatal") and v is None else v for k, v in data.items()}
        return data


Rate = Annotated[float, Field(ge=0, allow_inf_nan=False), AfterValidator(_rate)]


class BenchRow(_Part):
    test: str
    kind: str
    t_s: Rate | None = None
    values: list[Rate] | None = None
    """Each repeated run's t/s: their spread is what `compare` calls noise."""
    verify_steps_s: Rate | None = None
    t_s_std: Finite | None = None
    peak_t_s: Finite | None = None
    ttfr_ms: Finite | None = None
    est_ppt_ms: Finite | None = None
    e2e_ttft_ms: Finite | None = None


class SpecDecode(_Part):
    drafts: Count | None = None
    accepted_tokens: Count | None = None
    mean_acceptance_length: Annotated[float, Field(ge=1, le=1000, allow_inf_nan=False)] | None = None


class BenchMetrics(_Part):
    rows: list[BenchRow] = []
    spec_decode: SpecDecode | None = None

    def measured(self) -> dict[str, BenchRow]:
        """test -> row, for the rows that carry a rate."""
        return {r.test: r for r in self.rows if r.t_s}


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
    runs_found: list[Count] | None = None
    """Needles found in each run of this serve (`--recall-runs`)."""
    needles_per_run: Count | None = None


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
    strict_match_stderr: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    strict_match_runs: list[Fraction | None] | None = None
    """Each lm-eval run's accuracy (--gsm8k-runs): what `compare` judges interleaving by."""


class RecallParams(_Part):
    min_found: Fraction | None = None
    poisoned_max: Fraction | None = None
    runs: Count | None = None


class Gsm8kParams(_Part):
    min_accuracy: Fraction | None = None


class BenchParams(_Part):
    corpus: str | None = None


class Check(_Part):
    """A check as every receipt writes it; the metrics of one the readers do not interpret stay as written."""

    name: str
    status: str
    summary: str
    seconds: Finite | None = None
    started_at: str | None = None
    params: dict[str, JsonValue] | None = None
    metrics: dict[str, JsonValue] | None = None
    details: dict[str, JsonValue] | None = None
    """Every reply, argv and raw tool output of the check: evidence for people, read by no program."""


class BenchCheck(Check):
    name: Literal["bench"]
    params: BenchParams | None = None  # type: ignore[assignment]
    metrics: BenchMetrics | None = None  # type: ignore[assignment]


class RecallCheck(Check):
    name: Literal["recall"]
    params: RecallParams | None = None  # type: ignore[assignment]
    metrics: RecallMetrics | None = None  # type: ignore[assignment]


class StructuredCheck(Check):
    name: Literal["structured"]
    metrics: StructuredMetrics | None = None  # type: ignore[assignment]


class ReasoningCheck(Check):
    name: Literal["reasoning"]
    metrics: ReasoningMetrics | None = None  # type: ignore[assignment]


class Gsm8kCheck(Check):
    name: Literal["gsm8k"]
    params: Gsm8kParams | None = None  # type: ignore[assignment]
    metrics: Gsm8kMetrics | None = None  # type: ignore[assignment]


TYPED_CHECKS: dict[str, type[Check]] = {"bench": BenchCheck, "recall": RecallCheck, "structured": StructuredCheck,
                                        "reasoning": ReasoningCheck, "gsm8k": Gsm8kCheck}
OTHER = "other"


def _kind(value: Any) -> str:
    name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
    return name if isinstance(name, str) and name in TYPED_CHECKS else OTHER


AnyCheck = Annotated[
    Annotated[BenchCheck, Tag("bench")] | Annotated[RecallCheck, Tag("recall")]
    | Annotated[StructuredCheck, Tag("structured")] | Annotated[ReasoningCheck, Tag("reasoning")]
    | Annotated[Gsm8kCheck, Tag("gsm8k")] | Annotated[Check, Tag(OTHER)],
    Discriminator(_kind)]
C = TypeVar("C", bound=Check)


class BatteryLine(_Part):
    """A check of the battery's definition (battery/definition.py), as the receipt lists them."""
    id: str
    title: str
    arm: str


class NotRun(_Part):
    id: str
    title: str
    why: str


class BatteryOutcome(_Part):
    """battery/verdict.py's BatteryResult, as written."""
    accepted: bool
    passed: Count
    recorded: Count
    minimum: Count
    blockers: list[str] = []
    missing: list[str] = []
    why: str


class BatteryRef(_Part):
    """`gate --battery`'s section: which battery, which arm of it, its definition and, once judged, its result."""
    name: str
    source: str | None = None
    expect: str | None = None
    arm: str
    serve: str | None = None
    definition: list[BatteryLine] = []
    not_run: list[NotRun] = []
    result: BatteryOutcome | None = None


class ProtocolRow(_Part):
    """A row of `gate --bench-protocol` (gate/protocol.py): its name in the bench check, the anchor's shape of it, every
    way it was run differently (said), and the anchor figures it stands beside (anchors.yaml ids)."""
    test: str
    step: str
    kind: str
    anchor: str
    scaling: list[str] = []
    figures: list[str] = []


class BenchProtocolRef(_Part):
    """Which anchor protocol the bench ran, at what size, and how its shapes were scaled (`rule`, None: unscaled)."""
    name: str
    title: str
    anchor: str
    size: Literal["smoke", "standard"]
    max_model_len: Count
    scaled: bool
    rule: str | None = None
    choices: list[str] = []
    data_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """anchors.yaml as the gate read it: the report says when the figures have changed since."""
    rows: list[ProtocolRow]

    @model_validator(mode="after")
    def _scaling_said(self) -> BenchProtocolRef:
        if self.scaled != (self.rule is not None):
            raise ValueError("a scaled protocol says its rule, and an unscaled one has none")
        return self


class Receipt(_Part):
    schema_: Literal["appliance-gate-receipt/1"] = Field(alias="schema")
    complete: bool
    verdict: Literal["pass", "fail", "inconclusive", "incomplete", "nothing_measured"]
    started_at: str
    finished_at: str | None = None
    selected: list[str] = []
    size: str | None = None
    target: Target | None = None
    provenance: Provenance
    engagement: Engagement
    checks: list[AnyCheck]
    warnings: list[str] = []
    battery: BatteryRef | None = None
    bench_protocol: BenchProtocolRef | None = None
    """`gate --bench-protocol NAME`: the anchor protocol the bench check ran (its rows stand beside anchors.yaml)."""
    duration_s: Finite | None = None

    @model_validator(mode="after")
    def _checks_named_once(self) -> Receipt:
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ValueError(f"a check appears twice: {sorted({n for n in names if names.count(n) > 1})}")
        return self

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def _typed(self, kind: type[C]) -> C | None:
        found = next((c for c in self.checks if isinstance(c, kind)), None)
        return found

    def bench(self) -> BenchCheck | None:
        return self._typed(BenchCheck)

    def recall(self) -> RecallCheck | None:
        return self._typed(RecallCheck)

    @property
    def profile(self) -> ProfileRef:
        return self.provenance.profile or ProfileRef()

    @property
    def engine_version(self) -> str | None:
        return self.provenance.engine.version if self.provenance.engine else None


def _describe(error: Any, prefix: str = "") -> str:
    """`path=value: message`; a cross-field error (found > total) says its own values and names no input. The union's
    tag (which model a check was read as) is left out of the path: `checks.1.metrics.found`."""
    loc = [p for i, p in enumerate(error["loc"]) if not (i and isinstance(error["loc"][i - 1], int)
                                                        and p in (*TYPED_CHECKS, OTHER))]
    path = ".".join(str(p) for p in (prefix, *loc) if p != "") or "(top)"
    if error["type"] == "value_error":
        return f"{path}: {error['msg'].removeprefix('Value error, ')}"
    return f"{path}={show(error.get('input'))}: {error['msg']}"


def validate_receipt(data: Any, source: str) -> Receipt:
    """The typed receipt; ApplianceError naming the file, the field and the value when `data` is none."""
    try:
        return Receipt.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(e) for e in exc.errors()[:5]]
        raise ApplianceError(f"{source}: not a valid receipt ({len(exc.errors())} problem(s))\n    "
                             + "\n    ".join(problems), field=problems[0].split("=")[0].split(":")[0], value=source,
                             fix="give a receipt.json written by `appliance gate`, unedited",
                             reason="the comparison must not judge numbers it cannot trust") from None
