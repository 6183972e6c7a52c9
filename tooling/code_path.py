"""Which of an engine's log lines the DeepSeek-V4 code path prints: call sites and chains of calls, read from the
engine's own source files (never imported, so a CUDA wheel unpacked on any host will do).

    python -m tooling.code_path --channel NAME --source SITE_PACKAGES [--write | --check]

A log fact counts as printed on a channel only when a call site that prints it is reached on the path the served
model takes: a format string somewhere in the engine proves nothing (upstream 0.32.0 has `Using %s backend.` in
vllm/platforms/cuda.py, but DeepSeek-V4 picks its attention class itself and never calls that selector).

tooling/code_paths/<channel>.yaml holds the chains: each hop names a file, a function in it (Class.method) and the
name that function calls (or hands on: a callback, a `collective_rpc("name")`). Every hop is checked here against
the source; the call site is the chain's last function, which must hold the logging call. The result is the
`code_path` section of channels/facts/<channel>.json: for every log fact an expectation or readiness needs, its call
sites (file:line, enclosing function, level), whether one is reached, and the chain that shows it (each hop with its
line).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run by path in an image build
    sys.path.insert(0, str(ROOT))

from tooling.engine_facts import (  # noqa: E402
    LOG_METHODS,
    _candidate,
    _printed_by,
    _templates,
    format_regex,
    literal_hints,
)

LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "warn": "WARNING", "error": "ERROR",
          "exception": "ERROR", "critical": "CRITICAL", "log_fn": "INFO"}


class PathError(Exception):
    """A chain does not hold in the engine's source (the message names the hop)."""


@dataclass(frozen=True)
class Hop:
    file: str
    function: str
    calls: str
    via: str | None = None
    """How a dynamic dispatch lands on the next hop (a class picked at run time, __getattr__, an RPC by name)."""


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next((n for n in ast.iter_child_nodes(node) if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part), None)  # type: ignore[assignment]
        if node is None:
            return None
    return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None


def _refers(fn: ast.AST, name: str) -> int | None:
    """The first line in `fn` that calls `name`, refers to it (a callback, an attribute) or names it as a string
    (`collective_rpc("load_model")`); None when it does not."""
    lines = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) == name:
                lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr == name) or (
                isinstance(node, ast.Name) and node.id == name) or (
                isinstance(node, ast.Constant) and node.value == name):
            lines.append(node.lineno)
    return min(lines) if lines else None


class Sources:
    """Parsed files under one or more source roots (site-packages dirs), by path relative to the root."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self._trees: dict[str, ast.Module | None] = {}

    def root_of(self, rel: str) -> Path | None:
        """The first root holding the file's top-level package: a file is never read from another root's copy of
        that package (a second site-packages' newer vllm/ must not stand in for a file the first one lacks)."""
        top = rel.split("/", 1)[0]
        return next((r for r in self.roots if (r / top).is_dir()), None)

    def path(self, rel: str) -> Path | None:
        root = self.root_of(rel)
        return root / rel if root is not None and (root / rel).is_file() else None

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self._trees:
            path = self.path(rel)
            self._trees[rel] = ast.parse(path.read_text()) if path else None
        return self._trees[rel]

    def verify(self, hop: Hop) -> int:
        """The line of the hop's call; PathError naming what is missing."""
        tree = self.tree(hop.file)
        if tree is None:
            raise PathError(f"{hop.file}: no such file")
        fn = _function(tree, hop.function)
        if fn is None:
            raise PathError(f"{hop.file}: no function {hop.function}")
        line = _refers(fn, hop.calls)
        if line is None:
            raise PathError(f"{hop.file}:{fn.lineno} {hop.function} does not call {hop.calls}")
        return line


def _line(rel: str, line: int) -> dict[str, int]:
    """A line number only in the engine's own files: a dependency's (uvicorn's) is not pinned by the channel, and its
    patch release would move it, not the fact."""
    return {"line": line} if rel.startswith("vllm/") else {}


def _qualname(parents: list[ast.AST]) -> str:
    names = [p.name for p in parents if isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    return ".".join(names) or "<module>"


def call_sites(sources: Sources, files: list[str], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every logging call whose format string gives one of the pattern's example lines: file, line, enclosing
    function, level, and who prints it (engine_facts' process/ranks reading)."""
    spec = {**spec, "hints": literal_hints(spec.get("regex", ""))}
    out = []
    for rel in files:
        tree = sources.tree(rel)
        if tree is None:
            continue
        for _node, text, parents in _templates(tree):
            if not _candidate(spec, text) or not any(format_regex(text).search(e) for e in spec["examples"]):
                continue
            call = next((p for p in reversed(parents) if isinstance(p, ast.Call)), None)
            who = _printed_by(rel, parents)
            method = who["call"].removeprefix("logger.")
            if call is None or method not in LOG_METHODS | {"log_fn"}:
                continue  # a string built for a logging call elsewhere: that call is the site
            out.append({"file": rel, **_line(rel, call.lineno), "function": _qualname(parents),
                        "level": LEVELS.get(method.removesuffix("_once"), method), "call": who["call"],
                        "process": who["process"], "ranks": who["ranks"]})
    unique = {(s["file"], s.get("line", 0), s["function"]): s for s in out}
    return [unique[k] for k in sorted(unique)]


def spec_path(channel: str, root: Path = ROOT) -> Path:
    return root / "tooling" / "code_paths" / f"{channel}.yaml"


def load_spec(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text())


def expand(spec: dict[str, Any], name: str, seen: tuple[str, ...] = ()) -> list[Hop]:
    """A chain's hops, `{chain: NAME}` entries inlined."""
    if name in seen:
        raise PathError(f"chain {name} includes itself ({' -> '.join(seen)})")
    if name not in spec["chains"]:
        raise PathError(f"no chain {name} in the channel's tooling/code_paths/ file")
    hops: list[Hop] = []
    for h in spec["chains"][name]:
        hops += expand(spec, h["chain"], (*seen, name)) if "chain" in h else [Hop(**h)]
    return hops


def check_chain(sources: Sources, hops: list[Hop]) -> list[dict[str, Any]]:
    """Each hop verified, and each hands on to the next: the name it calls is the next function's (its class for
    `__init__`), or the hop says `via` how a dynamic dispatch lands there."""
    out = []
    for i, hop in enumerate(hops):
        line = sources.verify(hop)
        if i + 1 < len(hops) and hop.via is None:
            parts = hops[i + 1].function.split(".")
            if hop.calls not in (parts[-1], parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else None):
                raise PathError(f"{hop.file}:{line} {hop.function} calls {hop.calls}, not the next hop "
                                f"{hops[i + 1].function}: say `via` how it gets there")
        out.append({"file": hop.file, "function": hop.function, **_line(hop.file, line), "calls": hop.calls,
                    **({"via": hop.via} if hop.via else {})})
    return out


def needed_patterns(root: Path = ROOT) -> list[str]:
    """The log patterns whose facts an expectation waits for, or readiness: the ones the path must print."""
    from appliance.channels.facts import load_sources
    from appliance.health.table import load_table

    table = load_table(root / "healthchecks" / "logchecks.yaml")
    outside = {o.pattern for o in load_sources(root).printed_outside}
    names = {n for e in table.expectations for n in e.required()} | {n for r in table.readiness for n in r.present}
    return sorted(p.id for p in table.facts if set(p.produces()) & names and p.id not in outside)


def code_path(roots: list[Path], spec: Path, root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """pattern id -> {sites, reached, chain | why}: the `code_path` section of a channel's facts."""
    import yaml

    data = load_spec(spec)
    table = {p["id"]: p for p in yaml.safe_load((root / "healthchecks" / "logchecks.yaml").read_text())["facts"]}
    sources = Sources(roots)
    texts = {}
    for top in ("vllm", "uvicorn"):
        base = sources.root_of(top)
        for p in sorted((base / top).rglob("*.py")) if base else []:
            rel = p.relative_to(base).as_posix()
            if "/tests/" not in rel and not rel.startswith("vllm/benchmarks/"):
                texts[rel] = p.read_text(errors="replace")
    out: dict[str, dict[str, Any]] = {}
    for pid in needed_patterns(root):
        p = table[pid]
        spec_p = {"id": pid, "anchors": p["anchors"], "regex": p["regex"], "examples": p.get("examples", []),
                  "hints": literal_hints(p["regex"])}
        candidates = [rel for rel, text in texts.items() if text and _candidate(spec_p, text)]
        sites = call_sites(sources, candidates, spec_p)
        entry: dict[str, Any] = {"sites": [{k: s[k] for k in ("file", "line", "function", "level") if k in s}
                                           for s in sites]}
        for name in data.get("lines", {}).get(pid, []):
            hops = check_chain(sources, expand(data, name))
            last = hops[-1]
            site = next((s for s in sites if (s["file"], s["function"]) == (last["file"], last["function"])), None)
            if site is None:
                where = ", ".join(f"{s['file']}:{s.get('line', '?')}" for s in sites) or "none"
                raise PathError(f"{pid}: chain {name} ends in {last['file']} {last['function']}, which holds none of "
                                f"its call sites ({where})")
            where = f"{site['file']}:{site['line']}" if "line" in site else f"{site['file']} {site['function']}"
            entry.update(reached=True, site=where, chain_name=name, chain=hops)
            break
        else:
            why = data.get("unreached", {}).get(pid)
            entry.update(reached=False, why=why or ("no call site prints it in this engine" if not sites else
                                                    "no chain in tooling/code_paths/ shows a call site reached"))
        out[pid] = entry
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    from appliance.channels.facts import facts_path
    from tooling.engine_facts import dumps

    parser = argparse.ArgumentParser(prog="python -m tooling.code_path", description=__doc__.splitlines()[0])
    parser.add_argument("--channel", required=True)
    parser.add_argument("--source", type=Path, action="append", required=True,
                        help="a site-packages dir holding vllm/ (an unpacked wheel will do); repeat for uvicorn's")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="set the code_path section of the channel's facts")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed section differs")
    args = parser.parse_args(argv)
    try:
        section = code_path(args.source, spec_path(args.channel))
        overlay = ROOT / "channels" / "overlays" / f"{args.channel}.yaml"
        if overlay.is_file():  # a fork: its own lines' entries come from the cited overlay
            from appliance.channels.facts import load_overlay

            section |= {e.name: e.value for e in load_overlay(args.channel, ROOT).entries if e.section == "code_path"}
    except PathError as exc:
        print(f"code path: channel {args.channel}: {exc}", file=sys.stderr)
        return 2
    path = facts_path(args.channel, ROOT)
    facts = json.loads(path.read_text())
    if args.write:
        facts["code_path"] = section
        path.write_text(dumps(facts))
        print(f"wrote the code_path section of {path.relative_to(ROOT)}")
    elif args.check:
        if facts.get("code_path") != section:
            print(f"code path: channel {args.channel}: the committed code_path differs from the engine's source",
                  file=sys.stderr)
            return 1
    else:
        print(json.dumps(section, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
