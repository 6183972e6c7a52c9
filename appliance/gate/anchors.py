"""The anchors' published benchmark shapes and figures (anchors.yaml beside this module), typed and checked: every
protocol's steps, its explicit scaling for the CPU serve, and each figure with its source and date, pinned to exactly
one row of its protocol. One file, one reader: `gate --bench-protocol` plans from it (protocol.py) and `gate report`
draws its figures (report/anchor_rows.py)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ANCHORS_FILE = Path(__file__).with_name("anchors.yaml")
Kind = Literal["pp", "tg", "ctx_pp", "ctx_tg"]
Tokens = Annotated[int, Field(ge=1, le=1 << 21)]
Depth = Annotated[int, Field(ge=0, le=1 << 21)]
Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
When = Annotated[str, Field(pattern=r"^20[0-9]{2}-[01][0-9](-[0-3][0-9])?$")]
"""YYYY-MM-DD, or YYYY-MM where the source names no day (date_note says why)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    path: str
    commit: Sha
    """The stored version of the file the figure was read from."""
    url: Annotated[str, Field(pattern=r"^https://github\.com/")]

    @model_validator(mode="after")
    def _url_names_the_file(self) -> Source:
        if self.url != f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}":
            raise ValueError(f"url {self.url} is not {self.repo}/{self.path} at {self.commit}")
        return self


class FigureDefaults(_Strict):
    hardware: str | None = None
    engine: str | None = None
    model: str | None = None
    config: str | None = None
    date: When | None = None
    date_note: str | None = None
    source: Source | None = None


class Figure(_Strict):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    step: str
    kind: Kind
    pp: Tokens | None = None
    depth: Depth | None = None
    concurrency: Tokens | None = None
    value: Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)]
    """Tokens per second, as the anchor published it."""
    metric: str
    hardware: str
    engine: str
    model: str
    config: str
    date: When
    date_note: str | None = None
    source: Source

    @model_validator(mode="after")
    def _a_month_says_why(self) -> Figure:
        if len(self.date) == 7 and not self.date_note:
            raise ValueError(f"figure {self.id}: date {self.date} names no day: date_note must say why")
        return self


Scalar = str | int | float | bool


class Step(_Strict):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    what: str
    pp: list[Tokens] = Field(min_length=1)
    tg: list[Tokens] = Field(min_length=1)
    depth: list[Depth] = Field(min_length=1)
    concurrency: list[Annotated[int, Field(ge=1, le=64)]] = Field(min_length=1)
    prefix_caching: bool
    no_cache: bool
    exact_tg: bool
    extra_body: dict[str, Scalar | dict[str, Scalar]] = {}
    appliance_choice: str | None = None

    @model_validator(mode="after")
    def _extra_body_is_one_entry_each(self) -> Step:
        # llama-benchy splits --extra-body on commas: a value holding one would be cut in two
        bad = [k for k in self.extra_body if "," in json.dumps(self.extra_body[k], separators=(",", ":"))]
        if bad:
            raise ValueError(f"step {self.id}: extra_body {bad} holds a comma, which llama-benchy splits on")
        return self


class Smoke(_Strict):
    prompt_divisor: Annotated[int, Field(ge=1, le=4096)]
    output_divisor: Annotated[int, Field(ge=1, le=4096)]
    min_tokens: Tokens
    runs: Annotated[int, Field(ge=1, le=20)]
    why: str


class Protocol(_Strict):
    title: str
    anchor: str
    runs: Annotated[int, Field(ge=1, le=20)]
    steps: list[Step] = Field(min_length=1)
    smoke: Smoke
    figure_defaults: FigureDefaults = FigureDefaults()
    figures: list[Figure] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _defaults_into_figures(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("figures"), list):
            return data
        defaults = {k: v for k, v in (data.get("figure_defaults") or {}).items() if v is not None}
        figures = [{**defaults, **f} if isinstance(f, dict) else f for f in data["figures"]]
        return {**data, "figures": figures}

    @model_validator(mode="after")
    def _each_figure_names_one_row(self) -> Protocol:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a step id appears twice: {ids}")
        for f in self.figures:
            matches = [r for r in anchor_rows(self) if r.matches(f)]
            if len(matches) != 1:
                raise ValueError(f"figure {f.id} names {len(matches)} rows of its protocol (step {f.step}, kind "
                                 f"{f.kind}, pp {f.pp}, depth {f.depth}, concurrency {f.concurrency}): it must "
                                 f"name exactly one")
        return self


class Anchors(_Strict):
    protocols: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$")], Protocol] = Field(min_length=1)

    @model_validator(mode="after")
    def _figure_ids_unique(self) -> Anchors:
        ids = [f.id for p in self.protocols.values() for f in p.figures]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"figure ids appear twice: {twice}")
        return self

    def figure(self, figure_id: str) -> tuple[str, Protocol, Figure] | None:
        """(protocol name, protocol, figure) of a figure id, or None when the data no longer holds it."""
        for name, p in self.protocols.items():
            for f in p.figures:
                if f.id == figure_id:
                    return name, p, f
        return None


@dataclass(frozen=True)
class AnchorRow:
    """One row llama-benchy prints for a step, in the anchor's own shape."""
    step: str
    kind: Kind
    pp: int
    tg: int
    depth: int
    concurrency: int

    def matches(self, f: Figure) -> bool:
        return (f.step == self.step and f.kind == self.kind and f.pp in (None, self.pp)
                and f.depth in (None, self.depth) and f.concurrency in (None, self.concurrency))


def anchor_rows(protocol: Protocol) -> list[AnchorRow]:
    """Every row of every step, in llama-benchy's order (depth, prompt, output, concurrency): with prefix caching
    and a depth, the context load (ctx_pp, ctx_tg) comes before the prompt's rows."""
    out = []
    for s in protocol.steps:
        for depth, pp, tg, c in itertools.product(s.depth, s.pp, s.tg, s.concurrency):
            kinds: tuple[Kind, ...] = ("ctx_pp", "ctx_tg", "pp", "tg") if s.prefix_caching and depth else ("pp", "tg")
            out += [AnchorRow(s.id, k, pp, tg, depth, c) for k in kinds]
    return out


@functools.cache
def load_anchors(path: Path = ANCHORS_FILE) -> Anchors:
    from appliance.yamlstrict import load_data_table

    return load_data_table(path, Anchors, "anchor benchmark data")


def anchors_digest(path: Path = ANCHORS_FILE) -> str:
    """sha256 of the data as shipped: a receipt records the version its rows were mapped against."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
