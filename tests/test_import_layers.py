"""Imports point down: every module of the package sits in a declared layer and imports only from layers
below its own (or from its own package), and no two modules import each other, even through others.

The layers, lowest first, are the data's one direction: profile -> its channel -> the plan and its views ->
rules -> the health readers and the preflight (siblings) -> the launch -> commands. A new top-level module or
package must be placed here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "appliance"
BUILD_TOOLING = "tooling"
"""Build-time tooling beside the package (generators, the GPU-stack rehearsal): not in the wheel, so never imported."""

LAYERS: list[set[str]] = [
    {"errors"},  # the one error type (stdlib only)
    {"fastdigest"},  # BLAKE2 without loading OpenSSL (stdlib only)
    # leaves (metricfamilies: prometheus-client only; table: rich; interrupts: SIGTERM as Ctrl-C, stdlib only)
    {"redact", "apikey", "metricfamilies", "table", "interrupts"},
    # the limits of every value from outside (text, ports, addresses); port_holder: who holds a port, from procfs
    # (its command line masked before it is cut)
    {"bounds", "port_holder"},
    {"safe_write"},  # the one writer: every file the appliance writes
    # the lock file's stdlib reader and its one finder (the image build runs it by path): paths.versions_path asks it
    {"lockfile"},
    {"paths"},  # where the appliance's files are (and read_capped, the bounded reader)
    {"jsonstrict"},  # the strict JSON reader of every JSON document read back
    # readers of the outside: strict YAML, APPLIANCE_*, vLLM's parser, bounded HTTP replies
    {"yamlstrict", "settings", "engine_args", "http_bounded"},
    {"lock"},  # the typed version lock (its one reader; the profile loader fills a profile's channel from it)
    {"catalogue", "profile"},  # the inputs: hardware catalogue, profile (+ topology)
    {"placement"},  # where this node stands: given values resolved once against the profile (stdlib at run time)
    {"weights"},  # checkpoint weights: pins, verification on disk (huggingface_hub's cache), the transfer tool
    {"channels"},  # a channel's committed engine facts and the capabilities read from them
    # The ServePlan and its views (shell, json, supervisord, k8s): below the rules, which check every flag and
    # env var a plan renders against the channel's facts (E2–E4).
    {"render"},
    {"rules"},  # K and E rules over a profile (on its channel)
    {"hostmem"},  # the host's memory, pressure and kernel log: admission (K23) and the watchdog (K24)
    # Siblings that never import each other: reading a serve's log back against its profile; the preflight of a host.
    {"health", "doctor"},
    {"cliargs"},  # argument helpers shared by the entry points
    {"multinode"},  # the cross-node rendezvous
    # one serve resolved once (lock, facts, placement with its network identity, plan, each program's section), the
    # type launch.json serializes; every command and program of a serve takes it from here
    {"serve"},
    {"run"},  # the launch: named steps from a profile to a started serve
    # the correctness canary: one round against a serve, and the watch beside the engine (its profile section
    # sits in profile/, its state file and metrics in health/; the gate's `canary` check runs a round)
    {"canary"},
    {"gate", "smoke_model", "container"},  # acceptance, the smoke model, the lock's command line for the image build
    {"report"},  # receipts drawn as one self-contained page (reads the gate's receipts and its noise bands)
    {"gemma_model"},  # the TP=2 test model (converted through smoke_model's GGUF path)
    # safe upgrades between channels: plan, qualify (a serve and the gate), promote/rollback (the launch, the compose
    # env file, the manifests); the active channel itself is read by the profile loader (profile/active.py)
    {"upgrade"},
    {"bundle"},  # the offline bundle: checkpoint, image, wheelhouse, caches and lock, made and applied
    {"rulebook"},  # `appliance rules`: gathers every registry (rules, lock, log table, gate checks)
    {"channel_report"},  # `appliance channels [diff]`: a channel's summary, and rules/expectations per channel
    {"commands"},  # parse and delegate
    {"cli"},  # the `appliance` program
    {"completion"},  # `appliance completion SHELL`: generated from cli's parser of every command (shtab)
    {"replay"},  # the entry point: a pure command's answer replayed when nothing it read changed, else cli's main
    {"__main__"},  # python -m appliance
]
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every appliance module `path` imports, anywhere in it (function bodies and TYPE_CHECKING included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "appliance" and name in modules and name != "appliance"}


ENTRY_POINT = "commands"
"""A package's `__main__` (`python -m appliance.PACKAGE`) is a program's entry point: it parses and delegates, as the
commands do, so it sits in their layer, above everything it may call."""


def _unit(module: str) -> str:
    """The layered unit of a module: its top-level package or module under appliance/ (a package's `__main__`: the
    commands')."""
    parts = module.split(".")
    return ENTRY_POINT if len(parts) > 2 and parts[-1] == "__main__" else parts[1]


MODULES = _modules()
GRAPH = {m: _imports(p, MODULES) - {m} for m, p in MODULES.items()}


def test_every_top_level_module_and_package_is_placed_in_a_layer():
    units = {_unit(m) for m in MODULES if m != "appliance"}
    assert sorted(units - LAYER_OF.keys()) == [], "place the new module in LAYERS"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_only_from_layers_below_its_own(module):
    if module == "appliance":
        return
    mine = LAYER_OF[_unit(module)]
    upward = sorted(t for t in GRAPH[module]
                    if _unit(t) != _unit(module) and LAYER_OF[_unit(t)] >= mine)
    assert upward == [], f"{module} (layer {mine}) imports from its own layer or above"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_two_modules_import_each_other_even_through_others():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_command_imports_another_command():
    """Commands parse and delegate: what two commands share lives below them (cliargs, doctor, run, …)."""
    shared = [(m, t) for m, targets in GRAPH.items() if m.startswith("appliance.commands.")
              for t in targets if t.startswith("appliance.commands")]
    assert shared == []


def _top_level_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
    return out


def test_the_runtime_package_imports_no_build_tooling():
    """tooling/ is not in the wheel: an import of it from appliance/ would fail in every installed image."""
    found = sorted(m for m, p in MODULES.items() if BUILD_TOOLING in _top_level_imports(p))
    assert found == []


def test_the_tooling_check_sees_an_import_of_tooling(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from tooling.generate import layouts\n")
    assert BUILD_TOOLING in _top_level_imports(module)
