"""`gate --bench-protocol NAME`: an anchor's published shapes (anchors.yaml) planned for the serve in front of the gate.

On a GPU profile the shapes run as the anchor ran them, and a shape that does not fit the profile's max_model_len is
bad input (exit 2), never silently dropped. On the CPU serve (the tiny model, a small max_model_len) the protocol's
own `smoke` rule scales them, and every change is said per row: the receipt's `bench_protocol` section carries the
anchor's shape, the shape run and why they differ, so no ratio is ever drawn against a shape that differs unsaid.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from appliance.errors import ApplianceError
from appliance.gate.anchors import AnchorRow, Protocol, Step, anchor_rows, anchors_digest, load_anchors
from appliance.gate.benchy_rows import row_name
from appliance.gate.sizing import BenchParams, Size, size_for
from appliance.jsonstrict import JsonObject

if TYPE_CHECKING:
    from appliance.profile.model import Profile

MARGIN = 64
"""Tokens kept free beside a request's prompt, depth and output: the chat template and llama-benchy's context-load
probe (the gate's own sizing keeps the same)."""


@dataclass(frozen=True)
class PlannedRow:
    test: str
    """The row's name in the receipt's bench check (llama-benchy's naming, shape as run)."""
    step: str
    kind: str
    anchor: str
    """The same row at the anchor's shape (`pp2048 @ d8192`)."""
    scaling: tuple[str, ...]
    """Each way the row run differs from the anchor's, said (empty: run as the anchor ran it)."""
    figures: tuple[str, ...]


@dataclass(frozen=True)
class PlannedStep:
    id: str
    params: BenchParams


@dataclass(frozen=True)
class ProtocolRun:
    name: str
    title: str
    anchor: str
    size: Size
    max_model_len: int
    scaled: bool
    rule: str | None
    """The smoke rule in words (None: the anchor's own shapes)."""
    steps: tuple[PlannedStep, ...]
    rows: tuple[PlannedRow, ...]
    choices: tuple[str, ...] = field(default=())
    """What each step's anchor does not state and the appliance chose."""

    def section(self) -> JsonObject:
        """The receipt's `bench_protocol` (receipt_model.BenchProtocolRef)."""
        return {"name": self.name, "title": self.title, "anchor": self.anchor, "size": self.size,
                "max_model_len": self.max_model_len, "scaled": self.scaled, "rule": self.rule,
                "choices": list(self.choices), "data_sha256": anchors_digest(),
                "rows": [{"test": r.test, "step": r.step, "kind": r.kind, "anchor": r.anchor,
                          "scaling": list(r.scaling), "figures": list(r.figures)} for r in self.rows]}


def names() -> list[str]:
    return sorted(load_anchors().protocols)


def protocol_named(name: str) -> Protocol:
    protocols = load_anchors().protocols
    if name not in protocols:
        raise ApplianceError(f"--bench-protocol {name}: no such protocol", field="--bench-protocol", value=name,
                             fix=f"choose one of {', '.join(names())} (appliance/gate/anchors.yaml)",
                             reason="a protocol runs the shapes an anchor published, beside its figures")
    return protocols[name]


@dataclass(frozen=True)
class _Shape:
    pp: int
    tg: int
    depth: int
    notes: tuple[str, ...] = ()


def _scaled(value: int, divisor: int, floor: int, what: str) -> tuple[int, list[str]]:
    out = max(min(value, floor), value // divisor)
    if out == value:
        return out, []
    why = f"÷{divisor}" + (f", floor {floor}" if out == min(value, floor) and value // divisor < floor else "")
    return out, [f"{what} {value} → {out} ({why})"]


def _smoke_shape(row: AnchorRow, p: Protocol, max_len: int) -> _Shape:
    s = p.smoke
    pp, notes = _scaled(row.pp, s.prompt_divisor, s.min_tokens, "prompt")
    tg, more = _scaled(row.tg, s.output_divisor, s.min_tokens, "output")
    notes += more
    depth = 0
    if row.depth:
        depth, more = _scaled(row.depth, s.prompt_divisor, s.min_tokens, "depth")
        notes += more
    room = max_len - tg - MARGIN  # a cap to nothing is no cap: the row stays over, and plan() refuses it
    if depth and depth + pp > room and room - pp >= 1:
        notes.append(f"depth {depth} → {room - pp}: capped by this profile's max_model_len {max_len}")
        depth = room - pp
    elif not depth and pp > room >= 1:
        notes.append(f"prompt {pp} → {room}: capped by this profile's max_model_len {max_len}")
        pp = room
    return _Shape(pp, tg, depth, tuple(notes))


def _anchor_name(row: AnchorRow, multi: bool, several: bool) -> str:
    return row_name(row.kind, row.tg if row.kind == "tg" else row.pp, row.depth, row.concurrency, multi,
                    row.pp if several else None)


def _ordered(values: list[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(values))


def _step_params(step: Step, shapes: dict[AnchorRow, _Shape], runs: int, base: BenchParams) -> BenchParams:
    """llama-benchy's lists for one step. The anchors' figures need no coherence probe: it is skipped."""
    rows = [r for r in shapes if r.step == step.id]
    extra = tuple(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in step.extra_body.items())
    return replace(base, pp=_ordered([shapes[r].pp for r in rows]), tg=_ordered([shapes[r].tg for r in rows]),
                   depth=_ordered([shapes[r].depth for r in rows]), concurrency=tuple(step.concurrency), runs=runs,
                   prefix_caching=step.prefix_caching, no_cache=step.no_cache, exact_tg=step.exact_tg,
                   extra_body=extra, skip_coherence=True)


def plan(name: str, profile: Profile, base: BenchParams, runs: int | None = None) -> ProtocolRun:
    """The protocol NAME for this profile's serve: its rows as run, each with the anchor's shape and every change
    said. `base` gives what the protocol does not set (corpus, time bound); `runs` is --bench-runs."""
    p = protocol_named(name)
    size = size_for(profile)
    max_len = profile.limits.max_model_len
    rows = anchor_rows(p)
    if size == "smoke":
        shapes = {r: _smoke_shape(r, p, max_len) for r in rows}
    else:
        shapes = {r: _Shape(r.pp, r.tg, r.depth) for r in rows}
    too_long = [r for r in rows if shapes[r].pp + shapes[r].depth + shapes[r].tg + MARGIN > max_len]
    if too_long:
        need = max(r.pp + r.depth + r.tg + MARGIN for r in too_long)
        several = {s.id: len(s.pp) > 1 for s in p.steps}
        worst = list(dict.fromkeys(_anchor_name(r, False, several[r.step]) for r in too_long))
        raise ApplianceError(
            f"--bench-protocol {name}: {', '.join(worst)} need{'s' if len(worst) == 1 else ''} {need:,} tokens "
            f"(prompt + depth + output + {MARGIN}), over profile {profile.name}'s max_model_len {max_len:,}",
            field="--bench-protocol", value=name,
            fix=f"serve and gate with --set limits.max_model_len={need} (the anchor's own shape), or choose "
                f"another protocol ({', '.join(n for n in names() if n != name)})",
            reason="the serve would refuse those requests: a row it refused is no figure beside the anchor's, and "
                   "the anchor's shapes are only scaled on the CPU serve, where the receipt says so")
    steps, runs_each, choices = [], runs or (p.smoke.runs if size == "smoke" else p.runs), []
    for step in p.steps:
        steps.append(PlannedStep(step.id, _step_params(step, shapes, runs_each, base)))
        if step.appliance_choice:
            choices.append(f"{step.id}: {step.appliance_choice}")
    planned = []
    for step in p.steps:
        multi, several = max(step.concurrency) > 1, len(step.pp) > 1
        for r in (r for r in rows if r.step == step.id):
            shape = shapes[r]
            run_row = replace(r, pp=shape.pp, tg=shape.tg, depth=shape.depth)
            relevant = _relevant(r, shape)
            planned.append(PlannedRow(_anchor_name(run_row, multi, several), step.id, r.kind,
                                      _anchor_name(r, multi, several),
                                      relevant, tuple(f.id for f in p.figures if r.matches(f))))
    for step in steps:  # llama-benchy runs the product of its lists: scaling must keep one row per anchor row
        if _rows_of(step.params) != sorted(r.test for r in planned if r.step == step.id):
            raise ValueError(f"protocol {name} step {step.id}: the scaled shapes are no longer a product of lists")
    tests = [r.test for r in planned]
    if len(set(tests)) != len(tests):  # two anchor rows scaled onto one: the data's rule is wrong
        raise ValueError(f"protocol {name}: scaled rows collide: {tests}")
    rule = None
    if size == "smoke":
        s = p.smoke
        rule = (f"scaled for the CPU serve ({profile.name}, max_model_len {max_len:,}): prompts and depths ÷"
                f"{s.prompt_divisor}, outputs ÷{s.output_divisor}, none below {s.min_tokens} tokens, {runs_each} "
                f"run(s); rows over max_model_len capped. {s.why}")
    return ProtocolRun(name, p.title, p.anchor, size, max_len, size == "smoke", rule, tuple(steps), tuple(planned),
                       tuple(choices))


def _rows_of(b: BenchParams) -> list[str]:
    """The rows llama-benchy prints for `b`, by name."""
    multi, several = max(b.concurrency) > 1, len(b.pp) > 1
    out = []
    for depth, pp, tg, c in itertools.product(b.depth, b.pp, b.tg, b.concurrency):
        kinds = ("ctx_pp", "ctx_tg", "pp", "tg") if b.prefix_caching and depth else ("pp", "tg")
        out += [row_name(k, tg if k == "tg" else pp, depth, c, multi, pp if several else None) for k in kinds]
    return sorted(out)


def for_request(name: str, battery: str | None, checks: str | None, selected: list[str], profile: Profile,
                base: BenchParams, runs: int | None) -> tuple[list[str], ProtocolRun]:
    """`gate --bench-protocol NAME`'s checks (the bench alone unless --checks names more) and its plan; bad input
    (another way of choosing the bench, no bench selected, an unknown protocol, shapes that do not fit) is exit 2,
    before the serve is asked anything."""
    if battery:
        raise ApplianceError(f"--bench-protocol {name} and --battery {battery} both given", field="--bench-protocol",
                             value=name, fix="run the battery and the protocol as two gates",
                             reason="a battery runs its own bench shape (C10); one bench check per receipt")
    chosen = selected if checks else ["bench"]
    if "bench" not in chosen:
        raise ApplianceError(f"--bench-protocol {name} with --checks {checks}: the protocol runs in the bench check",
                             field="--checks", value=checks, fix="add bench to --checks, or leave --checks out",
                             reason="the protocol's shapes are what the bench check measures")
    return chosen, plan(name, profile, base, runs)


def _relevant(row: AnchorRow, shape: _Shape) -> tuple[str, ...]:
    """The notes that change this row: a tg row's output, a pp row's prompt, every row's depth."""
    keep = []
    for note in shape.notes:
        what = note.split(" ", 1)[0]
        if what == "depth" or (what == "prompt" and row.kind in ("pp", "tg")) or (what == "output" and
                                                                                  row.kind in ("tg", "ctx_tg")):
            keep.append(note)
    return tuple(keep)


def warnings(run: ProtocolRun, profile: Profile) -> list[str]:
    """What the receipt must say beside the rows: the scaling, and a prefix-cache setting unlike the anchor's."""
    out = []
    if run.scaled:
        out.append(f"bench protocol {run.name}: {run.rule}; the report's ratios compare unlike shapes, model and "
                   "hardware")
    wants = [s.id for s in run.steps if s.params.prefix_caching]
    if wants and not profile.cache.prefix_caching:
        out.append(f"bench protocol {run.name}: the anchor measured {', '.join(wants)} with prefix caching on; "
                   f"profile {profile.name} serves with it off, so the rows after the context load re-read it")
    return out


def summary_lines(section: Any) -> list[str]:
    """The receipt summary's lines for a `bench_protocol` section (typed BenchProtocolRef)."""
    lines = [f"## Bench protocol {section.name}: {section.title}", "", f"Anchor: {section.anchor}.", ""]
    if section.scaled:
        lines += [f"Shapes {section.rule}", ""]
    else:
        lines += ["Shapes as the anchor ran them.", ""]
    lines += [f"- {c}" for c in section.choices]
    for r in section.rows:
        change = "; ".join(r.scaling) or "as the anchor"
        lines.append(f"- `{r.test}` ← anchor `{r.anchor}` ({change})"
                     + (f"; figures {', '.join(r.figures)}" if r.figures else ""))
    return [*lines, ""]
