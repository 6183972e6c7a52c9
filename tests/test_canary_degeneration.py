"""The degeneration detectors on text: each fires on its signature and stays quiet on healthy prose."""

from __future__ import annotations

import re

import pytest

from appliance.canary.checks import agree, agreeing_prefix
from appliance.canary.degeneration import (
    Thresholds,
    collapsed_vocabulary,
    garbage_characters,
    repetition_loop,
    script_switch,
    symptoms,
)

# SmolLM2-135M's own healthy greedy reply to the long-decode probe (cpu-smoke serve).
HEALTHY = (
    " there was a wise old woman named Elara. She was a skilled healer and had a special gift – she could heal the "
    "very fabric of the world.\n\nOne day, a group of brave adventurers stumbled upon a hidden market in the village. "
    "They were looking for a way to help the villagers, but they didn't know where to find it. The villagers were "
    "desperate, and they needed a solution.\n\nThe adventurers decided to help"
)
GERMAN = ("Der Fluss lief an der alten Mühle vorbei, wo der Müller seine Säcke mit Getreide an der Steinmauer "
          "stapelte. Im Frühling stieg das Wasser und das Rad drehte sich schneller.")


def test_healthy_prose_shows_no_symptom() -> None:
    assert symptoms(HEALTHY) == []


def test_healthy_text_in_one_other_script_shows_no_symptom() -> None:
    russian = "Река текла мимо старой мельницы, где мельник складывал мешки с зерном у каменной стены. " * 3
    assert symptoms(russian) == []
    assert symptoms(GERMAN) == []


def test_a_word_repeated_to_the_end_is_a_repetition_loop() -> None:
    found = repetition_loop(HEALTHY[:120] + " the" * 40)
    assert found is not None and found.signature == "repetition-loop"
    assert "' the' repeated 40x" in found.evidence


def test_a_sentence_repeated_to_the_end_is_a_repetition_loop() -> None:
    found = repetition_loop(HEALTHY[:80] + " I am a helpful assistant." * 9)
    assert found is not None and "repeated 9x" in found.evidence


def test_a_single_character_run_is_a_repetition_loop() -> None:
    assert repetition_loop("The answer is " + "!" * 100) is not None


def test_a_short_repeat_below_the_thresholds_is_not_a_loop() -> None:
    assert repetition_loop("Ha ha ha ha, that is funny.") is None
    assert repetition_loop(HEALTHY + " very very very") is None


def test_a_loop_threshold_can_be_tightened_per_model() -> None:
    text = HEALTHY[:80] + " ok" * 5
    assert repetition_loop(text) is None
    assert repetition_loop(text, Thresholds(loop_min_repeats=4, loop_min_chars=12)) is not None


def test_few_distinct_words_over_a_long_text_is_collapsed_vocabulary() -> None:
    text = " ".join(["cat", "dog", "the", "cat", "the", "dog", "a"] * 20)
    found = collapsed_vocabulary(text)
    assert found is not None and found.signature == "collapsed-vocabulary"
    assert "4 distinct of 140 words" in found.evidence


def test_a_short_text_is_never_judged_for_vocabulary() -> None:
    assert collapsed_vocabulary("yes yes yes yes") is None


def test_replacement_characters_are_garbage() -> None:
    found = garbage_characters(HEALTHY[:100] + "\ufffd\ufffd\ufffd\ufffd\ufffd")
    assert found is not None and found.signature == "garbage-characters"
    assert "U+FFFDx5" in found.evidence


def test_control_and_private_use_characters_are_garbage() -> None:
    assert garbage_characters("abc\x00\x01\x02\ue000\ue001 def") is not None


def test_newlines_and_tabs_are_not_garbage() -> None:
    assert garbage_characters("line one\n\tline two\r\n" * 10) is None


def test_one_stray_replacement_character_in_a_long_text_is_tolerated() -> None:
    assert garbage_characters(HEALTHY + "\ufffd") is None


def test_latin_prose_that_turns_cyrillic_is_a_script_switch() -> None:
    found = script_switch(HEALTHY + " " + "мельницы каменной стены зерном " * 4)
    assert found is not None and found.signature == "script-switch"
    assert found.evidence.startswith("LATIN text turns CYRILLIC")


def test_latin_prose_that_turns_cjk_is_a_script_switch() -> None:
    cjk = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"
    found = script_switch(HEALTHY + cjk * 2)
    assert found is not None and "turns CJK" in found.evidence


def test_a_quoted_foreign_word_is_not_a_script_switch() -> None:
    assert script_switch(HEALTHY[:200] + " (in Russian, «мельница») " + HEALTHY[200:]) is None


@pytest.mark.parametrize(("a", "b", "n"), [("abc", "abd", 2), ("abc", "abc", 3), ("", "x", 0), ("ab", "abcd", 2)])
def test_agreeing_prefix_counts_leading_equal_characters(a: str, b: str, n: int) -> None:
    assert agreeing_prefix(a, b) == n


def test_replies_agree_when_the_shorter_is_a_prefix_or_the_first_chars_match() -> None:
    assert agree("Paris.", "Paris. It is", 48)
    assert agree("x" * 50 + "late", "x" * 50 + "other", 48)
    assert not agree("Paris", "London", 48)


class ScriptedClient:
    """Stands in for a serve whose greedy replies move (a near-tie flipped by batch composition): that cannot be
    produced on demand by the real engine. Replies are scripted per call; each repeats the planted code."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.calls = 0

    async def complete(self, model, endpoint, prompt, max_tokens, *, stream=False, reasoning_effort=None):
        from appliance.canary.client import Completion

        code = re.search(r"[a-z]+-[a-z]+-\d\d", prompt if isinstance(prompt, str) else prompt[-1]["content"])
        text = self.texts[self.calls % len(self.texts)].format(code=code.group(0) if code else "")
        self.calls += 1
        return Completion(endpoint, stream, text, "length", 8)


def needle_round(texts: list[str]):
    import asyncio
    import random

    from appliance.canary.checks import Round, RoundPlan
    from appliance.canary.golden import load_golden

    client = ScriptedClient(texts)
    pauses: list[int] = []

    async def pause() -> float:
        pauses.append(client.calls)
        return 0.0

    r = Round(client, "m", load_golden(), RoundPlan(), None, random.Random(3), pause)  # type: ignore[arg-type]
    asyncio.run(r.needle())
    return r.result, client.calls, pauses


def test_a_stream_pair_that_disagrees_once_is_asked_again_after_a_pause_and_passes() -> None:
    same = "The code is {code}. It was written on the wall of the old mill by the river."
    other = "The code is {code}. Nobody knows who wrote it there, or why it was kept."
    result, calls, pauses = needle_round([same, other, same, same, same, same])
    assert result.findings == [] and result.retried == ["needle:completions"]
    assert calls == 6 and pauses == [2]  # the pause came before the pair was asked again


def test_a_stream_pair_that_disagrees_twice_is_a_stream_mismatch() -> None:
    same = "The code is {code}. It was written on the wall of the old mill by the river."
    other = "The code is {code}. Nobody knows who wrote it there, or why it was kept."
    result, _, _ = needle_round([same, other])
    assert [f.signature for f in result.findings] == ["stream-mismatch", "stream-mismatch"]
    assert "asked again, at char" in result.findings[0].evidence
