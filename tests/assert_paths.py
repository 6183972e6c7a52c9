"""Test functions that can pass without checking anything: every assert sits inside a loop over an input that may be
empty (and nothing asserts it is not) or behind an `if` whose other branch checks nothing. Found from the source with
`ast`, so a new one fails tests/test_assert_paths.py before it lands."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_DIRS = (ROOT / "tests", ROOT / "tooling" / "tests")


@dataclass(frozen=True)
class Place:
    """Where a test function is: its file, its name and its line (a weak test here, an engine use in
    tests/engine_uses.py)."""

    path: str
    name: str
    line: int

    @property
    def key(self) -> str:
        return f"{self.path}::{self.name}"


Weak = Place
"""A test function none of whose paths surely reaches a check."""


def _is_raises(expr: ast.expr) -> bool:
    """`pytest.raises(...)`, `pytest.warns(...)` (or an imported `raises`): fails when nothing is raised."""
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in {"raises", "warns", "deprecated_call"}


def _is_fail(stmt: ast.stmt, checkers: frozenset[str]) -> bool:
    """`pytest.fail(...)`, or a call of a helper of the same module that itself asserts on every path."""
    if not (isinstance(stmt, ast.Expr | ast.Assign | ast.AnnAssign) and isinstance(stmt.value, ast.Call)):
        return False
    func = stmt.value.func
    if isinstance(func, ast.Attribute) and func.attr == "fail":
        return True
    return isinstance(func, ast.Name) and func.id in checkers


def _non_empty_literal(node: ast.expr) -> bool:
    """A loop over a literal with elements (or `range(n)`, n > 0) runs its body at least once."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(not isinstance(e, ast.Starred) for e in node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys) and None not in node.keys
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"range", "enumerate",
                                                                                           "zip", "sorted"}:
        args = node.args
        if node.func.id == "range":
            return len(args) == 1 and isinstance(args[0], ast.Constant) and isinstance(args[0].value, int) \
                and args[0].value > 0
        return bool(args) and all(_non_empty_literal(a) for a in args)
    if isinstance(node, ast.Attribute) and node.attr in {"items", "keys", "values"}:
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in {"items", "keys",
                                                                                                    "values"}:
        return _non_empty_literal(node.func.value)
    return False


def _iterated(node: ast.expr) -> set[str]:
    """What an assert may name to say a loop's input is not empty: the input, or what `range(n)`, `x.items()`,
    `enumerate(x)`, `sorted(x)` or `list(x)` walks."""
    names = {ast.unparse(node)}
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in {"range", "enumerate", "sorted", "list", "reversed"} \
                and len(node.args) == 1:
            names.add(ast.unparse(node.args[0]))
        if isinstance(func, ast.Attribute) and func.attr in {"items", "keys", "values"} and not node.args:
            names.add(ast.unparse(func.value))
    return names


class _Paths:
    """Whether running a block surely reaches a check, given what the block's earlier asserts already named."""

    def __init__(self, checkers: frozenset[str]) -> None:
        self.checkers = checkers

    def block(self, stmts: Sequence[ast.stmt], asserted: set[str]) -> bool:
        asserted = set(asserted)
        for stmt in stmts:
            if self.stmt(stmt, asserted):
                return True
            if isinstance(stmt, ast.Assert):
                asserted.add(ast.unparse(stmt.test))
        return False

    def stmt(self, stmt: ast.stmt, asserted: set[str]) -> bool:
        if isinstance(stmt, ast.Assert) or _is_fail(stmt, self.checkers):
            return True
        if isinstance(stmt, ast.With | ast.AsyncWith):
            return any(_is_raises(item.context_expr) for item in stmt.items) or self.block(stmt.body, asserted)
        if isinstance(stmt, ast.If):
            return self.block(stmt.body, asserted) and self.block(stmt.orelse, asserted)
        if isinstance(stmt, ast.For | ast.AsyncFor):
            known = _non_empty_literal(stmt.iter) or any(name in text for name in _iterated(stmt.iter)
                                                         for text in asserted)
            return known and self.block(stmt.body, asserted)
        if isinstance(stmt, ast.Try):
            return self.block(stmt.body, asserted) or self.block(stmt.finalbody, asserted)
        return False


def _has_assert(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(func))


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level functions and methods of module-level classes (where pytest finds tests)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        elif isinstance(node, ast.ClassDef):
            yield from (n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


def weak_in_source(source: str, path: str) -> list[Weak]:
    tree = ast.parse(source)
    funcs = list(_functions(tree))
    # Helpers that check on every path count as a check where a test calls them (found to a fixed point).
    checkers: frozenset[str] = frozenset()
    while True:
        paths = _Paths(checkers)
        found = frozenset(f.name for f in funcs if not f.name.startswith("test") and paths.block(f.body, set()))
        if found == checkers:
            break
        checkers = found
    paths = _Paths(checkers)
    return [Weak(path, f.name, f.lineno) for f in funcs
            if f.name.startswith("test") and _has_assert(f) and not paths.block(f.body, set())]


def weak_tests(dirs: Sequence[Path] = TEST_DIRS) -> list[Weak]:
    found: list[Weak] = []
    for folder in dirs:
        for file in sorted(folder.rglob("test_*.py")):
            found += weak_in_source(file.read_text(), str(file.relative_to(ROOT)))
    return found
