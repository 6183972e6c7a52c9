"""The log-check table (healthchecks/logchecks.yaml), loaded strictly: unknown keys, unknown fact
names, unknown predicates, bad regexes and unparsable checks are errors at load time, not at 3 am."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Container
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from appliance.health.predicates import PREDICATES
from appliance.health.scantable import LinePattern, ScanTable
from appliance.paths import healthchecks_dir
from appliance.profile.model import Profile
from appliance.profile.topology import RankView, Role
from appliance.yamlstrict import load_data_table

ROLES: tuple[Role, ...] = get_args(Role)
FactType = Literal["str", "int", "float"]
Process = Literal["api_server", "engine_core", "worker", "nccl"]
"""Who prints a line: the API server (vllm serve on the head), the engine core (its scheduler: the KV managers, the
KV sizing), a GPU worker process (one per rank, on every node), or the NCCL library itself (per rank)."""
Ranks = Literal["all", "local_rank0", "rank0"]
"""Which of those processes print it: every one; the first rank on each node (vLLM's `*_once` with its default
scope "local"); or only a rank that is rank 0 of its process group (and local rank 0): a node hosting none never
prints the line (RankView.group_leader)."""
HEAD_ONLY: frozenset[str] = frozenset({"api_server", "engine_core"})
"""Processes that run on the head (or the single node) only: a headless worker runs neither."""
Scalar = str | int | float | bool

_ID = r"^[a-z0-9][a-z0-9-]*$"
_RULE = r"^[A-Z][0-9]+$"  # an id of appliance/rulebook.py (K…, W…)
COMPARE: dict[str, Callable[[Any, Any], bool]] = {  # two-character operators first: the regex tries in order
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}
_OPS = tuple(COMPARE)
_CHECK = re.compile(rf"^\s*(\S+)\s*({'|'.join(map(re.escape, _OPS))})\s*(\S+)\s*$")
_NUMBER = re.compile(r"^-?[0-9]+(?:\.[0-9]+)?$")
PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


@dataclass(frozen=True)
class Operand:
    kind: Literal["fact", "profile", "lock", "number", "string"]
    value: str | float

    @classmethod
    def parse(cls, token: str) -> Operand:
        if _NUMBER.match(token):
            return cls("number", float(token))
        if len(token) >= 2 and token[0] == token[-1] == "'":
            return cls("string", token[1:-1])
        for kind in ("profile", "lock"):
            if token.startswith(f"{kind}."):
                return cls(kind, token.removeprefix(f"{kind}."))
        return cls("fact", token)


@dataclass(frozen=True)
class FactCheck:
    text: str
    left: Operand
    op: str
    right: Operand

    @classmethod
    def parse(cls, text: str) -> FactCheck:
        m = _CHECK.match(text)
        if not m:
            raise ValueError(f"check {text!r} is not `A op B` with op one of {', '.join(_OPS)}")
        return cls(text, Operand.parse(m[1]), m[2], Operand.parse(m[3]))

    def facts(self) -> list[str]:
        return [str(o.value) for o in (self.left, self.right) if o.kind == "fact"]


def _profile_path_exists(path: str) -> bool:
    node: object = Profile
    for part in path.split("."):
        fields = getattr(node, "model_fields", None)
        if not fields or part not in fields:
            return False
        ann = fields[part].annotation
        node = next((a for a in getattr(ann, "__args__", ()) if hasattr(a, "model_fields")), ann)
    return True


class Pattern(_Strict):
    id: str = Field(pattern=_ID)
    """Stable name of the pattern (shown in findings and metrics)."""
    rule: str | None = Field(None, pattern=_RULE)
    """The KNOWLEDGE.md rule the line is evidence for."""
    anchors: list[str] = Field(min_length=1)
    """Literal strings; a line is matched against `regex` only if it contains one of them."""
    regex: str
    """Python regular expression, searched in the line."""
    examples: list[str] = []
    """Real lines that must match (the tests assert it)."""
    _compiled: re.Pattern[str] = PrivateAttr()

    @field_validator("anchors")
    @classmethod
    def _anchors_not_blank(cls, value: list[str]) -> list[str]:
        if any(not a.strip() for a in value):
            raise ValueError("an anchor must not be blank")
        if any("\n" in a for a in value):  # lines are matched one by one: such an anchor could never be found
            raise ValueError("an anchor is part of one line: it must not hold a newline")
        return value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"regex {value!r} does not compile: {exc}") from None
        return value

    def model_post_init(self, _context: object) -> None:
        self._compiled = re.compile(self.regex)

    @property
    def compiled(self) -> re.Pattern[str]:
        return self._compiled


def optional_groups(regex: str) -> tuple[set[str], set[str]]:
    """The named groups a match can leave unset, and of those the ones in alternatives (one branch of an
    alternation sets them, another does not); read with the stdlib's own parser of what re.compile reads."""
    from re import _parser  # type: ignore[attr-defined]

    parsed = _parser.parse(regex)
    names = {number: name for name, number in parsed.state.groupdict.items()}
    optional: set[str] = set()
    branched: set[str] = set()

    def walk(items: Any, maybe: bool, branch: bool) -> None:
        for op, av in items:
            kind = str(op)
            if kind == "SUBPATTERN":
                if av[0] in names:
                    if maybe:
                        optional.add(names[av[0]])
                    if branch:
                        branched.add(names[av[0]])
                walk(av[3], maybe, branch)
            elif kind == "BRANCH":
                for alternative in av[1]:
                    walk(alternative, True, True)
            elif kind in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                walk(av[2], maybe or av[0] == 0, branch)
            elif kind in ("ASSERT", "ASSERT_NOT"):
                walk(av[1], True, branch)
            elif kind == "GROUPREF_EXISTS":
                for part in av[1:]:
                    if part is not None:
                        walk(part, True, True)
            elif kind == "ATOMIC_GROUP":
                walk(av, maybe, branch)

    walk(parsed, False, False)
    return optional, branched


class PrintedBy(_Strict):
    process: Process
    ranks: Ranks
    source: str = Field(min_length=20)
    """The engine file and its logging call, with the condition it sits under (for the fork: the fork's file)."""

    def printed_on(self, node: RankView) -> bool:
        """Does a log of this node carry the line?"""
        if self.process in HEAD_ONLY and node.role == "worker":
            return False
        return self.ranks != "rank0" or node.group_leader


class FactPattern(Pattern):
    printed_by: PrintedBy | None = None
    """Which process and rank print the line (required for every fact an expectation or readiness needs)."""
    types: dict[str, FactType] = {}
    """Casts of named groups; groups not listed are strings."""
    set: dict[str, Scalar] = {}
    """Constant facts set when the line matches."""
    keep: Literal["last", "first", "distinct", "count"] = "last"
    """How repeated matches combine; `count`: each fact is the number of lines that matched in this engine run."""
    reset: bool = False
    """The line starts a new engine run: earlier facts and fatal hits are dropped."""
    same_on_every_rank: str | None = Field(None, pattern=_RULE)
    """Across the logs of a multi-node serve the fact must agree (rule id of the finding)."""

    @model_validator(mode="after")
    def _types_name_groups(self) -> FactPattern:
        groups = set(self.compiled.groupindex)
        unknown = set(self.types) - groups
        if unknown:
            raise ValueError(f"{self.id}: types name no group of the regex: {', '.join(sorted(unknown))}")
        return self

    def produces(self) -> list[str]:
        return [*self.compiled.groupindex, *self.set]

    def one_form(self) -> bool:
        """The line has one form: its alternatives (if any) set no named group, and a match sets at least one
        group. Then its last line in a chunk stands for the others (facts.py's last-only shortcut). A line that
        names a hub id or a folder (load_from_hub | load_model_path), or whose only group is optional, keeps each
        group from the last line that set it, as the reference reading does. An optional tail beside a required
        group (the acceptance rate of positions 2-7, the guard's manager list) belongs to its line: every reading
        takes the tail of the pattern's last line and clears what that line lacks (facts.Extractor), so the last
        line stands for the others exactly, as the frequent SpecDecoding line needs for the scan's speed."""
        optional, branched = optional_groups(self.regex)
        groups = set(self.compiled.groupindex)
        return not branched and (not groups or bool(groups - optional))


class FatalPattern(Pattern):
    rule: str = Field(pattern=_RULE)
    message: str = Field(min_length=1)
    """What the signature means and where to look."""


class Readiness(_Strict):
    roles: list[Role] = list(ROLES)
    when: list[str] = []
    present: list[str] = Field(min_length=1)


class Expectation(_Strict):
    id: str = Field(pattern=_ID)
    rule: str = Field(pattern=_RULE)
    when: list[str] = []
    roles: list[Role] = list(ROLES)
    severity: Literal["error", "warning"] = "error"
    present: list[str] = []
    present_any: list[str] = []
    absent: list[str] = []
    checks: list[str] = []
    missing: Literal["fail", "unknown"] = "fail"
    warn: str | None = None
    report: str | None = None
    fix: str | None = None
    why: str | None = None
    _comparisons: list[FactCheck] = PrivateAttr()

    @model_validator(mode="after")
    def _says_something(self) -> Expectation:
        if not (self.present or self.present_any or self.absent or self.checks):
            raise ValueError(f"{self.id}: needs present, present_any, absent or checks")
        return self

    def model_post_init(self, _context: object) -> None:
        self._comparisons = [FactCheck.parse(c) for c in self.checks]

    @property
    def comparisons(self) -> list[FactCheck]:
        return self._comparisons

    def placeholders(self) -> list[Operand]:
        """The `{…}` of `report`, read like a check's operands (a fact, profile.<path> or lock.<package>)."""
        return [Operand.parse(p) for p in PLACEHOLDER.findall(self.report or "")]

    def operands(self) -> list[Operand]:
        return [*(o for c in self.comparisons for o in (c.left, c.right)), *self.placeholders()]

    def facts(self) -> list[str]:
        return [*self.present, *self.present_any, *self.absent,
                *(str(o.value) for o in self.operands() if o.kind == "fact")]

    def required(self) -> list[str]:
        """The facts this expectation needs to see (an `absent` fact is judged wherever it could appear)."""
        return [*self.present, *self.present_any, *(n for c in self.comparisons for n in c.facts())]

    def needed_each(self) -> list[str]:
        """The facts it needs every one of: `present` and what its checks compare (`present_any` wants one of its
        alternatives, not all)."""
        return [*self.present, *(n for c in self.comparisons for n in c.facts())]

    def seen_in(self, facts: Container[str]) -> bool:
        """Every fact it needs each of, and one alternative of `present_any` (where it has one), are in `facts`."""
        return all(n in facts for n in self.needed_each()) and (
            not self.present_any or any(n in facts for n in self.present_any))


class StartupPhase(_Strict):
    """One phase of an engine start (the `startup:` section): entered when the log shows one of its facts."""

    id: str = Field(pattern=_ID)
    label: str = Field(min_length=1)
    """What the engine is doing, as the container's output and /status say it."""
    enter: list[str] = []
    """Facts whose first sight means the phase has begun (any of them)."""
    enter_together: list[list[str]] = []
    """Groups of facts that begin the phase once every fact of one group was seen (a line that means this phase
    only with another's context: the V2 runner's load line, downloading only when the model is a hub id)."""
    ready: bool = False
    """Entered when the log says this rank is ready (the `readiness:` section) instead of by a fact."""
    done: str | None = None
    """A count the log gives (shards loaded, graphs captured) ..."""
    total: str | None = None
    """... of this many: together they are the phase's fraction."""
    remaining: str | None = None
    """The engine's own estimate of the time left (tqdm's `MM:SS`), where it prints one."""
    detail: str | None = None
    """A fact shown beside the count (which CUDA graph bar)."""
    unit: str | None = None
    """What `done` counts (shards, graphs)."""

    @model_validator(mode="after")
    def _entered_somehow(self) -> StartupPhase:
        if bool(self.enter or self.enter_together) == self.ready:
            raise ValueError(f"startup phase {self.id}: give `enter` facts or `ready: true`, not both or neither")
        if any(not group for group in self.enter_together):
            raise ValueError(f"startup phase {self.id}: an `enter_together` group names no fact")
        if (self.done is None) != (self.total is None):
            raise ValueError(f"startup phase {self.id}: `done` and `total` come together")
        return self

    def facts(self) -> list[str]:
        return [*self.enter, *(f for group in self.enter_together for f in group),
                *(f for f in (self.done, self.total, self.remaining, self.detail) if f)]


class LogTable(_Strict):
    schema_version: Literal[1] = Field(alias="schema")
    facts: list[FactPattern]
    fatal: list[FatalPattern]
    quiet_after: list[str] = []
    readiness: list[Readiness] = Field(min_length=1)
    expectations: list[Expectation]
    startup: list[StartupPhase] = []

    @model_validator(mode="after")
    def _consistent(self) -> LogTable:
        dupes: set[str] = set()
        for ids in ([p.id for p in (*self.facts, *self.fatal)], [e.id for e in self.expectations],
                    [s.id for s in self.startup]):
            dupes |= {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate ids: {', '.join(sorted(dupes))}")
        known = self.fact_names()
        problems = []
        for owner, names, when in [
            ("quiet_after", self.quiet_after, []),
            *((f"readiness[{i}]", r.present, r.when) for i, r in enumerate(self.readiness)),
            *((e.id, e.facts(), e.when) for e in self.expectations),
            *((f"startup {s.id}", s.facts(), []) for s in self.startup),
        ]:
            problems += [f"{owner}: unknown fact {n!r}" for n in names if n not in known]
            problems += [f"{owner}: unknown predicate {w!r}" for w in when if w.lstrip("!") not in PREDICATES]
        for e in self.expectations:
            refs = [str(o.value) for o in e.operands() if o.kind == "profile"]
            problems += [f"{e.id}: unknown profile field {r!r}" for r in refs if not _profile_path_exists(r)]
        problems += self._who_prints_problems(known)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _who_prints_problems(self, known: set[str]) -> list[str]:
        """Every fact an expectation or readiness needs says who prints it, and none asks a headless worker for a
        line only the head's processes print."""
        by_fact = self.printed_by()
        problems: list[str] = []
        for owner, needed, roles in [*((e.id, e.required(), e.roles) for e in self.expectations),
                                     *((f"readiness[{i}]", r.present, r.roles) for i, r in enumerate(self.readiness))]:
            for name in needed:
                if name not in known:
                    continue
                whos = by_fact[name]
                if None in whos:
                    problems.append(f"{owner}: fact {name!r} has a pattern without printed_by (which process and "
                                    f"rank print the line)")
                elif "worker" in roles and all(w.process in HEAD_ONLY for w in whos if w):
                    problems.append(f"{owner}: asks a worker for {name!r}, which only the head's "
                                    f"{'/'.join(sorted({w.process for w in whos if w}))} prints; limit it to roles "
                                    f"[head, single]")
        return list(dict.fromkeys(problems))

    def fact_names(self) -> set[str]:
        return {name for p in self.facts for name in p.produces()}

    @cached_property
    def scan_table(self) -> ScanTable:
        """What a log scan reads of this table (health/scantable.py), derived once per table."""
        def line(p: Pattern) -> LinePattern:
            groups = tuple(p.compiled.groupindex)
            if isinstance(p, FatalPattern):
                return LinePattern(p.id, tuple(p.anchors), p.regex, True, p.rule, p.message, groups)
            assert isinstance(p, FactPattern)
            return LinePattern(p.id, tuple(p.anchors), p.regex, False, p.rule, "", groups,
                               tuple(sorted(optional_groups(p.regex)[0])), tuple(p.types.items()),
                               tuple(p.set.items()), p.keep, p.reset, p.one_form())

        return ScanTable(tuple(map(line, self.facts)), tuple(map(line, self.fatal)), tuple(self.quiet_after))

    def printed_by(self) -> dict[str, list[PrintedBy | None]]:
        """fact name -> who prints each line it comes from (None: a pattern that does not say)."""
        out: dict[str, list[PrintedBy | None]] = {}
        for p in self.facts:
            for name in p.produces():
                out.setdefault(name, []).append(p.printed_by)
        return out

    def printed_on(self, node: RankView) -> set[str]:
        """The facts a log of this node can carry: any of its lines printed there (or by a pattern that does not
        say who prints it)."""
        return {name for name, whos in self.printed_by().items()
                if any(w is None or w.printed_on(node) for w in whos)}


def default_table_path() -> Path:
    return healthchecks_dir() / "logchecks.yaml"


@cache
def load_table(path: Path | None = None) -> LogTable:
    return load_data_table(path or default_table_path(), LogTable, "log-check table")
