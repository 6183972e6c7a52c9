"""The two hypothesis profiles, both named: `full` (every property test's whole budget: what CI runs) and `quick`
(a tenth of it, for a run before a commit). tests/conftest.py loads one: $APPLIANCE_HYPOTHESIS_PROFILE when set,
else `full` where CI=true (CI sets it), else `quick`. A test with its own budget writes
`max_examples=budget(300)`, so the profile scales it instead of the decorator overriding the profile."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from hypothesis import settings

PROFILE_ENV = "APPLIANCE_HYPOTHESIS_PROFILE"
FULL_EXAMPLES = 100
"""hypothesis's own default: what a test without a budget tries in the full profile."""
PROFILES = {"full": FULL_EXAMPLES, "quick": FULL_EXAMPLES // 10}


def chosen(env: Mapping[str, str] = os.environ) -> str:
    name = env.get(PROFILE_ENV) or ("full" if env.get("CI", "").lower() == "true" else "quick")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} names no hypothesis profile; use one of {sorted(PROFILES)}")
    return name


def load(env: Mapping[str, str] = os.environ) -> str:
    for name, examples in PROFILES.items():
        settings.register_profile(name, max_examples=examples)
    name = chosen(env)
    settings.load_profile(name)
    return name


def budget(full: int) -> int:
    """A test's own example budget under the loaded profile: all of it in `full`, a tenth (at least 3) in `quick`."""
    return max(3, math.ceil(full * settings.default.max_examples / FULL_EXAMPLES)) if full >= 3 else full
