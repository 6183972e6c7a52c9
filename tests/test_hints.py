"""Hints work from the wheel: a fix or a help text names a command (`appliance profiles path`, `appliance engine
install`), never a path only a checkout has (`profiles/*.yaml`, `scripts/install-engine.sh`). A user who installed the
wheel has no scripts/ folder, and the profiles live inside the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from appliance.cli import full_parser
from appliance.completion import _parsers

ROOT = Path(__file__).resolve().parent.parent
CHECKOUT_ONLY = re.compile(r"scripts/|profiles/(\*|NAME)")
ALLOWED = {
    # Building an image needs the Dockerfile and the build context: only a checkout has them, and these say so.
    ("appliance/bundle/create.py", "scripts/build-cpu-image.sh"),
    ("appliance/commands/bundle.py", "scripts/build-cpu-image.sh"),
}
"""(file, the path it names) where a checkout path is the true answer; each must still occur (the list shrinks)."""


def _hint_strings(tree: ast.AST) -> list[str]:
    """The text of every `fix=` and `help=` keyword argument: plain strings and the literal parts of f-strings."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("fix", "help"):
            for part in ast.walk(node.value):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    out.append(part.value)
    return out


def test_no_fix_or_help_in_the_package_names_a_checkout_only_path() -> None:
    found: set[tuple[str, str]] = set()
    files = sorted((ROOT / "appliance").rglob("*.py"))
    assert len(files) > 100
    hints = 0
    for path in files:
        rel = str(path.relative_to(ROOT))
        for text in _hint_strings(ast.parse(path.read_text())):
            hints += 1
            for m in CHECKOUT_ONLY.finditer(text):
                word = text[m.start():].split()[0].strip("`()'\",;")
                found.add((rel, word))
    assert hints > 300  # the scan reads the package's hints (a broken walk would find none and pass)
    assert found - ALLOWED == set(), "hints that name a checkout path (name a command instead)"
    assert found >= ALLOWED, f"allowed entries that no longer occur (remove them): {sorted(ALLOWED - found)}"


ENGINE_INSTALL = ("appliance/container/cpu_install.py", "appliance/channels/engines.py", "appliance/commands/engine.py")
"""`appliance engine install` and what it runs: every message they print or raise, not only the fix= and help=."""
SHELL_SCRIPT = re.compile(CHECKOUT_ONLY.pattern + r"|\.sh\b")
"""A checkout path, or a shell script's name (the scripts are a checkout's; a message may build the path in parts)."""


def _message_strings(tree: ast.AST) -> list[str]:
    """Every string literal but the docstrings (a string statement is never printed): f-strings' literal parts too."""
    quiet = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in quiet]


def test_no_message_of_the_engine_install_names_a_checkout_only_path() -> None:
    texts = [t for rel in ENGINE_INSTALL for t in _message_strings(ast.parse((ROOT / rel).read_text()))]
    assert len(texts) > 80 and any("is not on PATH" in t for t in texts)  # the installer's messages are read
    assert [t for t in texts if SHELL_SCRIPT.search(t)] == []


def test_no_help_text_of_any_command_names_a_checkout_only_path() -> None:
    texts = [a.help for p in _parsers(full_parser()) for a in p._actions if isinstance(a.help, str)]
    assert len(texts) > 200
    assert [t for t in texts if CHECKOUT_ONLY.search(t)] == []
