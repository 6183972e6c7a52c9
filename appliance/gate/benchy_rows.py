"""How llama-benchy names a row of its table: one function, for the rows the bench parses (bench.py) and the rows a
bench protocol plans (protocol.py)."""

from __future__ import annotations

from typing import Any


def row_name(kind: str, size: Any, depth: Any, concurrency: Any, multi: bool, prompt: Any = None) -> str:
    """A row's name as llama-benchy prints it: `pp2048 @ d8192`, `ctx_tg @ d8192`, `tg128 (c8)` (the concurrency only
    where the run had several). A tg row names its prompt (`tg256 (pp32768)`) where the run had several prompt
    sizes: llama-benchy prints them all `tg256`, and a receipt's rows are keyed by name."""
    c = f" (c{concurrency})" if multi else ""
    if kind in ("ctx_pp", "ctx_tg"):
        return f"{kind} @ d{depth}{c}"
    p = f" (pp{prompt})" if kind == "tg" and prompt is not None else ""
    return f"{kind}{size}{p}{f' @ d{depth}' if depth else ''}{c}"
