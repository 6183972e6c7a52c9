"""The `engine` marker is derived (tests/conftest.py): every test whose fixtures lead to ENGINE_FIXTURES gets it. These
tests prove the other half: nothing reaches the engine around those fixtures, so `-m "not engine"`
(scripts/test.sh --quick) needs no engine installed."""

from __future__ import annotations

import re
import textwrap

import pytest

from tests import engine_uses
from tests.conftest import ENGINE_FIXTURES, ROOT, needs_engine

pytest_plugins = ["pytester"]


def _quick_markexpr() -> str:
    """The `-m` expression scripts/test.sh --quick runs pytest with."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    found = re.findall(r'^\s*quick=\(-m "([^"]*)"\)$', script, re.MULTILINE)
    assert len(found) == 1, f"scripts/test.sh should set quick=(-m \"...\") once; found {found}"
    return found[0]


def test_the_quick_tier_leaves_out_exactly_the_engine_and_the_other_tiers_the_scan_skips() -> None:
    """engine_uses.OTHER_TIERS is what the engine-use scan lets pass as left out of --quick anyway; a tier added to
    one of the two but not the other would let an engine use through, or run a tier --quick means to skip. `tools`
    is derived like `engine` (tests/test_debian_tools.py)."""
    words = _quick_markexpr().split(" and ")
    assert all(re.fullmatch(r"not \w+", w) for w in words), f"--quick's -m is not a plain `not a and not b`: {words}"
    assert {w.removeprefix("not ") for w in words} == {"engine", "tools"} | engine_uses.OTHER_TIERS


def test_no_test_or_fixture_reaches_the_engine_without_an_engine_fixture() -> None:
    checked = 0
    for modules, shared in engine_uses.suite_modules():
        assert modules, "no test modules found: the scan looks in the wrong folder"
        checked += len(modules)
        misses = engine_uses.unmarked_engine_uses(modules, shared, ENGINE_FIXTURES)
        assert misses == [], ("these reach the real engine but ask for none of the engine fixtures, so `-m 'not "
                              f"engine'` would run them without one; add `vllm_engine` (or a fixture that leads to "
                              f"it): {[m.key for m in misses]}")
    assert checked > 100


def _scan(source: str) -> list[str]:
    module = engine_uses.Module.from_source("tests/probe.py", textwrap.dedent(source))
    conftest = engine_uses.Module.parse(ROOT / "tests" / "conftest.py")
    return [u.name for u in engine_uses.unmarked_engine_uses([module], [conftest], ENGINE_FIXTURES)]


def test_the_scan_finds_each_way_of_reaching_the_engine_and_accepts_each_way_of_asking_for_it() -> None:
    found = _scan('''
        import pytest
        from tests.conftest import BIN, start_serve

        def _serve_it(d):
            return start_serve(d / "run", d)

        def test_starts_a_serve(tmp_path):
            start_serve(tmp_path / "run", tmp_path)

        def test_through_a_helper(tmp_path):
            _serve_it(tmp_path)

        def test_runs_the_binary():
            subprocess.run([BIN / "vllm", "--help"])

        def test_imports_it():
            import vllm.config

        def test_serves_through_appliance_run(tmp_path):
            subprocess.Popen([str(BIN / "appliance"), "run", "--run-dir", str(tmp_path)])

        def test_a_dry_run_starts_no_engine(tmp_path):
            subprocess.run([str(BIN / "appliance"), "run", "--dry-run", "--run-dir", str(tmp_path)])

        @pytest.mark.rehearsal
        def test_another_tier_left_out_of_quick_too():
            import vllm

        @pytest.fixture
        def a_fixture_that_serves(tmp_path):
            return _serve_it(tmp_path)

        def test_asks_for_the_engine(vllm_engine, tmp_path):
            start_serve(tmp_path / "run", tmp_path)

        def test_asks_through_the_smoke_model(smoke_model_dir, tmp_path):
            start_serve(tmp_path / "run", smoke_model_dir)

        @pytest.mark.usefixtures("vllm_engine")
        def test_asks_with_usefixtures():
            import vllm

        def test_needs_nothing():
            assert 1 + 1 == 2
    ''')
    assert found == ["test_starts_a_serve", "test_through_a_helper", "test_runs_the_binary", "test_imports_it",
                     "test_serves_through_appliance_run", "a_fixture_that_serves"]


def test_the_hook_marks_a_test_whose_fixture_closure_holds_an_engine_fixture(request: pytest.FixtureRequest) -> None:
    assert not needs_engine(request.node)
    assert request.node.get_closest_marker("engine") is None
    # Sees engine tests only in a session that collected and kept them (the full suite); under `-m "not engine"`
    # they are already deselected, which the test below covers with a suite of its own.
    engine_tests = [item for item in request.session.items if needs_engine(item)]
    assert all(item.get_closest_marker("engine") for item in engine_tests)
    assert {"vllm_engine"} == ENGINE_FIXTURES


def test_not_engine_deselects_every_test_whose_fixtures_lead_to_the_engine(pytester: pytest.Pytester) -> None:
    """The real hook and engine fixtures on a small suite, collected with scripts/test.sh --quick's `-m`: what it
    deselects is exactly the tests that ask for the engine (directly, through a fixture, or with usefixtures), each
    marked."""
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems, smoke_model_dir, vllm_engine"
                          "  # noqa: F401")
    pytester.makepyfile(test_probe='''
        import pytest

        @pytest.fixture
        def a_serve(smoke_model_dir):
            return smoke_model_dir

        def test_asks_directly(vllm_engine):
            pass

        def test_asks_through_the_smoke_model(smoke_model_dir):
            pass

        def test_asks_through_a_fixture_of_its_module(a_serve):
            pass

        @pytest.mark.usefixtures("vllm_engine")
        def test_asks_with_usefixtures():
            pass

        class TestInAClass:
            def test_asks_in_a_class(self, vllm_engine):
                pass

        def test_needs_no_engine(tmp_path):
            pass
    ''')
    engine = ["test_asks_directly", "test_asks_through_the_smoke_model", "test_asks_through_a_fixture_of_its_module",
              "test_asks_with_usefixtures", "test_asks_in_a_class"]
    quick = pytester.inline_run("--collect-only", "-p", "no:cacheprovider", "-m", _quick_markexpr())
    deselected = [item for call in quick.getcalls("pytest_deselected") for item in call.items]
    assert [item.name for item in deselected] == engine
    assert all(item.get_closest_marker("engine") for item in deselected)
    kept = quick.getcall("pytest_collection_finish").session.items
    assert [item.name for item in kept] == ["test_needs_no_engine"]
    assert kept[0].get_closest_marker("engine") is None
