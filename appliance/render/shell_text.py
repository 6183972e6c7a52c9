"""A serve command as shell text: one line for a pipe (what a script or `eval` reads), or one flag a line for a
person (a flag keeps its value on its line; each line ends in a backslash, so the text still pastes as one
command). Every word shell-quoted either way."""

from __future__ import annotations

import shlex


def flag_lines(argv: list[str]) -> list[str]:
    """The words grouped a flag a line: the program and its positionals first, then each `--flag` with its values."""
    lines: list[str] = []
    for word in argv:
        if lines and not word.startswith("--"):
            lines[-1] += " " + shlex.quote(word)
        else:
            lines.append(shlex.quote(word))
    return lines


def command_text(argv: list[str], *, one_line: bool, indent: str = "") -> str:
    if one_line:
        return indent + shlex.join(argv)
    return indent + f" \\\n{indent}  ".join(flag_lines(argv))
