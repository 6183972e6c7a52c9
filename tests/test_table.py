"""Human tables fit the terminal (rich lays them out; `profiles` was 254 columns wide) and stay one line a row
when piped."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.profile import list_profiles
from appliance.table import render
from tests.in_process import run_main

ROWS = [["gb10-tp2-nvfp4-dspark", "GB10 head; runner vllm serve; dspark:5; checks recall, gsm8k, bench " * 3],
        ["cpu-smoke", "-"], ["odd[bold]name[/bold]", "[red]x[/red]"]]


def test_a_bounded_table_cuts_a_long_cell_with_an_ellipsis_and_wide_keeps_it_whole() -> None:
    text = render(["name", "measured"], ROWS, columns=60)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 60 and len(lines) == len(ROWS) + 1  # one line a row, none folded
    assert [line.split()[0] for line in lines[1:]] == [r[0] for r in ROWS]  # the names whole
    cut = lines[1].split(None, 1)[1]
    assert cut.endswith("…") and ROWS[0][1].startswith(cut[:-1])  # a prefix of the cell, then the ellipsis
    assert "odd[bold]name[/bold]" in text and "[red]x[/red]" in text  # cells are text, never rich markup
    whole = render(["name", "measured"], ROWS, columns=60, wide=True).splitlines()
    assert len(whole) == len(ROWS) + 1 and whole[1].split(None, 1)[1] == ROWS[0][1].rstrip()


def test_columns_give_way_widest_first_and_none_is_dropped() -> None:
    from appliance.table import fitted_widths

    assert fitted_widths([10, 30, 12], [4, 6, 6], 40) == [10, 14, 12]  # the widest gave way, to 40 with the gaps
    assert fitted_widths([10, 30, 12], [4, 6, 6], 26) == [10, 6, 6]  # every other column at its floor ...
    assert fitted_widths([10, 30, 12], [4, 6, 6], 20) == [4, 6, 6]  # ... before the name gives way, to its floor
    headers = ["name", "hardware", "nodes", "checkpoint", "provenance"]
    row = ["gb10-tp2-nvfp4-dspark", "rtx-pro-6000", "2x1", "deepseek-ai/DeepSeek-V4-Flash-0731", "unvalidated"]
    head = render(headers, [row], columns=50).splitlines()[0].split()
    assert head == [h.upper() for h in headers]  # narrow: every column still there


def test_an_unbounded_table_is_one_line_a_row() -> None:
    lines = render(["name", "measured"], ROWS).splitlines()  # pytest's stdout is no terminal
    assert len(lines) == len(ROWS) + 1 and lines[0].split() == ["NAME", "MEASURED"]
    assert all(line == line.rstrip() for line in lines)


def _profiles_on_a_terminal(columns: int) -> list[str]:
    """`appliance profiles` with its stdout on a real pseudo-terminal `columns` wide."""
    return _on_a_terminal(["profiles"], columns)


def _on_a_terminal(argv: list[str], columns: int, codes: tuple[int, ...] = (0,),
                   env: dict[str, str] | None = None) -> list[str]:
    """`appliance ARGV` with its stdout on a real pseudo-terminal `columns` wide."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "appliance", *argv], stdout=follower, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {}), "COLUMNS": str(columns)})
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
    assert proc.wait(timeout=120) in codes
    return b"".join(chunks).decode().replace("\r\n", "\n").splitlines()


def _shipped() -> list[str]:
    """The profiles `appliance profiles` lists without --all: every one but the test (CPU) profiles."""
    from appliance.profile import load_profile

    return [n for n in list_profiles() if load_profile(n).profile.provenance.status != "test"]


def test_profiles_fits_a_100_column_terminal_and_pipes_one_line_a_profile() -> None:
    names = _shipped()
    assert names and len(names) < len(list_profiles())  # the test profiles exist, and are held back
    narrow = _profiles_on_a_terminal(100)
    assert max(len(line) for line in narrow) <= 100
    assert [line.split()[0] for line in narrow[1:len(names) + 1]] == names
    assert narrow[-1] == f"({len(list_profiles()) - len(names)} test profiles not shown: --all lists them)"
    piped = _piped(["profiles"], columns=100)
    assert len(piped) == len(names) + 2 and narrow == piped  # the list fits 100 columns whole
    every = _piped(["profiles", "--all"])
    assert [line.split()[0] for line in every[1:]] == list_profiles()


def _no_word_folded(narrow: list[str], piped: list[str]) -> None:
    """Each word on the terminal is a whole word of the piped output, or a whole word's beginning cut with an
    ellipsis: a word folded mid-way ("HARDW" / "ARE") is neither."""
    words = {w for line in piped for w in line.split()}
    assert words
    for line in narrow:
        for w in line.split():
            assert w in words or (w.endswith("…") and any(v.startswith(w[:-1]) for v in words)), (w, line)


def test_no_cell_of_profiles_is_folded_mid_word_on_an_80_column_terminal_and_wide_keeps_every_cell() -> None:
    narrow = _profiles_on_a_terminal(80)
    piped = _piped(["profiles"])
    assert max(len(line) for line in narrow) <= 80 and len(narrow) == len(piped)  # one line a row there too
    _no_word_folded(narrow, piped)
    assert any("…" in line for line in narrow)  # the terminal is narrower than the table: something was cut
    wide = _on_a_terminal(["profiles", "-o", "wide"], 80)
    assert wide == _piped(["profiles", "-o", "wide"]) and not any("…" in line for line in wide)
    assert wide[0].split() == ["NAME", "GPU", "NODES", "CHECKPOINT", "QUANT", "SPEC", "CHANNEL", "PROVENANCE",
                               "MEASURED"]  # every column, every cell whole


def test_profiles_show_names_what_a_profile_serves_on_what_its_provenance_and_its_command() -> None:
    lines = _piped(["profiles", "show", "gb10-tp2"])
    text = "\n".join(lines)
    assert lines[0].startswith("gb10-tp2: ")
    assert "deepseek-ai/DeepSeek-V4-Flash-0731 (mxfp4), dspark, 5 draft tokens" in text
    assert "gb10: 2 node(s) x 1 GPU, TP 2" in text and "  provenance  " in text
    assert "    vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 \\" in lines  # one flag a line
    assert "      --speculative-config '{\"method\":\"dspark\",\"num_speculative_tokens\":5,\"draft_sample_method\":" \
        "\"probabilistic\"}' \\" in lines
    assert "      --master-addr head-fabric-address \\" in lines  # the head's address stands in, named
    for bad, words in ((["profiles", "show"], "which profile?"), (["profiles", "show", "gb10"], "gb10"),
                       (["profiles", "gb10-tp2"], "appliance profiles show gb10-tp2")):
        done = run_main(bad, limit_s=120)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_render_on_a_terminal_puts_one_flag_a_line_and_pastes_as_the_piped_command() -> None:
    term = _on_a_terminal(["render", "rtx-pro-6000-tp2"], 100)
    piped = _piped(["render", "rtx-pro-6000-tp2"])
    argv = json.loads("\n".join(_piped(["render", "rtx-pro-6000-tp2", "--json"])))["argv"]
    head = [line for line in term if line.startswith(("#", "export "))]
    command = term[len(head):]
    assert head == piped[:-1] and len(piped) == len(head) + 1  # the exports as piped; piped, one command line
    assert command[0].startswith("vllm serve ") and len(command) > 10
    assert all(line.startswith("  --") for line in command[1:]), command
    assert all(line.endswith(" \\") for line in command[:-1]) and not command[-1].endswith("\\")
    pasted = shlex.split(" ".join(line.removesuffix("\\") for line in command))
    assert pasted == argv == shlex.split(piped[-1])  # the same words, whichever way it is printed


def test_profiles_path_names_the_folder_and_a_profiles_file() -> None:
    from appliance.paths import profiles_dir

    assert _piped(["profiles", "path"]) == [str(profiles_dir())]
    assert _piped(["profiles", "path", "gb10-tp2"]) == [str(profiles_dir() / "gb10-tp2.yaml")]


def _piped(argv: list[str], codes: tuple[int, ...] = (0,), columns: int = 80,
           env: dict[str, str] | None = None) -> list[str]:
    """`appliance ARGV` with its stdout no terminal, in-process (tests/in_process.py: a StringIO is no terminal, as a
    pipe is not); what a terminal does is `_on_a_terminal`'s, through a real process and a pseudo-terminal."""
    done = run_main(argv, env={**(env or {}), "COLUMNS": str(columns)}, limit_s=120)
    assert done.returncode in codes, done.stderr
    return done.stdout.splitlines()


# `config`, `doctor` and `versions` were hand-padded (issue 25, item 5): a 254-column config line wrapped into
# noise on a terminal. Each now fits 80 columns there, and piped keeps one line a row (tests and grep read it).
# The long cells they show (descriptions, pin reasons, doctor details) are wider than 80 (`wide`), except
# versions --check, whose cells are names and versions.
TABLES = [(["config", "cpu-smoke"], "PATH", (0,), True),
          (["versions"], "PACKAGE", (0,), True),
          (["versions", "--check"], "STATE", (0, 1), False),  # names and versions: narrow cells
          (["profiles", "--host"], "PROFILE", (0,), False)]  # the reasons are short on a host without GPUs


def _left_edge(lines: list[str], header: str) -> list[str]:
    """The first word of each line from the table's header on that starts at the left edge (a row, or the summary
    below the table): a wrapped cell or line continues indented."""
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [header])
    return [line.split()[0] for line in lines[start:] if line[:1] not in (" ", "")]


def _frozen_procfs(tmp_path: Path) -> dict[str, str]:
    """A procfs whose meminfo is one snapshot of this host's: the two runs compared word by word read the same
    memory (`profiles --host` prints MemAvailable, which moves between two reads of the live /proc: CI of f9f0565)."""
    (tmp_path / "meminfo").write_bytes(Path("/proc/meminfo").read_bytes())
    return {"APPLIANCE_PROCFS": str(tmp_path)}


@pytest.mark.parametrize(("argv", "header", "codes", "wide"), TABLES, ids=[" ".join(t[0]) for t in TABLES])
def test_each_human_table_fits_an_80_column_terminal_and_pipes_one_line_a_row(
        argv: list[str], header: str, codes: tuple[int, ...], wide: bool, tmp_path: Path) -> None:
    host = _frozen_procfs(tmp_path)
    narrow = _on_a_terminal(argv, 80, codes, host)
    assert max(len(line) for line in narrow) <= 80, "\n".join(narrow)
    piped = _piped(argv, codes, env=host)
    assert not wide or max(len(line) for line in piped) > 80  # the same rows, unwrapped
    rows = _left_edge(piped, header)
    assert len(rows) > 2 and rows == _left_edge(narrow, header)  # no row lost or split on the terminal
    start = piped.index(next(line for line in piped if line.split()[:1] == [header]))
    assert [line.split()[0] for line in piped[start:] if line] == rows  # piped: every line a row, none continued
    _no_word_folded(narrow, piped)  # what wraps (a heading, a summary) wraps between words


def test_the_doctor_table_fits_an_80_column_terminal_and_pipes_one_line_a_row(vllm_engine: Path,
                                                                              tmp_path: Path) -> None:
    """doctor's rows are those of a host with the engine installed (without it, a `fix:` line follows a FAIL)."""
    test_each_human_table_fits_an_80_column_terminal_and_pipes_one_line_a_row(["doctor", "cpu-smoke"], "STATUS",
                                                                              (0, 1), True, tmp_path)


def test_config_shows_values_as_a_person_reads_them_without_json_escapes() -> None:
    typed = 'say "hi" \u2014 caf\u00e9'  # a quote, an em dash (a profile description has one), an accent
    lines = _piped(["config", "cpu-smoke", "--set", f"description={typed}"])
    (row,) = [line for line in lines if line.startswith("description ")]
    assert typed in row  # as it was typed: no \" nor \u2014
    assert all('\\"' not in line and "\\u" not in line for line in lines)
    rows = {line.split()[0]: line.split()[1] for line in lines[2:]}
    assert (rows["model.trust_remote_code"], rows["engine.extra_args"]) == ("false", "[]")
    assert rows["env.HF_TOKEN"] in ("unset", "set")  # "set (redacted)" when CI's environment has one


def test_config_shown_values_are_yaml_flow_text() -> None:
    from appliance.commands.config import shown

    assert [shown(v) for v in (None, True, 0.85, "fp8", ["--a", "b c"], {"X": "1"}, [], {})] == \
        ["null", "true", "0.85", "fp8", "[--a, b c]", "{X: 1}", "[]", "{}"]
