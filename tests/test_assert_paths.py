"""No test passes without checking: every test function's asserts are reachable on every path, not only inside a
loop over an input nothing says is not empty, or behind an `if` today's data happens to take (tests/assert_paths.py)."""

from __future__ import annotations

import ast
import textwrap

from tests.assert_paths import _iterated, _non_empty, weak_in_source, weak_tests

ALLOWED: dict[str, str] = {}
"""Known weak tests, each with why it is still here. Only ever shrinks: an entry that is no longer weak fails too."""


def test_no_test_function_can_pass_without_reaching_an_assert() -> None:
    found = {w.key: w for w in weak_tests()}
    assert len(found) < 50  # the scan runs (and a new pattern did not flood it)
    new = sorted(set(found) - set(ALLOWED))
    assert new == [], ("these tests assert only inside a loop over a possibly empty input or behind an `if`; assert "
                       "the input is not empty (or count what was checked) before the loop: "
                       f"{[f'{found[k].key}:{found[k].line}' for k in new]}")
    fixed = sorted(set(ALLOWED) - set(found))
    assert fixed == [], f"no longer weak: take them off ALLOWED: {fixed}"
    assert all(len(reason) > 40 for reason in ALLOWED.values())


def test_the_scan_tells_a_checked_loop_from_an_unchecked_one() -> None:
    source = textwrap.dedent('''
        import pytest

        def helper_that_checks(x):
            assert x

        def test_loop_over_maybe_empty(items):
            for i in items:
                assert i

        def test_loop_after_asserting_the_input(items):
            assert items
            for i in items:
                assert i

        def test_loop_over_a_literal():
            for i in (1, 2):
                assert i

        def test_if_only(x):
            if x:
                assert x > 1

        def test_if_with_a_checking_else(x):
            if x:
                assert x > 1
            else:
                assert x == 0

        def test_assert_after_the_loop(items):
            for i in items:
                assert i
            assert len(items) == 3

        def test_raises_counts():
            with pytest.raises(ValueError):
                int("x")
            for i in []:
                assert i

        def test_a_helper_that_checks_counts(x):
            helper_that_checks(x)
            if x:
                assert x

        def test_range_of_an_asserted_count(n):
            assert n >= 1
            for i in range(n):
                assert i >= 0

        def test_without_asserts_is_not_this_scans_business(x):
            x.run()
    ''')
    assert [w.name for w in weak_in_source(source, "probe.py")] == ["test_loop_over_maybe_empty", "test_if_only"]


def test_only_an_assert_that_the_input_is_filled_vouches_for_a_loop_not_one_that_mentions_it() -> None:
    def vouches(check: str, loop_input: str) -> bool:
        return _iterated(ast.parse(loop_input, mode="eval").body) in _non_empty(ast.parse(check, mode="eval").body)

    mentions = [('"ok" in output_text', "out"), ("isinstance(items, list)", "items"), ("not items", "items"),
                ("len(items) >= 0", "items"), ("rows.ok", "rows"), ("items == []", "items"),
                ("len(items) == len(other)", "items"), ("ok or rows", "rows"), ("n >= 0", "range(n)")]
    assert [pair for pair in mentions if vouches(*pair)] == []
    fills = [("items", "items"), ("len(items) >= 1", "sorted(items)"), ("0 < len(items)", "items"),
             ('sorted(d) == ["a", "b"]', "d.items()"), ("ok and rows", "enumerate(rows)"),
             ('[r.verdict for r in reports] == ["pass"]', "reports"), ("self.rows != []", "self.rows"),
             ("n >= 1", "range(n)"), ("len(xs) == 2", "range(len(xs))")]
    assert [pair for pair in fills if not vouches(*pair)] == []
