"""The hypothesis profiles: `full` in CI (CI=true), `quick` elsewhere, an explicit choice over both, and a test's own
budget scaled by the loaded one."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests import hypothesis_profiles as hp
from tests.conftest import HYPOTHESIS_PROFILE


def test_ci_gets_the_full_profile_a_local_run_the_quick_one_and_the_variable_wins_over_both() -> None:
    assert hp.chosen({"CI": "true"}) == "full"
    assert hp.chosen({}) == "quick"
    assert hp.chosen({"CI": "false"}) == "quick"
    assert hp.chosen({"CI": "true", hp.PROFILE_ENV: "quick"}) == "quick"
    assert hp.chosen({hp.PROFILE_ENV: "full"}) == "full"
    with pytest.raises(ValueError, match=r"APPLIANCE_HYPOTHESIS_PROFILE='fast' names no hypothesis profile.*full"):
        hp.chosen({hp.PROFILE_ENV: "fast"})


def test_the_loaded_profile_sets_the_default_budget_and_scales_a_tests_own() -> None:
    assert settings.default.max_examples == hp.PROFILES[HYPOTHESIS_PROFILE]
    try:
        settings.load_profile("full")
        assert (hp.budget(300), hp.budget(10), hp.budget(1)) == (300, 10, 1)
        settings.load_profile("quick")
        assert (hp.budget(300), hp.budget(10), hp.budget(1)) == (30, 3, 1)
    finally:
        settings.load_profile(HYPOTHESIS_PROFILE)
