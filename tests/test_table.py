"""Human tables fit the terminal (rich lays them out; `profiles` was 254 columns wide) and stay one line a row
when piped."""

from __future__ import annotations

import os
import subprocess
import sys

from appliance.profile import list_profiles
from appliance.table import render

ROWS = [["gb10-tp2-nvfp4-dspark", "GB10 head; runner vllm serve; dspark:5; checks recall, gsm8k, bench " * 3],
        ["cpu-smoke", "-"], ["odd[bold]name[/bold]", "[red]x[/red]"]]


def test_a_bounded_table_fits_its_columns_and_loses_nothing() -> None:
    text = render(["name", "measured"], ROWS, columns=60)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 60 and len(lines) > len(ROWS) + 1  # the long cell wrapped
    assert [line.split()[0] for line in lines if line[:1] not in (" ", "")][1:] == [r[0] for r in ROWS]
    assert "".join(text.split()).count("dspark:5") == 3  # every word of the wrapped cell is still there
    assert "odd[bold]name[/bold]" in text and "[red]x[/red]" in text  # cells are text, never rich markup


def test_an_unbounded_table_is_one_line_a_row() -> None:
    lines = render(["name", "measured"], ROWS).splitlines()  # pytest's stdout is no terminal
    assert len(lines) == len(ROWS) + 1 and lines[0].split() == ["NAME", "MEASURED"]
    assert all(line == line.rstrip() for line in lines)


def _profiles_on_a_terminal(columns: int) -> list[str]:
    """`appliance profiles` with its stdout on a real pseudo-terminal `columns` wide."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "profiles"], stdout=follower, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": str(columns)})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode().replace("\r\n", "\n").splitlines()


def test_profiles_fits_a_100_column_terminal_and_pipes_one_line_a_profile() -> None:
    names = list_profiles()
    narrow = _profiles_on_a_terminal(100)
    assert max(len(line) for line in narrow) <= 100
    assert [line.split()[0] for line in narrow if line[:1] not in (" ", "")][-len(names):] == names
    piped = subprocess.run([sys.executable, "-m", "appliance", "profiles"], capture_output=True, text=True,
                           timeout=120, check=True, env={**os.environ, "COLUMNS": "100"}).stdout.splitlines()
    assert len(piped) == len(names) + 1 and max(len(line) for line in piped) > 100
