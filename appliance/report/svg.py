"""A small SVG plotter for the receipt report: categories along x, one numeric axis up y, points with whiskers,
bars, shaded bands and reference lines. Output is a self-contained `<svg>` string (no script, no fetch, no font
file), so the page opens offline and prints as it shows. Text is escaped; numbers are rounded to a tenth of a pixel.

Every text is laid out by its width (metrics.py), so none runs into another or past the edge: a category name wraps at
its separators onto up to three lines, or every name of the chart becomes a letter explained in the legend; a long
title or legend entry wraps between words; the labels of reference lines are legend entries, not text on the plot; a
value label sits above the highest mark of its slot, or is left to the mark's tooltip where its slot is too narrow.
The svg grows downwards to hold what it wrapped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from appliance.report.metrics import text_width

PALETTE = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#2c7a7b", "#975a16", "#4a5568")
PASS, FAIL, WARN, NEUTRAL = "#2f855a", "#c53030", "#b7791f", "#718096"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values spanning [lo, hi] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start, stop = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    return [round(start + i * step, 10) for i in range(round((stop - start) / step) + 1)]


def fmt_percent(value: float) -> str:
    """A fraction as a percentage, with a decimal only where the tick needs one (97.5 %)."""
    pct = value * 100
    return f"{pct:.0f}%" if abs(pct - round(pct)) < 1e-6 else f"{pct:.1f}%"


def fmt_number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}" if value == round(value) else f"{value:.1f}"
    return f"{value:.3g}"


@dataclass
class Chart:
    """One plot. `categories` are the x positions (builds, serves, draft positions); y spans [y_min, y_max]."""

    title: str
    categories: Sequence[str]
    y_min: float
    y_max: float
    y_label: str = ""
    width: int = 680
    height: int = 280
    y_format: Callable[[float], str] = fmt_number
    left: int = 64
    right: int = 16
    top: int = 48
    """Above the plot: the title, and room for a value label over a mark at the top of the axis."""
    bottom: int = 62
    _body: list[str] = field(default_factory=list)
    _legend: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ticks = nice_ticks(self.y_min, self.y_max)
        self.y_min, self.y_max = min(ticks[0], self.y_min), max(ticks[-1], self.y_max)
        self._ticks = ticks
        widest = max(text_width(self.y_format(t), FONT_PX) for t in ticks)  # the tick labels right-aligned at left-6
        self.left = max(self.left, math.ceil(widest + 10 + (AXIS_LABEL_ROOM if self.y_label else 0)))
        self._title = wrap_words(self.title, self.width - self.left - self.right, TITLE_PX, bold=True)
        self.top += (len(self._title) - 1) * TITLE_LINE_PX

    # --- coordinates ---------------------------------------------------------------------------------------------

    @property
    def plot_width(self) -> float:
        return self.width - self.left - self.right

    def x(self, index: float) -> float:
        """Centre of category `index` (fractions place grouped marks beside each other)."""
        slot = self.plot_width / max(1, len(self.categories))
        return self.left + slot * (index + 0.5)

    def slot(self) -> float:
        return self.plot_width / max(1, len(self.categories))

    def y(self, value: float) -> float:
        span = self.y_max - self.y_min or 1.0
        top, bottom = self.top, self.height - self.bottom
        clamped = min(max(value, self.y_min), self.y_max)
        return bottom - (clamped - self.y_min) / span * (bottom - top)

    # --- marks ---------------------------------------------------------------------------------------------------

    def band(self, lo: float, hi: float, color: str, label: str = "", opacity: float = 0.14) -> None:
        y0, y1 = self.y(hi), self.y(lo)
        self._body.append(f'<rect x="{self.left}" y="{y0:.1f}" width="{self.plot_width:.1f}" height="{y1 - y0:.1f}" '
                          f'fill="{color}" fill-opacity="{opacity}"><title>{escape(label)}</title></rect>')
        if label:
            self._legend.append(("band", color, label))

    def line(self, value: float, color: str, label: str = "", dash: str = "6 4") -> None:
        """A reference line across the plot; its label is a legend entry (text on the plot would meet the marks)."""
        y = self.y(value)
        self._body.append(f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{y:.1f}" y2="{y:.1f}" '
                          f'stroke="{color}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
        if label:
            self._legend.append(("line", color, label))

    def point(self, index: float, value: float, color: str, lo: float | None = None, hi: float | None = None,
              label: str = "", radius: float = 5) -> None:
        cx, cy = self.x(index), self.y(value)
        if lo is not None and hi is not None:
            y0, y1 = self.y(hi), self.y(lo)
            self._body.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y0:.1f}" y2="{y1:.1f}" stroke="{color}" '
                              f'stroke-width="2"/>')
            for yy in (y0, y1):
                self._body.append(f'<line x1="{cx - 6:.1f}" x2="{cx + 6:.1f}" y1="{yy:.1f}" y2="{yy:.1f}" '
                                  f'stroke="{color}" stroke-width="2"/>')
        tip = f"<title>{escape(label)}</title>" if label else ""
        self._body.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{color}">{tip}</circle>')

    def dot(self, index: float, value: float, color: str, dx: float = 12) -> None:
        """A single run's value, `dx` pixels beside its summary mark."""
        self._body.append(f'<circle cx="{self.x(index) + dx:.1f}" cy="{self.y(value):.1f}" r="2.5" fill="none" '
                          f'stroke="{color}" stroke-width="1.2"/>')

    def bar(self, index: float, value: float, color: str, share: float = 0.6, label: str = "",
            offset: float = 0.0) -> None:
        """A bar of `share` of its slot's width, centred at the slot plus `offset` slots."""
        width = self.slot() * share
        cx = self.x(index) + offset * self.slot()
        y0, base = self.y(value), self.y(max(self.y_min, 0.0))
        tip = f"<title>{escape(label)}</title>" if label else ""
        self._body.append(f'<rect x="{cx - width / 2:.1f}" y="{min(y0, base):.1f}" width="{width:.1f}" '
                          f'height="{abs(base - y0):.1f}" fill="{color}">{tip}</rect>')

    def value_label(self, index: float, value: float, text: str, offset: float = 0.0, share: float = 1.0) -> None:
        """`text` centred over the slot, its baseline VALUE_CLEAR px above `value` (the highest mark there: a run's
        ring, a whisker's cap); none where it is wider than `share` of the slot (the mark's tooltip says it)."""
        if text_width(text, FONT_PX) > self.slot() * share - 4:
            return
        cx = self.x(index) + offset * self.slot()
        self._body.append(f'<text x="{cx:.1f}" y="{self.y(value) - VALUE_CLEAR:.1f}" text-anchor="middle" '
                          f'class="value">{escape(text)}</text>')

    def legend(self, color: str, label: str) -> None:
        self._legend.append(("mark", color, label))

    # --- the whole ---------------------------------------------------------------------------------------------------

    def render(self) -> str:
        bottom = self.height - self.bottom
        parts = [f'<text x="{self.left}" y="20" class="title">'
                 + _lines(self._title, self.left, TITLE_LINE_PX) + "</text>"]
        for tick in self._ticks:
            y = self.y(tick)
            parts.append(f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'class="grid"/>')
            parts.append(f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
                         f'{escape(self.y_format(tick))}</text>')
        if self.y_label:
            parts.append(f'<text transform="translate(14 {(self.top + bottom) / 2:.1f}) rotate(-90)" '
                         f'text-anchor="middle" class="axis">{escape(self.y_label)}</text>')
        parts += self._body
        parts.append(f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{bottom}" y2="{bottom}" '
                     f'class="axisline"/>')
        names = category_lines(self.categories, self.slot() - LABEL_GAP)
        keyed = names is None
        if names is None:  # a name does not fit its slot even wrapped: letters on the axis, the names in the legend
            names = [[k] for k in keys(len(self.categories))]
        for i, (name, lines) in enumerate(zip(self.categories, names, strict=True)):
            parts.append(f'<text x="{self.x(i):.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">'
                         f'{_lines(lines, self.x(i), LINE_PX)}<title>{escape(name)}</title></text>')
        y = bottom + 16 + LINE_PX * (max(map(len, names), default=1) - 1) + 22
        legend = list(self._legend)
        if keyed:
            legend += [("key", k, name) for k, name in zip(keys(len(self.categories)), self.categories, strict=True)]
        x, room = self.left, self.width - self.right - self.left
        for kind, color, label in legend:
            lines = wrap_words(f"{color} = {label}" if kind == "key" else label, room - LEGEND_MARK, FONT_PX)
            step = LEGEND_MARK + max(text_width(t, FONT_PX) for t in lines) + LEGEND_GAP
            if x > self.left and (x + step - LEGEND_GAP > self.width - self.right or len(lines) > 1):
                x, y = self.left, y + LEGEND_LINE_PX  # onto the next legend line
            if kind == "band":
                parts.append(f'<rect x="{x}" y="{y - 9}" width="14" height="10" fill="{color}" fill-opacity="0.35"/>')
            elif kind == "line":
                parts.append(f'<line x1="{x}" x2="{x + 14}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" '
                             f'stroke-width="1.5" stroke-dasharray="4 2"/>')
            elif kind == "mark":
                parts.append(f'<circle cx="{x + 7}" cy="{y - 4}" r="5" fill="{color}"/>')
            parts.append(f'<text x="{x + LEGEND_MARK}" y="{y}" class="legend">'
                         f'{_lines(lines, x + LEGEND_MARK, LINE_PX)}</text>')
            if len(lines) > 1:
                x, y = self.left, y + LEGEND_LINE_PX + LINE_PX * (len(lines) - 1)
            else:
                x += math.ceil(step)
        end = (y if legend else bottom + 16 + LINE_PX * (max(map(len, names), default=1) - 1)) + 10
        if legend and x == self.left:
            end -= LEGEND_LINE_PX  # the last entry ended its line: no empty line below it
        height = max(self.height, end)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{height}" '
                f'viewBox="0 0 {self.width} {height}" role="img" aria-label="{escape(self.title)}">'
                + "".join(parts) + "</svg>")


FONT_PX = 11
"""The page's font size of every chart text but the title (page.py's CSS)."""
TITLE_PX = 13
TITLE_LINE_PX = 16
LINE_PX = 13
"""From one line of an 11 px text to the next."""
LEGEND_LINE_PX = 17
LEGEND_MARK = 18
"""A legend entry's mark and the space before its text."""
LEGEND_GAP = 14
LABEL_GAP = 8
"""Between two category names on the axis."""
AXIS_LABEL_ROOM = 22
"""Left of the tick labels: the rotated axis label."""
VALUE_CLEAR = 10
"""From the highest mark of a slot to its value label's baseline (a run's ring has a radius of 2.5 px)."""
MAX_NAME_LINES = 3
SEPARATORS = "-_./: "
"""Where a category name may wrap (after the character)."""


def _lines(lines: Sequence[str], x: float, step: int) -> str:
    """One line as text, several as tspans `step` px apart."""
    if len(lines) == 1:
        return escape(lines[0])
    return "".join(f'<tspan x="{x:.1f}" dy="{0 if i == 0 else step}">{escape(t)}</tspan>'
                   for i, t in enumerate(lines))


def wrap_words(text: str, room: float, size: float, *, bold: bool = False) -> list[str]:
    """`text` in lines at most `room` px wide, broken between words; a word wider than the room is broken after its
    separators (a name's `-`, `/`, `:`), its pieces packed as tightly as the words."""
    lines: list[str] = []
    for word in text.split(" "):
        fits = text_width(word, size, bold=bold) <= room
        for n, piece in enumerate([word] if fits else _pieces(word, room, size, bold)):
            joined = (f"{lines[-1]} {piece}" if n == 0 else lines[-1] + piece) if lines else piece
            if lines and text_width(joined, size, bold=bold) <= room:
                lines[-1] = joined
            else:
                lines.append(piece)
    return lines or [""]


def _parts(name: str) -> list[str]:
    """`name` cut after each separator: `cpu-smoke-run1` -> `cpu-`, `smoke-`, `run1`."""
    parts, start = [], 0
    for i, ch in enumerate(name):
        if ch in SEPARATORS and i + 1 < len(name):
            parts.append(name[start:i + 1])
            start = i + 1
    return [*parts, name[start:]]


def _pieces(word: str, room: float, size: float, bold: bool = False) -> list[str]:
    """A word's separator parts, a part wider than `room` cut into runs of characters that fit (the last resort)."""
    out: list[str] = []
    for part in _parts(word):
        while text_width(part, size, bold=bold) > room and len(part) > 1:
            cut = max(1, next(i for i in range(len(part), 0, -1) if text_width(part[:i], size, bold=bold) <= room))
            out.append(part[:cut])
            part = part[cut:]
        out.append(part)
    return out


def split_name(name: str, room: float, size: float = FONT_PX) -> list[str] | None:
    """`name` broken after its separators into the fewest lines of at most `room` px; None if a part is wider."""
    lines: list[str] = []
    for part in _parts(name):
        if text_width(part.rstrip(), size) > room:
            return None
        if lines and text_width((lines[-1] + part).rstrip(), size) <= room:
            lines[-1] += part
        else:
            lines.append(part)
    return [line.rstrip() for line in lines]


def category_lines(names: Sequence[str], room: float) -> list[list[str]] | None:
    """Each category name in lines that fit `room` px (its slot), MAX_NAME_LINES at most; None when one does not."""
    out = []
    for name in names:
        lines = split_name(name, room)
        if lines is None or len(lines) > MAX_NAME_LINES:
            return None
        out.append(lines)
    return out


def keys(count: int) -> list[str]:
    """A, B, ... Z, AA, AB, ...: the letters that stand for categories whose names do not fit."""
    out = []
    for n in range(count):
        key, n = "", n + 1
        while n:
            n, r = divmod(n - 1, 26)
            key = chr(65 + r) + key
        out.append(key)
    return out
