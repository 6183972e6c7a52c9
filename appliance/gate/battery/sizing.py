"""The seed battery's settings: the harness's own for DeepSeek, scaled to fit for cpu-smoke.

Standard values are the harness's (its acceptance script and the scripts it calls): the coherence gate at
line count 900, 12 concurrent requests x 2 repeats, 384 tokens, non-Latin fraction 0.15; multi-needle at line
counts 1500 and 2850, 8 needles, 8 distractors, 3 repeats, seed 20260808; GSM8K 8-shot at strict >= 0.92;
llama-benchy's benchmark standard, judged at pp2048 @ d8192 against the reference arm. The smoke column keeps the
shape (concurrency, repeats, needle and distractor counts, pass lines) and shrinks lengths and token budgets so
that the tiny CPU model answers inside max_model_len and a few minutes; every receipt line records its settings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from appliance.gate.sizing import BenchParams, Gsm8kParams, Size, bench_for, size_for

if TYPE_CHECKING:
    from appliance.profile.model import Profile


@dataclass(frozen=True)
class CoherenceParams:
    line_count: int
    concurrency: int
    repeat: int
    max_tokens: int
    runs: int = 1
    min_passed: int | None = None
    """Per-run floor (C5: 18 of 24); None = every request must pass (C6, D*: 2/2)."""
    max_non_latin: float = 0.15
    timeout_s: float = 900.0


@dataclass(frozen=True)
class NeedleParams:
    line_counts: tuple[int, ...]
    needles: int = 8
    distractors: int = 8
    repeats: int = 3
    seed: int = 20260808
    max_tokens: int = 512
    """The harness: max(512, needles x 16 + 256) so that the answer can never be cut short."""
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class InstructionParams:
    max_tokens: int = 512
    timeout_s: float = 600.0


@dataclass(frozen=True)
class BatteryParams:
    size: Size
    arthur_c12: CoherenceParams
    arthur_c1: CoherenceParams
    instruction: InstructionParams
    gsm8k: Gsm8kParams
    needles: NeedleParams
    bench: BenchParams
    bench_row: str
    """The row C10 judges (`pp2048 @ d8192`)."""
    bench_tolerance: float = 0.05
    check_timeout_s: float = 7200.0
    """The bound on any one check: past it the check is TIMEOUT, and the battery goes on."""


REFERENCE_PP2048_D8192: dict[str, float] = {"gb10": 1471.8}
"""The harness: "the V2 arm measured 1471.8 at d8192" (GB10 2-node TP=2). No other hardware has a reference; give
one with --bench-reference RECEIPT (a receipt of this battery's C10 on that hardware)."""


def _standard() -> BatteryParams:
    return BatteryParams(
        size="standard",
        arthur_c12=CoherenceParams(line_count=900, concurrency=12, repeat=2, max_tokens=384, runs=3, min_passed=18),
        arthur_c1=CoherenceParams(line_count=900, concurrency=1, repeat=2, max_tokens=384),
        instruction=InstructionParams(),
        # The harness's scripts/run_lm_eval.sh defaults (C8 runs it with none overridden): 8-shot, num_concurrent 4,
        # max_gen_toks 2048, max_retries 10.
        gsm8k=Gsm8kParams(min_accuracy=0.92, num_fewshot=8, num_concurrent=4, max_gen_toks=2048, max_retries=10),
        needles=NeedleParams(line_counts=(1500, 2850)),
        # The harness's scripts/run_gb10_llama_benchy_standard.sh: pp2048 tg128, depth 8192/16384/32768, C=1,
        # runs 3, --enable-prefix-caching --skip-coherence (no depth 0).
        bench=BenchParams(pp=(2048,), tg=(128,), depth=(8192, 16384, 32768), runs=3, corpus="default",
                          skip_coherence=True),
        bench_row="pp2048 @ d8192",
    )


def _smoke(max_len: int) -> BatteryParams:
    # Sized for SmolLM2-135M at max_model_len 2048 on 2 cores; the pass lines stay the harness's.
    lines = max(40, min(72, (max_len - 200) // 26))
    return BatteryParams(
        size="smoke",
        arthur_c12=CoherenceParams(line_count=lines, concurrency=12, repeat=2, max_tokens=48, runs=3, min_passed=18,
                                   timeout_s=300.0),
        arthur_c1=CoherenceParams(line_count=lines, concurrency=1, repeat=2, max_tokens=48, timeout_s=300.0),
        instruction=InstructionParams(max_tokens=64, timeout_s=120.0),
        gsm8k=Gsm8kParams(min_accuracy=0.92, limit=8, num_concurrent=2, timeout_s=1800.0),
        needles=NeedleParams(line_counts=(40, 64), max_tokens=96, timeout_s=300.0),
        bench=BenchParams(pp=(64,), tg=(16,), depth=(0,), runs=1, skip_coherence=True, timeout_s=600.0),
        bench_row="pp64",
        check_timeout_s=900.0,
    )


def battery_params_for(profile: Profile) -> BatteryParams:
    """The battery's column of the gate's sizing (`size_for`), llama-benchy as the profile serves (`bench_for`)."""
    params = _smoke(profile.limits.max_model_len) if size_for(profile) == "smoke" else _standard()
    return replace(params, bench=bench_for(params.bench, profile))
