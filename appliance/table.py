"""A table for a human: rich lays it out, fitted to the terminal when the output is one (a cell too long for its
column is cut with an ellipsis, never folded mid-word, so every row stays one line); piped into a file or `grep`, or
asked for `-o wide`, every row is one line with every cell whole."""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Sequence


def width() -> int | None:
    """The terminal's columns (COLUMNS first, as shutil reads them), or None when the output is no terminal: a pipe
    keeps one line a row, whatever COLUMNS a parent process left behind."""
    if not sys.stdout.isatty():
        return None
    return max(40, shutil.get_terminal_size().columns)


def line(text: str, *, columns: int | None = None) -> str:
    """A line above or below a table (its heading, a summary), wrapped to the terminal between words, continuation
    lines indented (a word longer than the line stays whole: a path folded mid-way cannot be pasted); piped, one line
    as given."""
    import textwrap

    fit = columns or width()
    return text if fit is None else textwrap.fill(text, fit, subsequent_indent="    ", break_on_hyphens=False,
                                                 break_long_words=False)


GAP = 2
"""Spaces between two columns."""
MIN_CUT = 6
"""A cut cell keeps at least this many characters (its header's width, where that is more)."""


def fitted_widths(natural: Sequence[int], floors: Sequence[int], budget: int) -> list[int]:
    """Column widths that fit `budget` characters (gaps included): the widest column gives a character up at a time,
    never below its floor, and the first column (the row's name) only once every other one is at its floor. Widths
    that cannot fit even at their floors stay at the floors: a row a little wider than the terminal beats a table
    with a column dropped."""
    widths = list(natural)
    room = budget - GAP * (len(widths) - 1)
    while sum(widths) > room:
        cuttable = [i for i in range(1, len(widths)) if widths[i] > floors[i]]
        if not cuttable:
            cuttable = [0] if widths[0] > floors[0] else []
        if not cuttable:
            break
        widest = max(cuttable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], *, columns: int | None = None,
           wide: bool = False) -> str:
    """Plain text (no colour, no box): headers upper-cased, two spaces between columns, no trailing blanks. `wide`:
    every cell whole, whatever the terminal (`-o wide`)."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    cells = [[str(c) for c in row] for row in rows]
    fit = None if wide else columns or width()
    natural = [max([cell_len(h), *(cell_len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    floors = [min(n, max(cell_len(h), MIN_CUT)) for n, h in zip(natural, headers, strict=True)]
    widths = natural if fit is None else fitted_widths(natural, floors, fit)
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, GAP, 0, 0), header_style="",
                  show_header=True)
    for h, w in zip(headers, widths, strict=True):  # a cell longer than its column ends in an ellipsis
        table.add_column(h.upper(), overflow="ellipsis", no_wrap=True, width=w)
    for row in cells:
        table.add_row(*(Text(c) for c in row))  # Text: a `[x]` in a cell is text, never rich markup
    out = io.StringIO()
    console = Console(file=out, width=100_000 if fit is None else max(fit, sum(widths) + GAP * len(widths)),
                      color_system=None, force_terminal=False, highlight=False, markup=False, emoji=False,
                      soft_wrap=fit is None)
    console.print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())
