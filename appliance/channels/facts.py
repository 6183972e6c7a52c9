"""The committed facts of a channel's engine (channels/facts/<channel>.json), read offline: flags, env vars,
registries, source markers and which log lines the engine prints (and which process and ranks print them).

Written by `python -m tooling.channel_facts extract --write` from the installed engine, never by hand; a fork that
cannot be installed here is its base release's facts plus the cited overlay in channels/overlays/.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from appliance.bounds import CHANNEL_MAX_CHARS, CHANNEL_PATTERN
from appliance.errors import ApplianceError
from appliance.paths import data_root
from appliance.yamlstrict import load_data_table

FACT_SECTIONS = ("flags", "env", "registries", "markers", "log_lines", "code_path")
BACKEND_REGISTRIES = ("attention_backends", "moe_backends")
"""The registries counted as "backends" in a channel's summary."""


def facts_dir(root: Path | None = None) -> Path:
    return (root or data_root()) / "channels"


CHANNEL_NAME = re.compile(CHANNEL_PATTERN)
"""A channel's name (versions.json `channels`, profile key engine.channel): one path component, never `..`."""


def facts_path(channel: str, root: Path | None = None) -> Path:
    if not isinstance(channel, str) or not CHANNEL_NAME.fullmatch(channel) or len(channel) > CHANNEL_MAX_CHARS:
        from appliance.bounds import show

        raise ApplianceError(f"{show(channel)} is not a channel name", field="engine.channel", value=show(channel),
                             fix="give a channel of versions.json (appliance channels lists them)",
                             reason="the name becomes the path of the channel's facts file: one that is no name "
                                    "could read another file")
    return facts_dir(root) / "facts" / f"{channel}.json"


@dataclass(frozen=True)
class EngineFacts:
    channel: str
    engine: dict[str, str]
    flags: dict[str, dict[str, Any]]
    env: dict[str, dict[str, Any]]
    registries: dict[str, list[str]]
    markers: dict[str, dict[str, Any]]
    log_lines: dict[str, dict[str, Any]]
    overlay: dict[str, Any] | None = None
    code_path: dict[str, dict[str, Any]] = field(default_factory=dict)
    """pattern id -> {sites, reached, chain | why}: which log lines the DeepSeek-V4 code path of this engine prints
    (tooling/code_path.py); empty for a channel that serves no DeepSeek-V4 (the CPU engines)."""
    _options: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineFacts:
        flags = data.get("flags", {})
        options = set()
        for name, entry in flags.items():
            for opt in (name, *entry.get("aliases", [])):
                options.add(opt)
                if entry.get("form") == "bool" and not opt.startswith("--no-"):
                    options.add(f"--no-{opt[2:]}")
        return cls(str(data["channel"]), data.get("engine", {}), flags, data.get("env", {}),
                   data.get("registries", {}), data.get("markers", {}), data.get("log_lines", {}),
                   data.get("overlay"), data.get("code_path", {}), frozenset(options))

    @property
    def label(self) -> str:
        base = f" + overlay ({self.overlay['entries']} entries)" if self.overlay else ""
        return f"{self.engine.get('distribution')} {self.engine.get('version')}{base}"

    def has_option(self, option: str) -> bool:
        """`--x`, `--x_y` (vLLM's parser takes underscores), and `--no-x` of a --x/--no-x flag."""
        return option.split("=", 1)[0].replace("_", "-") in self._options

    def options(self) -> list[str]:
        return sorted(self._options)

    def flag(self, option: str) -> dict[str, Any] | None:
        option = option.replace("_", "-")
        for name, entry in self.flags.items():
            if option in (name, *entry.get("aliases", []), f"--no-{name[2:]}"):
                return entry
        return None

    def has_env(self, name: str) -> bool:
        return name in self.env

    def registry(self, name: str) -> list[str]:
        return self.registries.get(name, [])

    def marker(self, name: str) -> bool:
        return bool(self.markers.get(name, {}).get("found"))

    def line(self, pattern: str) -> dict[str, Any] | None:
        return self.log_lines.get(pattern)

    def on_dsv4_path(self, pattern: str) -> bool | None:
        """Whether a call site printing the pattern is reached on the DeepSeek-V4 path; None: not recorded."""
        entry = self.code_path.get(pattern)
        return None if entry is None else bool(entry.get("reached"))

    def counts(self) -> dict[str, int]:
        return {"flags": len(self.flags), "env": len(self.env),
                "backends": sum(len(self.registry(r)) for r in BACKEND_REGISTRIES)}


def nearest(name: str, known: list[str]) -> str | None:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return close[0] if close else None


MAX_FACTS_BYTES = 64 << 20
"""A channel's extracted facts (every flag, env var and log format string of an engine) are some MiB."""


@cache
def _load(path: Path) -> EngineFacts:
    from appliance.jsonstrict import load_file

    # Shipped data under the data root, read by every command that checks a profile: strictly and bounded, so a FIFO
    # or a deep document there is exit 2 naming it (read_capped, jsonstrict), never a hang or a traceback.
    try:
        return EngineFacts.from_json(load_file(path, "engine facts", MAX_FACTS_BYTES, "engine facts file"))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ApplianceError(f"cannot read the engine facts {path}: {exc}", value=str(path),
                             fix="re-extract them: python -m tooling.channel_facts extract --channel NAME "
                                 "--python VENV/bin/python --write") from None


def load_facts(channel: str, root: Path | None = None) -> EngineFacts:
    """The committed facts of one channel (cached per file), refused when they are another channel's or another
    engine's than the lock's (a file copied over another would describe an engine this channel does not run)."""
    path = facts_path(channel, root)
    facts = _load(path)
    _belongs(facts, channel, path)
    return facts


def _locked_engine(channel: str) -> tuple[str, str] | None:
    """(distribution, version) the lock gives the channel's engine (a fork: its base release, whose facts stand for
    it); None when the lock has no such channel (the extractor writing a new one)."""
    from appliance.lock import load_lock

    try:
        engine = load_lock().channel(channel).engine
    except (ApplianceError, LookupError):
        return None
    return engine.facts_engine


def _belongs(facts: EngineFacts, channel: str, path: Path) -> None:
    fix = (f"re-extract them: python -m tooling.channel_facts extract --channel {channel} --python VENV/bin/python "
           "--write (or restore the committed file)")
    why = "a channel's facts decide which flags and variables pass and which log lines are read back"
    if facts.channel != channel:
        raise ApplianceError(f"the engine facts {path} are channel {facts.channel[:100]!r}'s, not {channel}'s",
                             field="engine.channel", value=channel, fix=fix, reason=why)
    locked = _locked_engine(channel)
    found = (str(facts.engine.get("distribution")), str(facts.engine.get("version")))
    if locked is not None and found != locked:
        raise ApplianceError(f"the engine facts {path} describe {found[0]} {found[1][:40]}; the lock's {channel} runs "
                             f"{locked[0]} {locked[1]}", field="engine.channel", value=channel, fix=fix, reason=why)


# --- the overlay of a fork, and what the extractor looks for --------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OverlayEntry(_Strict):
    section: Literal["flags", "env", "registries", "markers", "log_lines", "code_path"]
    name: str = Field(min_length=1)
    """The flag, env var, registry member, marker or log pattern id."""
    registry: str | None = None
    """For section registries: which one (attention_backends, speculative_methods, ...)."""
    value: Any = None
    """The entry as the extractor would write it (not for registries, not with remove)."""
    remove: bool = False
    """The fork does not have what its base has."""
    source: str = Field(min_length=10)
    """Where the entry was read: the seed, or a file of the fork's or the harness's public repository."""

    @model_validator(mode="after")
    def _shape(self) -> OverlayEntry:
        if (self.section == "registries") != (self.registry is not None):
            raise ValueError(f"{self.name}: `registry` is required for section registries, and only there")
        if self.section != "registries" and not self.remove and self.value is None:
            raise ValueError(f"{self.name}: an entry that is not removed needs its value")
        return self

    @property
    def key(self) -> str:
        return f"{self.section}.{self.registry}.{self.name}" if self.registry else f"{self.section}.{self.name}"


class Overlay(_Strict):
    schema_version: Literal[1] = Field(alias="schema")
    channel: str
    base: str
    """The base release the overlay is applied to, e.g. vllm==0.27.1."""
    entries: list[OverlayEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Overlay:
        keys = [e.key for e in self.entries]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"duplicate overlay entries: {', '.join(dupes)}")
        return self


def load_overlay(channel: str, root: Path | None = None) -> Overlay:
    return load_data_table(facts_dir(root) / "overlays" / f"{channel}.yaml", Overlay, "channel overlay")


class Marker(_Strict):
    id: str
    rule: str
    strings: list[str] = Field(min_length=1)
    why: str
    source: str
    package: str | None = None
    """Looked for in this installed package's sources instead of the engine's (a dependency the engine calls)."""


class PrintedOutside(_Strict):
    pattern: str
    process: str
    ranks: Literal["all", "rank0"]
    why: str
    evidence: str


class Sources(_Strict):
    schema_version: Literal[1] = Field(alias="schema")
    markers: list[Marker]
    printed_outside: list[PrintedOutside] = []


def load_sources(root: Path | None = None) -> Sources:
    """channels/sources.yaml, read once per file (a profile check asks for it once per log expectation)."""
    return _sources(facts_dir(root) / "sources.yaml")


@cache
def _sources(path: Path) -> Sources:
    return load_data_table(path, Sources, "engine-facts sources")


# --- differences ----------------------------------------------------------------------------------

def diff_entries(a: dict[str, Any], b: dict[str, Any], *, committed_name: str = "A",
                 fresh_name: str = "B") -> list[str]:
    """One line per entry that differs between two facts files (sections flags, env, registries, markers,
    log_lines, and the engine version)."""
    out = []
    if a.get("engine") != b.get("engine"):
        out.append(f"engine: {committed_name} {a.get('engine')} vs {fresh_name} {b.get('engine')}")
    for section in FACT_SECTIONS:
        sa, sb = a.get(section, {}), b.get(section, {})
        for name in sorted(set(sa) | set(sb)):
            if name not in sb:
                out.append(f"{section} {name}: only in {committed_name}")
            elif name not in sa:
                out.append(f"{section} {name}: only in {fresh_name}")
            elif sa[name] != sb[name]:
                if section == "registries":
                    gone, new = sorted(set(sa[name]) - set(sb[name])), sorted(set(sb[name]) - set(sa[name]))
                    out.append(f"registries {name}: only in {committed_name}: {', '.join(gone) or '-'}; only in "
                               f"{fresh_name}: {', '.join(new) or '-'}")
                else:
                    out.append(f"{section} {name}: {committed_name} {json.dumps(sa[name], sort_keys=True)} vs "
                               f"{fresh_name} {json.dumps(sb[name], sort_keys=True)}")
    return out


def node_ranks(process: str, ranks: str) -> str:
    """The extractor's ranks as the log table says them (`printed_by.ranks`: all | local_rank0 | rank0). A worker's
    `*_once` line is printed by the first local rank of every node (local_rank0), not by every rank: a per-rank
    expectation must know the difference. The API server and the engine core are one process of the head, so
    there a `*_once` line is simply printed (all)."""
    if process in ("api_server", "engine_core") and ranks == "local_rank0":
        return "all"
    return ranks if ranks in ("all", "local_rank0", "rank0") else "all"


def printed_by_disagreements(declared: dict[str, dict[str, str]], facts: EngineFacts) -> list[str]:
    """pattern id -> the table's `printed_by` ({process, ranks}), against who the channel's engine prints it by:
    each disagreement as a line naming the pattern, the channel and both sides. A pattern the engine does not
    print is no disagreement here (the channel rehearsal's `patterns` step refuses that where it is expected)."""
    out = []
    for pattern, want in sorted(declared.items()):
        entry = facts.line(pattern) or {}
        if not entry.get("found") or want.get("process") == "nccl":
            continue
        got = {(s["process"], node_ranks(s["process"], s["ranks"])) for s in entry.get("sources", []) if
               str(s.get("call", "")).startswith("logger.")}
        if got and (want.get("process"), want.get("ranks")) not in got:
            out.append(f"{pattern}: the log table says printed by {want.get('process')} on {want.get('ranks')} ranks, "
                       f"channel {facts.channel}'s engine logs it from "
                       f"{', '.join(f'{p} on {r}' for p, r in sorted(got))}")
    return out
