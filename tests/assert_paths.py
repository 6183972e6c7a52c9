"""Test functions that can pass without checking anything: every assert sits inside a loop over an input that may be
empty (and nothing asserts it is not) or behind an `if` whose other branch checks nothing. Found from the source with
`ast`, so a new one fails tests/test_assert_paths.py before it lands."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

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


_WRAPPERS = frozenset({"len", "list", "sorted", "set", "tuple", "reversed", "enumerate"})
"""Calls of one argument that are empty (or zero) exactly when their argument is."""


def _subject(node: ast.expr) -> str:
    """The expression whose emptiness `node` shows: `x` for `x`, `len(x)`, `sorted(x)`, `x.items()`,
    `[f(e) for e in x]`."""
    while True:
        if isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1 and \
                isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS:
            node = node.args[0]
        elif isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) and \
                node.func.attr in {"items", "keys", "values"}:
            node = node.func.value
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp) and len(node.generators) == 1 and \
                not node.generators[0].ifs:
            node = node.generators[0].iter  # `[r.x for r in rows]` is empty exactly when `rows` is
        else:
            return ast.unparse(node)


def _iterated(node: ast.expr) -> str:
    """What an assert must show is not empty for a loop over `node` to run: the input itself, what `enumerate(x)`,
    `sorted(x)`, `list(x)` or `x.items()` walks, or the count `n` of `range(n)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and \
            len(node.args) == 1:
        return _subject(node.args[0])
    return _subject(node)


def _empty_literal(node: ast.expr) -> bool:
    return (isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict) and not _elements(node)) or \
        (isinstance(node, ast.Constant) and node.value in ("", b"", 0))


def _elements(node: ast.List | ast.Tuple | ast.Set | ast.Dict) -> list[ast.expr | None]:
    return list(node.keys) if isinstance(node, ast.Dict) else list(node.elts)


def _filled_literal(node: ast.expr) -> bool:
    """A literal that is not empty whatever its starred parts hold: `[1, *rest]`, `{"a": 1}`, `"text"`."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
        return any(e is not None and not isinstance(e, ast.Starred) for e in _elements(node))
    return isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and bool(node.value)


_FLIPPED = {ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


def _shows_filled(op: ast.cmpop, other: ast.expr) -> bool:
    """Whether `x <op> other` holding means `x` (a collection or a count) is not empty (not zero)."""
    if isinstance(op, ast.Eq) and _filled_literal(other):
        return True
    if isinstance(op, ast.NotEq) and _empty_literal(other):
        return True
    if not (isinstance(other, ast.Constant) and type(other.value) is int):
        return False
    n = other.value
    return (isinstance(op, ast.Gt) and n >= 0) or (isinstance(op, ast.GtE | ast.Eq) and n >= 1)


def _non_empty(test: ast.expr) -> set[str]:
    """The expressions an assert of `test` shows are not empty: `assert x`, `assert len(x) > 0` (or `>= n`, `== n`,
    n > 0), `assert x == [a, b]`, `assert x != []`, each part of an `and`. A mere mention (`assert "ok" in x`,
    `assert isinstance(x, list)`) shows nothing."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return set().union(*(_non_empty(v) for v in test.values))
    if isinstance(test, ast.Compare):
        if len(test.ops) != 1:
            return set()
        left, op, right = test.left, test.ops[0], test.comparators[0]
        shown = set()
        if _shows_filled(op, right):
            shown.add(_subject(left))
        if type(op) in _FLIPPED and _shows_filled(_FLIPPED[type(op)](), left):
            shown.add(_subject(right))
        return shown
    if isinstance(test, ast.Name | ast.Attribute | ast.Subscript | ast.Call):
        return {_subject(test)}
    return set()


class _Paths:
    """Whether running a block surely reaches a check, given what the block's earlier asserts showed is not empty."""

    def __init__(self, checkers: frozenset[str]) -> None:
        self.checkers = checkers

    def block(self, stmts: Sequence[ast.stmt], asserted: set[str]) -> bool:
        asserted = set(asserted)
        for stmt in stmts:
            if self.stmt(stmt, asserted):
                return True
            if isinstance(stmt, ast.Assert):
                asserted |= _non_empty(stmt.test)
        return False

    def stmt(self, stmt: ast.stmt, asserted: set[str]) -> bool:
        if isinstance(stmt, ast.Assert) or _is_fail(stmt, self.checkers):
            return True
        if isinstance(stmt, ast.With | ast.AsyncWith):
            return any(_is_raises(item.context_expr) for item in stmt.items) or self.block(stmt.body, asserted)
        if isinstance(stmt, ast.If):
            return self.block(stmt.body, asserted) and self.block(stmt.orelse, asserted)
        if isinstance(stmt, ast.For | ast.AsyncFor):
            known = _non_empty_literal(stmt.iter) or _iterated(stmt.iter) in asserted
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


@functools.cache
def parsed(file: Path) -> ast.Module:
    """One parse per file and session: this scan and tests/engine_uses.py read the same test files."""
    return ast.parse(file.read_text(), filename=str(file))


def weak_in_source(source: str, path: str) -> list[Place]:
    return weak_in_tree(ast.parse(source), path)


def weak_in_tree(tree: ast.Module, path: str) -> list[Place]:
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
    return [Place(path, f.name, f.lineno) for f in funcs
            if f.name.startswith("test") and _has_assert(f) and not paths.block(f.body, set())]


def weak_tests(dirs: Sequence[Path] = TEST_DIRS) -> list[Place]:
    found: list[Place] = []
    for folder in dirs:
        for file in sorted(folder.rglob("test_*.py")):
            found += weak_in_tree(parsed(file), str(file.relative_to(ROOT)))
    return found
