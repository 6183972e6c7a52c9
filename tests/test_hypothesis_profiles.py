"""The hypothesis profiles: `full` in CI (CI=true), `quick` elsewhere, an explicit choice over both, and a test's own
budget scaled by the loaded one."""

from __future__ import annotations

import ast

import pytest
from hypothesis import settings

from tests import hypothesis_profiles as hp
from tests.conftest import HYPOTHESIS_PROFILE, ROOT


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


def _unscaled(source: str) -> list[int]:
    """Lines where a `settings(...)`/`register_profile(...)` call gives max_examples a value that is no budget(n)."""
    def scaled(value: ast.expr) -> bool:
        return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "budget"

    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == "max_examples" and not scaled(kw.value)]


def test_every_test_budget_goes_through_the_profile() -> None:
    """A literal `max_examples=150` would run its whole budget in the quick profile too (three fuzz tests did)."""
    files = [*(ROOT / "tests").glob("*.py"), *(ROOT / "tooling" / "tests").glob("*.py")]
    assert len(files) > 100
    own = {ROOT / "tests" / "hypothesis_profiles.py"}  # registers the profiles themselves
    unscaled = {f.name: lines for f in files if f not in own and (lines := _unscaled(f.read_text()))}
    assert unscaled == {}, f"write max_examples=budget(n) (tests/hypothesis_profiles.py): {unscaled}"
    assert _unscaled("@settings(max_examples=150)\ndef t(): pass\n@settings(max_examples=budget(9))\ndef u(): pass\n"
                     ) == [1]
