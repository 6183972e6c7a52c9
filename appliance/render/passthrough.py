"""Governed passthrough: `engine.extra_args` / `engine.extra_env` (and `-- ARGS` of render and run), for what the
profile does not model (`--chat-template`, `--load-format`, `NCCL_IB_GID_INDEX`, ...).

The words are rendered last, as given; the rules X1-X5 (rules/passthrough.py) check them first against the
channel's engine facts and against what the appliance manages (render/managed.py). Parsing here is structural
only: which word is a flag and which its value, by the flag's form in the facts (bool flags take none)."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.channels.facts import EngineFacts
from appliance.profile.model import Profile


@dataclass(frozen=True)
class PassedFlag:
    flag: str
    """The option as written, without `=VALUE` (e.g. --chat-template)."""
    value: str | None
    """Its value (the next word, or what follows `=`); None for a bool flag."""
    word: str
    """The words as given, for messages: `--x VALUE` or `--x=VALUE`."""


@dataclass(frozen=True)
class Malformed:
    word: str
    problem: str


def canonical(facts: EngineFacts, option: str) -> str:
    """The facts' own name of an option (an alias or --no-x resolves to its flag); the option itself if unknown."""
    option = option.replace("_", "-")
    for name, entry in facts.flags.items():
        if option in (name, *entry.get("aliases", []), f"--no-{name[2:]}"):
            return name
    return option


def _takes_value(facts: EngineFacts, option: str, nxt: str | None) -> bool:
    entry = facts.flag(option)
    if entry is not None:
        return entry.get("form") == "value"
    return nxt is not None and not nxt.startswith("-")  # an unknown flag (X1 refuses it): read as vLLM would


def split_args(words: list[str], facts: EngineFacts) -> tuple[list[PassedFlag], list[Malformed]]:
    """extra_args -> the flags they pass, and every word that is not well formed (rule X4)."""
    flags: list[PassedFlag] = []
    bad: list[Malformed] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            bad.append(Malformed(word, "is not a flag: a bare word would reach the engine as a positional "
                                       "argument (the model), and `--` would end its options"))
            continue
        option, eq, inline = word.partition("=")
        if eq:
            if facts.flag(option) is not None and not _takes_value(facts, option, None):
                bad.append(Malformed(word, f"{option} is a switch and takes no value"))
                continue
            flags.append(PassedFlag(option, inline, word))
            continue
        nxt = words[i] if i < len(words) else None
        if not _takes_value(facts, option, nxt):
            flags.append(PassedFlag(option, None, word))
            continue
        if nxt is None:
            bad.append(Malformed(word, f"{option} needs a value (write {option} VALUE)"))
            continue
        if nxt.startswith("-"):
            bad.append(Malformed(f"{word} {nxt}", f"the value of {option} starts with '-': the engine's parser "
                                                  f"would read it as a flag of its own; write {option}={nxt} if "
                                                  f"it really is the value"))
            i += 1
            continue
        flags.append(PassedFlag(option, nxt, f"{word} {nxt}"))
        i += 1
    seen: set[str] = set()
    for f in flags:
        name = canonical(facts, f.flag)
        if name in seen:
            bad.append(Malformed(f.word, f"{name} is passed twice: the engine would keep only the last one"))
        seen.add(name)
    return flags, bad


def passthrough_argv(profile: Profile) -> list[str]:
    """The passed words, rendered last and as given."""
    return list(profile.engine.extra_args)


def passthrough_env(profile: Profile) -> dict[str, str]:
    return dict(profile.engine.extra_env)


def passed_options(profile: Profile) -> set[str]:
    """The options extra_args passes, by the name they are written with (the channel rules leave them to X1)."""
    return {w.partition("=")[0].replace("_", "-") for w in profile.engine.extra_args if w.startswith("-")}


def masked_argv(argv: list[str]) -> list[str]:
    """An argv as it may be shown: each word redacted, and the word after a secret-named flag (`--api-key X`)
    masked whole, by the one redaction's own patterns."""
    from appliance.redact import MASK, redact

    out, prev = [], ""
    for word in argv:
        out.append(MASK if prev and redact(f"{prev} probe").endswith(MASK) else redact(word))
        prev = word
    return out
