"""Degeneration detectors: pure functions on the text a user received.

Each names one signature of silent corruption (output that the seed found garbled below the DSpark block size or
corrupt under the eager scratch pool, and looping or mixed-script text) and returns the evidence, or None. They
judge text only, so they work on any model without calibration; a calibration may tighten their thresholds per
model.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from appliance.profile.canary import Thresholds

REPLACEMENT = "\ufffd"
_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


DEFAULT = Thresholds()


@dataclass(frozen=True)
class Symptom:
    signature: str
    evidence: str


def _excerpt(text: str, start: int, width: int = 80) -> str:
    return repr(text[max(0, start): start + width])


def repetition_loop(text: str, t: Thresholds = DEFAULT) -> Symptom | None:
    """The text ends in one unit repeated back to back (`the the the …`, a sentence over and over)."""
    body = text.rstrip()
    n = len(body)
    for period in range(1, min(t.loop_max_period_chars, n // t.loop_min_repeats) + 1):
        unit = body[n - period:]
        if not unit.strip():
            continue
        repeats, end = 1, n - period
        while end - period >= 0 and body[end - period:end] == unit:
            repeats, end = repeats + 1, end - period
        if repeats >= t.loop_min_repeats and repeats * period >= t.loop_min_chars:
            return Symptom("repetition-loop", f"{unit!r} repeated {repeats}x at the end ({repeats * period} of "
                                              f"{n} chars)")
    return None


def collapsed_vocabulary(text: str, t: Thresholds = DEFAULT) -> Symptom | None:
    """Very few distinct words over a long text: the decode keeps drawing from a tiny set of tokens."""
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < t.distinct_min_words:
        return None
    ratio = len(set(words)) / len(words)
    if ratio >= t.distinct_min_ratio:
        return None
    top = ", ".join(f"{w!r}x{c}" for w, c in Counter(words).most_common(3))
    return Symptom("collapsed-vocabulary", f"{len(set(words))} distinct of {len(words)} words "
                                           f"(ratio {ratio:.3f} < {t.distinct_min_ratio}); most common {top}")


def _is_garbage(ch: str) -> bool:
    if ch == REPLACEMENT:
        return True
    cat = unicodedata.category(ch)
    return (cat == "Cc" and ch not in "\n\r\t") or cat in ("Co", "Cn", "Cs")


def garbage_characters(text: str, t: Thresholds = DEFAULT) -> Symptom | None:
    """Replacement characters (broken byte sequences), control, private-use or unassigned code points."""
    bad = [i for i, ch in enumerate(text) if _is_garbage(ch)]
    if len(bad) < t.garbage_min_count or len(bad) / max(1, len(text)) <= t.garbage_max_ratio:
        return None
    kinds = Counter(f"U+{ord(text[i]):04X}" for i in bad).most_common(3)
    return Symptom("garbage-characters", f"{len(bad)} of {len(text)} chars are replacement/control/unassigned "
                                         f"({', '.join(f'{k}x{c}' for k, c in kinds)}); first at {bad[0]}: "
                                         f"{_excerpt(text, bad[0] - 20)}")


def script_of(ch: str) -> str | None:
    """The writing system of a letter, from its Unicode name (LATIN, CYRILLIC, CJK, …); None for non-letters."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    if not name:
        return "UNKNOWN"
    first = name.split(" ")[0]
    return "CJK" if first in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL") else first


def script_switch(text: str, t: Thresholds = DEFAULT) -> Symptom | None:
    """The reply starts in one script and its tail is in another with none of the first: a sudden switch."""
    letters = [(i, s) for i, ch in enumerate(text) if (s := script_of(ch))]
    if len(letters) < 3 * t.script_window_letters:
        return None
    head = Counter(s for _, s in letters[: len(letters) // 2])
    dominant, share = head.most_common(1)[0]
    if share < 0.9 * sum(head.values()):
        return None  # a mixed-script text from the start: nothing to switch from
    tail = letters[-t.script_window_letters:]
    tail_scripts = Counter(s for _, s in tail)
    if dominant in tail_scripts:
        return None
    first_foreign = next(i for i, s in reversed(letters) if s == dominant)
    other = tail_scripts.most_common(1)[0][0]
    return Symptom("script-switch", f"{dominant} text turns {other} after char {first_foreign}: "
                                    f"{_excerpt(text, first_foreign - 20)}")


DETECTORS = (repetition_loop, collapsed_vocabulary, garbage_characters, script_switch)


def symptoms(text: str, t: Thresholds = DEFAULT) -> list[Symptom]:
    """Every degeneration signature the text shows."""
    return [s for d in DETECTORS if (s := d(text, t))]
