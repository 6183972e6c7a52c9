"""Recall scoring on planted needles whose right answer is known (pure functions, no serve)."""

from __future__ import annotations

import pytest

from appliance.gate.corpus import filler
from appliance.gate.recall import Needle, build_cases, make_needles, plant, score, total


def test_filler_is_deterministic_digit_free_prose_of_the_asked_length():
    text = filler(5000, seed=3)
    assert text == filler(5000, seed=3) != filler(5000, seed=4)
    assert len(text) >= 5000 and text.endswith(".")
    assert not any(ch.isdigit() for ch in text)  # a six-digit code in an answer can only come from a needle


def test_needles_have_distinct_names_and_codes_and_cover_every_depth_band():
    groups = make_needles(12, 2, seed=12)
    needles = [n for g in groups for n in g]
    assert len({n.name for n in needles}) == len({n.code for n in needles}) == 24
    assert needles[0].name == "Arthur"
    depths = sorted(n.depth for n in needles)
    assert depths[0] < 1 / 24 and depths[-1] > 23 / 24
    assert all(len(n.code) == 6 for n in needles)


def test_more_needles_than_names_is_refused():
    with pytest.raises(ValueError, match="at most 26"):
        make_needles(14, 2, seed=0)


def test_planted_needles_sit_at_their_depth_in_the_hay():
    hay = filler(20000)
    needles = (Needle("Arthur", "481516", 0.1), Needle("Beatrice", "234200", 0.8))
    text = plant(hay, needles)
    for n in needles:
        at = text.index(n.sentence) / len(text)
        assert abs(at - n.depth) < 0.02
    assert text.replace("The secret code of Arthur is 481516. ", "").replace(
        "The secret code of Beatrice is 234200. ", "") == hay


def test_every_case_shares_the_same_hay_before_its_first_needle():
    hay = filler(8000)
    cases = build_cases(hay, 4, 2, seed=1)
    assert len(cases) == 4
    for case in cases:
        first = case.prompt.index("The secret code of")
        assert case.prompt[:first] == hay[:first]
        assert all(n.sentence in case.prompt for n in case.needles)


def test_score_counts_codes_found_and_names_a_confabulated_code_wrong():
    case = build_cases(filler(4000), 1, 2, seed=5)[0]
    a, b = case.needles
    perfect = score(case, f"{a.name}: {a.code}\n{b.name}: {b.code}")
    assert perfect.found == (a.name, b.name) and not perfect.missing
    half = score(case, f"{a.name}: {a.code}\n{b.name}: 999999")
    assert half.found == (a.name,) and half.missing == (b.name,) and half.wrong == (b.name,)
    none = score(case, "I could not find any secret code in the text.")
    assert none.found == () and none.missing == (a.name, b.name) and none.wrong == ()


def test_a_code_inside_a_longer_number_is_not_found():
    case = build_cases(filler(4000), 1, 1, seed=7)[0]
    code = case.needles[0].code
    assert score(case, f"the code is 9{code}1").found == ()
    assert score(case, f"the code is {code}.").found == (case.needles[0].name,)


def test_total_adds_found_over_all_cases():
    cases = build_cases(filler(4000), 3, 2, seed=2)
    answers = [f"{c.needles[0].code}" for c in cases]  # the first needle of each case only
    scores = [score(c, a) for c, a in zip(cases, answers, strict=True)]
    assert total(scores, cases) == (3, 6)
