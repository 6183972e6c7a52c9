"""Deterministic English filler text: the hay for the recall needles and an offline corpus for llama-benchy.

Written here (not downloaded) so the gate runs on a host with no internet. The sentences are plain prose
built from small word tables, so a tokenizer sees ordinary English (about four characters per token),
and the same seed always gives the same text: two gates over one build see the same prompts.
"""

from __future__ import annotations

import random

_SUBJECTS = (
    "The old harbour master", "A travelling clockmaker", "The village baker", "Our neighbour's daughter",
    "The river pilot", "A tired schoolteacher", "The lighthouse keeper", "An elderly gardener",
    "The station porter", "A young cartographer", "The mill owner", "The innkeeper's cousin",
)
_VERBS = (
    "walked slowly past", "spoke at length about", "carefully repaired", "kept a small notebook on",
    "complained loudly about", "painted a picture of", "wrote a long letter describing", "returned at dusk to",
    "argued with the mayor over", "made a careful drawing of", "sang an old song about", "forgot all about",
)
_OBJECTS = (
    "the grey stone bridge", "the orchard behind the chapel", "the broken weather vane", "the market by the canal",
    "the north road in winter", "the ferry that crossed at noon", "a box of faded photographs",
    "the lamps along the quay", "the flooded meadow", "the bell tower and its crooked clock",
    "the fishing boats drawn up on the shingle", "a cart loaded with apples",
)
_TAILS = (
    "while the rain came in from the sea.", "before anyone else was awake.", "as the evening turned cold.",
    "and nobody thought it strange.", "although the season had been dry.", "on the first market day of spring.",
    "and then went home for supper.", "without saying a word to the others.", "as the tide went out.",
    "long after the shops had closed.", "while the dogs barked in the lane.", "and everyone agreed it was fair.",
)


def sentences(seed: int = 0):
    """An endless stream of sentences, the same for the same seed."""
    rng = random.Random(seed)
    while True:
        yield f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"


def filler(chars: int, seed: int = 0) -> str:
    """At least ``chars`` characters of prose in paragraphs of six sentences, cut at a sentence end."""
    out: list[str] = []
    size = 0
    for index, sentence in enumerate(sentences(seed)):
        if size >= chars:
            break
        sep = "\n\n" if index and index % 6 == 0 else " " if index else ""
        out.append(sep + sentence)
        size += len(sep) + len(sentence)
    return "".join(out)
