"""A table for a human: rich lays it out, fitted to the terminal (long cells wrap within their column) when the
output is one; piped into a file or `grep`, every row stays one line."""

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
    """A line above or below a table (its heading, a summary), wrapped to the terminal as the table is, continuation
    lines indented; piped, one line as given."""
    import textwrap

    fit = columns or width()
    return text if fit is None else textwrap.fill(text, fit, subsequent_indent="    ", break_on_hyphens=False)


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], *, columns: int | None = None) -> str:
    """Plain text (no colour, no box): headers upper-cased, two spaces between columns, no trailing blanks."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0), header_style="",
                  show_header=True)
    for i, h in enumerate(headers):  # the first column names the row: never wrapped, so a name stays one word
        table.add_column(h.upper(), overflow="fold", no_wrap=i == 0, min_width=len(h) if i == 0 else None)
    for row in rows:
        table.add_row(*(Text(str(c)) for c in row))  # Text: a `[x]` in a cell is text, never rich markup
    fit = columns or width()
    out = io.StringIO()
    console = Console(file=out, width=fit or 100_000, color_system=None, force_terminal=False, highlight=False,
                      markup=False, emoji=False, soft_wrap=fit is None)
    console.print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())
