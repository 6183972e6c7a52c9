"""Which tests and fixtures run a Debian tool (tests/debian_tools.py TOOLS) without asking for its fixture
(tests/conftest.py TOOL_FIXTURES), found from the source with `ast` as tests/engine_uses.py finds engine uses.
Running a tool: `shutil.which(TOOL)`, or a subprocess call whose argv starts with it (`["ip", ...]`, `"rsync ..."`);
directly or through a helper of the same module. The product running one (`appliance sync-model` runs rsync) is
beyond a scan; the quick tier hides the tools, so such a test fails there instead."""

from __future__ import annotations

import ast

from tests.debian_tools import TOOLS
from tests.engine_uses import Func, _callee

SUBPROCESS_CALLS = frozenset({"run", "Popen", "check_output", "check_call", "call"})


def _names_a_tool(node: ast.AST | None) -> bool:
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        node = node.elts[0]
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(" ")[0] in TOOLS


def tool_use(func: Func) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and node.args and _callee(node) in {"which", *SUBPROCESS_CALLS} \
                and _names_a_tool(node.args[0]):
            return True
    return False
