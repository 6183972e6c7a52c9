"""The seed battery as data: every check of the harness's final acceptance script, its pass line, the
serve (arm) it runs against, and the ones the appliance cannot run.

Source: jasl/vllm-ds4-sm120-harness, the script that sets `EXPECT=d44e224ab9` and prints `CHECK <name> ::
PASS|FAIL|TIMEOUT :: <evidence>`; it counts every CHECK line and accepts only when all passed and there are at
least 16 ("Tallying only ':: FAIL ::' would let a TIMEOUT -- or any verdict word added later -- pass silently").
Its 18 checks: A1-A2 (the source tree on the nodes), B1-B2 (the engine's unit tests), C1-C10 against the default
serve, and two escape-hatch serves with two checks each. The appliance runs the 14 that talk to a serve; the 4
that need the engine's source tree are recorded as not run, with the reason, never passed over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Arm = Literal["default", "v1", "noguard"]
ARMS: tuple[Arm, ...] = ("default", "v1", "noguard")
ARM_SERVES: dict[Arm, str] = {
    "default": "the profile with engine.runner=auto: no VLLM_USE_V2_MODEL_RUNNER rendered, so C2 judges the "
               "engine's own runner routing, as the harness's default arm sets nothing",
    "v1": "the same profile with engine.runner=v1 (VLLM_USE_V2_MODEL_RUNNER=0)",
    "noguard": "the same profile with cache.guard=0 (VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT=0)",
}


@dataclass(frozen=True)
class BatteryCheck:
    id: str
    title: str
    """The harness's own name for the check."""
    arm: Arm
    pass_line: str


@dataclass(frozen=True)
class OutsideCheck:
    id: str
    title: str
    why: str
    """Why the appliance cannot run it, and where it runs instead."""


@dataclass(frozen=True)
class Battery:
    name: str
    source: str
    expect: str
    """The engine commit the battery was accepted on."""
    checks: tuple[BatteryCheck, ...]
    outside: tuple[OutsideCheck, ...]

    @property
    def min_checks(self) -> int:
        """Every check the appliance runs must be recorded: the harness asks 16 of its 18 (the two escape-hatch
        serves that fail to boot record one line instead of two); the appliance records a line for each check
        even when its serve is absent, so all of them."""
        return len(self.checks)

    def of_arm(self, arm: Arm) -> tuple[BatteryCheck, ...]:
        return tuple(c for c in self.checks if c.arm == arm)

    def check(self, check_id: str) -> BatteryCheck | None:
        return next((c for c in self.checks if c.id == check_id), None)


_SOURCE_TREE = ("needs the engine's source tree on each node (git rev-parse and git status there); the appliance "
                "serves an image built from the lock's commit and reads no source tree: the lock and the image label "
                "name the commit, the harness checks the tree")
_UNIT_TESTS = ("the engine's own pytest suite, run from its source tree on the GPU nodes, not against a serve: "
               "run it in the harness")

SEED = Battery(
    name="seed",
    source="jasl/vllm-ds4-sm120-harness final acceptance (EXPECT=d44e224ab9)",
    expect="d44e224ab9",
    checks=(
        BatteryCheck("C1", "default serve boots", "default", "/health answers 200"),
        BatteryCheck("C2", "default runner is V2", "default", "the log says `Using V2 Model Runner`"),
        BatteryCheck("C3", "guard ON by default, every manager", "default",
                     "the log says `Same-step ghost-block guard: N/N managers active` with N >= 2"),
        BatteryCheck("C4", "no NameError/AttributeError in engine log", "default", "0 occurrences"),
        BatteryCheck("C5", "arthur c=12 x3, no degraded serve", "default",
                     "3 runs of the long-context coherence gate at c=12 (24 requests each): minimum >= 18 "
                     "(band 19-24)"),
        BatteryCheck("C6", "arthur c=1", "default", "passed=2/2"),
        BatteryCheck("C7", "issue19 instruction-following", "default",
                     "the answer is only the JSON array the system prompt asks for"),
        BatteryCheck("C8", "GSM8K strict >= 0.92", "default", "lm-eval gsm8k 8-shot exact_match strict >= 0.92"),
        BatteryCheck("C9", "multi-needle 48/48, zero leaks", "default",
                     "line counts 1500,2850 x 3 repeats, 8 needles + 8 distractors, seed 20260808: every row 8/8, "
                     "no distractor leaked, no row without a result"),
        BatteryCheck("C10", "pp2048 d8192 matches the V2 arm", "default",
                     "llama-benchy pp2048 @ d8192 within +/-5 % of the reference arm"),
        BatteryCheck("D1", "VLLM_USE_V2_MODEL_RUNNER=0 selects V1", "v1", "no V2 banner in the log"),
        BatteryCheck("D1-c1", "D-v1 still serves correctly (c=1)", "v1", "arthur c=1 passed=2/2"),
        BatteryCheck("D2", "guard=0 disables it", "noguard", "the log says `... guard: 0/M`"),
        BatteryCheck("D2-c1", "D-noguard still serves correctly (c=1)", "noguard", "arthur c=1 passed=2/2"),
    ),
    outside=(
        OutsideCheck("A1", "head node tree is the tagged SHA", _SOURCE_TREE),
        OutsideCheck("A2", "all four nodes clean at that SHA", _SOURCE_TREE),
        OutsideCheck("B1", "tests/v1/core", f"{_UNIT_TESTS} (one named pre-existing failure allowed)"),
        OutsideCheck("B2", "tests/v1/spec_decode",
                     f"{_UNIT_TESTS}; on GB10 it wedged under its 30-minute bound: the seed's 'unverified coverage "
                     f"rather than a pass'"),
    ),
)
BATTERIES = {"seed": SEED}
