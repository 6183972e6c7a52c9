"""`gate report`'s anchor rows: each receipt that ran `gate --bench-protocol NAME` drawn beside the figures that anchor
published (gate/anchors.yaml), as a ratio, with the figure's source and date, and with every way the run's shape
differs from the anchor's said on the row. As text, JSON and an HTML table for the page (page.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from html import escape

from appliance.gate.anchors import anchors_digest, load_anchors
from appliance.gate.receipt_model import Receipt
from appliance.jsonstrict import JsonObject


@dataclass(frozen=True)
class AnchorRow:
    receipt: str
    protocol: str
    test: str
    """The row as run (the receipt's bench row)."""
    anchor_row: str
    """The same row at the anchor's shape."""
    scaling: tuple[str, ...]
    measured: float | None
    """tokens/s the receipt measured (None: the row is missing or failed)."""
    figure: str
    value: float | None
    """The anchor's published tokens/s (None: the figure is gone from anchors.yaml)."""
    ratio: float | None
    metric: str
    hardware: str
    engine: str
    model: str
    date: str
    date_note: str | None
    source: str
    """repo path@commit (the stored version the figure was read from)."""
    url: str


@dataclass(frozen=True)
class ProtocolView:
    receipt: str
    protocol: str
    title: str
    anchor: str
    scaled: bool
    rule: str | None
    choices: tuple[str, ...]
    data_changed: bool
    """anchors.yaml differs from the version the gate read: a figure may have moved since."""
    rows: tuple[AnchorRow, ...]


def compare(receipts: Sequence[tuple[str, Receipt]]) -> list[ProtocolView]:
    """Every receipt with a bench protocol, its rows beside each anchor figure they stand for."""
    anchors, digest = load_anchors(), anchors_digest()
    out = []
    for label, r in receipts:
        section = r.bench_protocol
        if section is None:
            continue
        bench = r.bench()
        measured = bench.metrics.measured() if bench and bench.metrics else {}
        rows = []
        for planned in section.rows:
            got = measured.get(planned.test)
            t_s = got.t_s if got else None
            for figure_id in planned.figures:
                found = anchors.figure(figure_id)
                f = found[2] if found else None
                value = f.value if f else None
                rows.append(AnchorRow(
                    receipt=label, protocol=section.name, test=planned.test, anchor_row=planned.anchor,
                    scaling=tuple(planned.scaling), measured=t_s, figure=figure_id, value=value,
                    ratio=t_s / value if t_s and value else None,
                    metric=f.metric if f else "no longer in anchors.yaml", hardware=f.hardware if f else "",
                    engine=f.engine if f else "", model=f.model if f else "", date=f.date if f else "",
                    date_note=f.date_note if f else None,
                    source=f"{f.source.repo} {f.source.path}@{f.source.commit[:12]}" if f else "",
                    url=f.source.url if f else ""))
        out.append(ProtocolView(label, section.name, section.title, section.anchor, section.scaled, section.rule,
                                tuple(section.choices), section.data_sha256 != digest, tuple(rows)))
    return out


def _ratio(x: float | None) -> str:
    return f"{x:.3g}×" if x is not None else "—"


def _t_s(x: float | None) -> str:
    return f"{x:,.2f} t/s" if x is not None else "not measured"


def _caveat(v: ProtocolView) -> str:
    if v.scaled:
        return (f"scaled: {v.rule}. The ratio sets this serve's scaled rows beside the anchor's own model and "
                "hardware: it says how far apart they are, not that the shapes match.")
    return "run at the anchor's own shapes"


def to_json(views: Sequence[ProtocolView]) -> JsonObject:
    return {"protocols": [{**{k: v for k, v in asdict(p).items() if k != "rows"}, "caveat": _caveat(p),
                           "rows": [asdict(r) for r in p.rows]} for p in views]}


def text(views: Sequence[ProtocolView]) -> str:
    if not views:
        return "no receipt ran a bench protocol (gate --bench-protocol NAME): no anchor rows to draw\n"
    lines: list[str] = []
    for v in views:
        lines += [f"{v.receipt}: protocol {v.protocol} — {v.title}", f"  anchor: {v.anchor}", f"  {_caveat(v)}"]
        lines += [f"  appliance's choice: {c}" for c in v.choices]
        if v.data_changed:
            lines.append("  note: anchors.yaml changed since this receipt was written: figures are today's")
        for r in v.rows:
            lines.append(f"  {r.test:<16} {_t_s(r.measured):>16}  vs {r.anchor_row} {_t_s(r.value)} = "
                         f"{_ratio(r.ratio)}  [{r.figure}]")
            lines.append(f"      {r.metric}; {r.hardware}; {r.engine}; {r.model}")
            when = r.date + (f" ({r.date_note})" if r.date_note else "")
            lines.append(f"      {when}; source {r.source}")
            if r.scaling:
                lines.append(f"      shape run: {'; '.join(r.scaling)}")
        lines.append("")
    return "\n".join(lines)


def html(views: Sequence[ProtocolView]) -> str | None:
    """A table per receipt (no links: the page fetches and points to nothing; each source is its text)."""
    if not views:
        return None
    parts = []
    head = ("<tr><th>row run</th><th>anchor's row</th><th>measured</th><th>anchor figure</th><th>ratio</th>"
            "<th>what the anchor measured</th><th>on</th><th>date</th><th>source</th><th>shape run differs</th></tr>")
    for v in views:
        note = " anchors.yaml changed since this receipt was written." if v.data_changed else ""
        parts.append(f"<h3>{escape(v.receipt)}: protocol {escape(v.protocol)}</h3><p class=\"sub\">{escape(v.title)}."
                     f" Anchor: {escape(v.anchor)}. {escape(_caveat(v))}{escape(note)}</p>")
        if v.choices:
            parts.append("<p class=\"sub\">" + "<br>".join(escape(c) for c in v.choices) + "</p>")
        body = "".join(
            f"<tr><td>{escape(r.test)}</td><td>{escape(r.anchor_row)}</td><td>{escape(_t_s(r.measured))}</td>"
            f"<td>{escape(_t_s(r.value))}</td><td><b>{escape(_ratio(r.ratio))}</b></td><td>{escape(r.metric)}</td>"
            f"<td>{escape(r.hardware)}<br><small>{escape(r.engine)}; {escape(r.model)}</small></td>"
            f"<td title=\"{escape(r.date_note or '')}\">{escape(r.date)}</td>"
            f"<td><small>{escape(r.source)}<br>{escape(r.url)}</small></td>"
            f"<td><small>{escape('; '.join(r.scaling) or 'as the anchor')}</small></td></tr>" for r in v.rows)
        parts.append(f"<table>{head}{body}</table>")
    return "".join(parts)
