"""The receipt report as one self-contained HTML page: inline CSS and SVG, no script, no link, no font or image to
fetch, so it opens offline, mails as one file and prints as it shows."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from appliance.gate.receipt_model import verdict_word
from appliance.report import charts
from appliance.report.evidence import ReceiptView

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a202c;margin:24px auto;
max-width:1400px;padding:0 16px;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e2e8f0;padding-bottom:4px}
.sub{color:#4a5568;margin:0 0 16px}.grid{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #e2e8f0;border-radius:6px;padding:8px;background:#fff}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #e2e8f0;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f7fafc}.pass{background:#c6f6d5}.fail{background:#fed7d7}
.inconclusive,.incomplete,.nothing_measured{background:#fefcbf}.skipped,.not_applicable,.unavailable{background:#edf2f7;color:#4a5568}
.error,.interrupted{background:#feebc8}.verdict{font-weight:600;text-transform:uppercase}
svg .title{font-weight:600;font-size:13px}svg .tick{font-size:11px;fill:#4a5568}svg .axis{font-size:11px;fill:#4a5568}
svg .grid{stroke:#edf2f7}svg .axisline{stroke:#a0aec0}svg .note{font-size:11px}svg .legend{font-size:11px;fill:#2d3748}
svg .value{font-size:11px;fill:#2d3748}.empty{color:#718096;font-style:italic}
"""


def _cell(status: str, text: str | None = None, title: str = "") -> str:
    tip = f' title="{escape(title)}"' if title else ""
    return f'<td class="{escape(status)}"{tip}>{escape(text if text is not None else status)}</td>'


def receipts_table(views: Sequence[ReceiptView]) -> str:
    head = "<tr><th>receipt</th><th>verdict</th><th>profile</th><th>engine</th><th>lock</th><th>stack</th>" \
           "<th>started</th><th>host</th><th>engagement (read back from the serve log)</th></tr>"
    rows = [f"<tr><td>{escape(v.label)}<br><small>{escape(v.source)}</small></td>"
            f"{_cell(v.verdict, verdict_word(v.verdict))}<td>{escape(v.profile)}</td><td>{escape(v.engine)}</td>"
            f"<td>{escape(v.lock)}</td><td>{escape(v.stack)}</td><td>{escape(v.started_at)}</td>"
            f"<td>{escape(v.host)}</td><td>{escape(v.engagement)}</td></tr>" for v in views]
    return f"<table>{head}{''.join(rows)}</table>"


def verdict_matrix(views: Sequence[ReceiptView]) -> str:
    """Each check's status per receipt; the summary line on hover."""
    names: list[str] = []
    for v in views:
        names += [c.name for c in v.checks if c.name not in names]
    head = "<tr><th>check</th>" + "".join(f"<th>{escape(v.label)}</th>" for v in views) + "</tr>"
    rows = []
    for name in names:
        cells = []
        for v in views:
            check = next((c for c in v.checks if c.name == name), None)
            cells.append(_cell(check.status, title=check.summary) if check else '<td class="empty">-</td>')
        rows.append(f"<tr><td>{escape(name)}</td>{''.join(cells)}</tr>")
    verdicts = "".join(f'<td class="{escape(v.verdict)} verdict">{escape(v.verdict)}</td>' for v in views)
    return f"<table>{head}{''.join(rows)}<tr><th>verdict</th>{verdicts}</tr></table>"


def _section(title: str, body: str | None, empty: str) -> str:
    return f"<h2>{escape(title)}</h2>" + (body if body else f'<p class="empty">{escape(empty)}</p>')


def render(views: Sequence[ReceiptView], title: str = "Gate receipts", generated: str = "",
           anchors: str | None = None) -> str:
    """The page; `anchors` (report/anchor_rows.html) adds the bench-protocol rows beside the anchors' figures."""
    cells = charts.bench_cells(views)
    bench = "".join(f'<div class="card">{charts.bench_chart(t, views)}</div>' for t in cells)
    parts = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{len(views)} receipt(s){" · " + escape(generated) if generated else ""}. Bench bands are the '
        "seed's (~15 % tg, ~2 % ctx_pp; this project applies the ctx_pp one to pp too): a bench difference inside "
        "the shaded band is not resolvable from single runs (blocked, paired "
        "runs resolve it: appliance gate paired); recall between the poisoned band and the pass line is "
        "inconclusive (run more fresh serves: appliance gate serves).</p>",
        "<h2>Receipts</h2>", receipts_table(views),
        "<h2>Verdicts</h2>", verdict_matrix(views),
        _section("Bench rows across builds and channels", f'<div class="grid">{bench}</div>' if bench else None,
                 "no receipt carries bench rows"),
        *([_section("Bench protocols beside the anchors' published figures", anchors, "")] if anchors else []),
        _section("Recall per serve, and GSM8K", _grid(charts.recall_chart(views), charts.gsm8k_chart(views)),
                 "no receipt carries a recall or a GSM8K check"),
        _section("Speculative decoding: acceptance per draft position", _card(charts.acceptance_chart(views)),
                 "no receipt's serve drafted (no per-position acceptance in its log)"),
    ]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>" + "".join(parts) + "</body></html>\n")


def _grid(*svgs: str | None) -> str | None:
    cards = [c for c in map(_card, svgs) if c]
    return f'<div class="grid">{"".join(cards)}</div>' if cards else None


def _card(svg: str | None) -> str | None:
    return f'<div class="card">{svg}</div>' if svg else None
