"""A small SVG plotter for the receipt report: categories along x, one numeric axis up y, points with whiskers,
bars, shaded bands and reference lines. Output is a self-contained `<svg>` string (no script, no fetch, no font
file), so the page opens offline and prints as it shows. Text is escaped; numbers are rounded to a tenth of a pixel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

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
    top: int = 34
    bottom: int = 62
    _body: list[str] = field(default_factory=list)
    _legend: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ticks = nice_ticks(self.y_min, self.y_max)
        self.y_min, self.y_max = min(ticks[0], self.y_min), max(ticks[-1], self.y_max)
        self._ticks = ticks

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
        y = self.y(value)
        self._body.append(f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{y:.1f}" y2="{y:.1f}" '
                          f'stroke="{color}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
        if label:
            self._body.append(f'<text x="{self.width - self.right - 4}" y="{y - 4:.1f}" text-anchor="end" '
                              f'class="note" fill="{color}">{escape(label)}</text>')

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

    def value_label(self, index: float, value: float, text: str, offset: float = 0.0) -> None:
        cx = self.x(index) + offset * self.slot()
        self._body.append(f'<text x="{cx:.1f}" y="{self.y(value) - 6:.1f}" text-anchor="middle" class="value">'
                          f'{escape(text)}</text>')

    def legend(self, color: str, label: str) -> None:
        self._legend.append(("mark", color, label))

    # --- the whole ---------------------------------------------------------------------------------------------------

    def render(self) -> str:
        bottom = self.height - self.bottom
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                 f'viewBox="0 0 {self.width} {self.height}" role="img" aria-label="{escape(self.title)}">',
                 f'<text x="{self.left}" y="20" class="title">{escape(self.title)}</text>']
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
        fits = max(4, min(24, int(self.slot() / TICK_CHAR_PX) - 1))  # a label never runs into its neighbour's
        for i, name in enumerate(self.categories):
            parts.append(f'<text x="{self.x(i):.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">'
                         f'{escape(_short(name, fits))}<title>{escape(name)}</title></text>')
        x, y = self.left, self.height - 30
        for kind, color, label in self._legend:
            step = 26 + 6.4 * len(label)
            if x > self.left and x + step > self.width - self.right:  # wrap onto the next legend line
                x, y = self.left, y + 15
            mark = (f'<rect x="{x}" y="{y - 9}" width="14" height="10" fill="{color}" fill-opacity="0.35"/>'
                    if kind == "band" else f'<circle cx="{x + 7}" cy="{y - 4}" r="5" fill="{color}"/>')
            parts.append(mark + f'<text x="{x + 18}" y="{y}" class="legend">{escape(label)}</text>')
            x += step
        parts.append("</svg>")
        return "".join(parts)


TICK_CHAR_PX = 6.6
"""The widest a character of the page's 11 px tick font draws (system sans-serif), in px."""


def _short(text: str, limit: int = 24) -> str:
    """At most `limit` characters: the start, then … (the full name is the label's tooltip)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
