"""What a recall score means: healthy and poisoned bands drawn from the seed's figures (the lines are this
project's), and the inconclusive gap between them.

Seed figures (GB10 2-node TP=2, 0731, DSpark, "arthur c=12", 24 needles):
- healthy guarded serves: "V1 serve means 22.3 / 21.7 / 21.7 / 21.0 gate mean 21.67 min 19",
  "V2 serve means 22.0 / 20.7 / 22.7 / 22.7 gate mean 22.00 min 20";
- poisoned serves: "measured at arthur c=12 mean 11.5, 3 of 4 serves degraded, floor 3/24" and, V2 unguarded,
  "V2 mean 10.50 [6,13]".
A pass line of 18/24 sits under every healthy single run (19) and a poisoned ceiling of 13/24 at the highest
poisoned run; a score between the two is evidence of neither: "inconclusive: run more serves".
Because "a single clean serve proves nothing at ~50% incidence", the seed's design is several fresh serves
with a few runs each ("4 fresh serves per arm ... 3 arthur c=12 runs each"): `judge_serves` reads that, and one
serve's recall in the healthy band is `inconclusive`, never a pass, wherever the race can happen (prefix caching
with speculative decoding: "the only configuration in which a block hash can be published before its KV is
written and a second request admitted in the same step to match it").

Where the bands come from, and where they are applied. They were measured with the harness's arthur
coherence gate (12 concurrent requests x 2, each prompt ~900 numbered lines with three planted codes, a request
counted as passed when its answer holds all three codes and reads as coherent text; `passed=N/24` counts
requests) on serves at max_model_len 131072. The appliance's recall check plants its own needles (two per request,
scored per needle) in ~0.75 x max_model_len of shared filler: 36,864 tokens on the DeepSeek profiles (49152). It
applies the bands as fractions: a transfer to another test and length, not a calibration of this one; the seed
battery (`gate --battery seed`, check C5) runs the harness's own shape against the same line.

V1 unguarded at 20.7/24 was "the same defect, not an inherent concurrency margin: the guard lifts V1 from 20.7 to
23.0". The bands pass it (20.7 >= 18): they separate a poisoned serve from a healthy one, not the mild form of the
race from none. What shows that form is the guard read back from the log (K4: `N/N managers active`), which the
receipt records beside the recall figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # `gate serves` and `compare` need no pydantic
    from appliance.profile.model import Profile

PASS_LINE = 18 / 24
"""At or above: healthy. Under the lowest healthy single run the seed reports (19/24)."""
POISONED_CEILING = 13 / 24
"""At or below: the poisoned band (the highest poisoned run the seed reports is 13/24)."""
V1_UNGUARDED_MEAN = 20.7 / 24
"""The seed's V1 serves without the guard: in the healthy band, yet the same defect (see the module docstring)."""
SEED_SERVES = 4
"""Fresh serves per arm in the seed's design."""
SEED_RUNS_PER_SERVE = 3
"""Recall runs per serve in the seed's design."""
MORE_SERVES = (f"inconclusive: run more serves — the seed's design is {SEED_SERVES} fresh serves x "
               f"{SEED_RUNS_PER_SERVE} runs each (appliance gate --recall-runs {SEED_RUNS_PER_SERVE} on each fresh "
               f"serve, then appliance gate serves RECEIPT...)")

ONE_SERVE = (f"a single clean serve proves nothing at ~50% incidence (the seed): confirm over {SEED_SERVES} fresh "
             f"serves x {SEED_RUNS_PER_SERVE} runs (appliance gate --recall-runs {SEED_RUNS_PER_SERVE} on each, then "
             f"appliance gate serves RECEIPT...)")
CALIBRATION = ("the harness's arthur coherence gate (c=12 x 2, 3 codes per request, scored per request) at "
               "max_model_len 131072; applied here as fractions of needles found")

Band = Literal["pass", "inconclusive", "fail"]


def exposed(profile: Profile) -> bool:
    """The race can happen on this serve: prefix caching with speculative decoding (K4)."""
    return profile.cache.prefix_caching and profile.speculative is not None


@dataclass(frozen=True)
class Bands:
    pass_line: float = PASS_LINE
    poisoned_ceiling: float = POISONED_CEILING

    def __post_init__(self) -> None:
        if not 0 <= self.poisoned_ceiling <= self.pass_line <= 1:
            raise ValueError(f"recall bands: need 0 <= poisoned ceiling {self.poisoned_ceiling:.3f} <= pass line "
                             f"{self.pass_line:.3f} <= 1")

    def judge(self, fraction: float) -> Band:
        if fraction >= self.pass_line:
            return "pass"
        if fraction <= self.poisoned_ceiling:
            return "fail"
        return "inconclusive"


def judge_serves(serve_means: list[float], bands: Bands) -> tuple[Band, str]:
    """Several fresh serves, each a mean of its runs (fractions): any serve in the poisoned band fails the
    build (a poisoned serve keeps its poisoned blocks for life); every serve healthy passes; else inconclusive."""
    if not serve_means:
        return "inconclusive", "no serve measured"
    shown = ", ".join(f"{m:.3f}" for m in serve_means)
    poisoned = [m for m in serve_means if bands.judge(m) == "fail"]
    if poisoned:
        return "fail", (f"{len(poisoned)} of {len(serve_means)} serve(s) in the poisoned band "
                        f"(<= {bands.poisoned_ceiling:.3f}): serve means {shown}")
    if all(bands.judge(m) == "pass" for m in serve_means):
        enough = "" if len(serve_means) >= SEED_SERVES else (
            f"; only {len(serve_means)} fresh serve(s): at ~50 % incidence the seed used {SEED_SERVES}")
        return ("pass" if not enough else "inconclusive",
                f"every serve mean >= {bands.pass_line:.3f}: {shown}{enough}")
    return "inconclusive", f"serve means {shown} between the bands; {MORE_SERVES}"
