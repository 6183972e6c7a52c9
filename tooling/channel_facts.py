"""A channel's engine facts: extracted from its installed engine (tooling/engine_facts.py runs inside the engine's
venv), a fork's base release facts plus its cited overlay, written to channels/facts/<channel>.json and compared
with the committed file (CI, the image build).

    python -m tooling.channel_facts extract --channel NAME --python VENV/bin/python [--write | --check]
    python -m tooling.channel_facts overlay-check --channel NAME --python VENV/bin/python

`extract --check` exits 1 naming every entry that differs from the committed facts (a PyPI channel's facts must
match its release exactly). `overlay-check` (the image build of a fork) checks that every entry of the fork's
overlay holds in the real fork, and that every fact the committed facts hold for the base is still there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run by path in an image build
    sys.path.insert(0, str(ROOT))

from appliance.channels.facts import (  # noqa: E402
    Overlay,
    diff_entries,
    facts_path,
    load_overlay,
    load_sources,
)
from appliance.lockfile import base_channel, channel, load  # noqa: E402
from tooling.engine_facts import dumps  # noqa: E402


class FactsError(Exception):
    """The facts could not be extracted, or differ from the committed ones (the message names each entry)."""


def pattern_specs(root: Path = ROOT) -> dict[str, Any]:
    """What the extractor looks for: every log fact pattern (id, anchors, real example lines) and the markers."""
    import yaml

    table = yaml.safe_load((root / "healthchecks" / "logchecks.yaml").read_text())
    sources = load_sources(root)
    outside = {o.pattern for o in sources.printed_outside}
    specs = [{"id": p["id"], "anchors": p["anchors"], "regex": p["regex"], "examples": p.get("examples", [])}
             for p in table["facts"] if p["id"] not in outside]
    return {"log_lines": specs, "markers": [m.model_dump() for m in sources.markers]}


def _engine_env(python: Path) -> dict[str, str]:
    """A fixed, small environment: the facts must not depend on who extracts them, or where (HOME is a fixed
    path so the path defaults of vllm.envs read the same everywhere)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent-home", "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1",
            "VIRTUAL_ENV": str(python.absolute().parent.parent)}


def extract_raw(python: Path, root: Path = ROOT) -> dict[str, Any]:
    """Run the extractor inside the engine's venv and return its facts."""
    with tempfile.TemporaryDirectory(prefix="engine-facts-") as tmp:
        patterns, out = Path(tmp, "patterns.json"), Path(tmp, "facts.json")
        patterns.write_text(json.dumps(pattern_specs(root)))
        cmd = [str(python.absolute()), "-m", "tooling.engine_facts", "extract", "--patterns", str(patterns),
               "--out", str(out)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=_engine_env(python),
                             cwd=tmp, timeout=900, check=False)
        if run.returncode != 0:
            tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-20:])
            raise FactsError(f"the extractor failed in {python} (exit {run.returncode}):\n{tail}")
        return json.loads(out.read_text())


def engine_site_packages(python: Path) -> Path:
    """The site-packages holding the engine venv's vllm (found, not imported)."""
    code = "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"
    run = subprocess.run([str(python.absolute()), "-c", code], capture_output=True, text=True,
                         env=_engine_env(python), timeout=120, check=False)
    if run.returncode != 0:
        raise FactsError(f"{python} has no vllm to read the code path from: {run.stderr.strip()[-300:]}")
    return Path(run.stdout.strip()).parent


def code_path_section(name: str, python: Path, root: Path = ROOT) -> dict[str, Any] | None:
    """The channel's DeepSeek-V4 code path (tooling/code_path.py), read from the engine venv's sources; None for a
    channel without a tooling/code_paths/ file (it serves no DeepSeek-V4)."""
    from tooling.code_path import PathError, code_path, spec_path

    spec = spec_path(name, root)
    base = base_channel(load(root / "versions.json"), name)
    if not spec.is_file() and base is not None:
        spec = spec_path(base, root)  # an image channel: its base release's DeepSeek-V4 path, re-checked in the image
    if not spec.is_file():
        return None
    try:
        return code_path([engine_site_packages(python)], spec, root)
    except PathError as exc:
        raise FactsError(f"channel {name}: the code path does not hold in {python}'s engine: {exc}") from None


def apply_overlay(base: dict[str, Any], overlay: Overlay) -> dict[str, Any]:
    """The fork's facts: its base release's plus each overlay entry (set, or removed)."""
    facts = json.loads(json.dumps(base))
    for e in overlay.entries:
        section = facts.setdefault(e.section, {})
        if e.section == "registries":
            names = set(section.get(e.registry or "", []))
            names = names - {e.name} if e.remove else names | {e.name}
            section[e.registry or ""] = sorted(names)
        elif e.remove:
            section.pop(e.name, None)
        else:
            section[e.name] = e.value
    facts["overlay"] = {"of": overlay.channel, "base": overlay.base, "entries": len(overlay.entries)}
    return facts


def channel_facts(name: str, python: Path, root: Path = ROOT) -> dict[str, Any]:
    """The facts of a channel, as committed: extracted from `python`'s engine, with the overlay of a fork."""
    lock = load(root / "versions.json")
    ch = channel(lock, name)
    raw = extract_raw(python, root)
    eng = ch["engine"]
    based = eng["source"] in ("fork", "image")  # its base release's facts plus its cited overlay stand for it
    want = (eng["base"]["name"], eng["base"]["version"]) if based else (eng["name"], eng["version"])
    got = (raw["engine"]["distribution"], raw["engine"]["version"].split("+")[0])
    if got != want:
        raise FactsError(f"channel {name} wants the facts of {want[0]}=={want[1]} but {python} has "
                         f"{got[0]}=={raw['engine']['version']}")
    facts = {"channel": name, **raw}
    path = code_path_section(name, python, root)
    if path is not None:
        facts["code_path"] = path
    if based:
        facts = apply_overlay(facts, load_overlay(name, root))
    return facts


def check_committed(name: str, facts: dict[str, Any], root: Path = ROOT) -> list[str]:
    """Entries where freshly extracted facts differ from channels/facts/<name>.json."""
    path = facts_path(name, root)
    if not path.is_file():
        return [f"{path.relative_to(root)} does not exist: write it with `python -m tooling.channel_facts extract "
                f"--channel {name} --python VENV/bin/python --write`"]
    return diff_entries(json.loads(path.read_text()), facts, committed_name="committed", fresh_name="engine")


def overlay_check(name: str, python: Path, root: Path = ROOT) -> list[str]:
    """In the image build of a fork or an image channel: every overlay entry must hold in the real engine, and every
    flag, env var and backend the committed facts hold must still be there (it may add more; that is said, not
    refused)."""
    raw = {"channel": name, **extract_raw(python, root)}
    committed = json.loads(facts_path(name, root).read_text())
    noun = "the image" if channel(load(root / "versions.json"), name)["engine"]["source"] == "image" else "the fork"
    return overlay_problems(raw, load_overlay(name, root), committed,
                            lambda e: _overlay_chain_problems(e, python), noun)


def overlay_problems(raw: dict[str, Any], overlay: Overlay, committed: dict[str, Any],
                     chains: Any = lambda e: [], engine: str = "the fork") -> list[str]:
    """The engine's freshly extracted facts (`raw`) against its overlay and the committed facts: one line per
    differing entry, naming it. `chains` checks a code_path entry's hops against the engine's sources; `engine` is
    how the lines name the engine (the fork, the image)."""
    problems = []
    for e in overlay.entries:
        section = raw.get(e.section, {})
        if e.section == "registries":
            present = e.name in section.get(e.registry or "", [])
            if present == e.remove:
                problems.append(f"overlay {e.key}: {engine} {'still has' if e.remove else 'has no'} {e.name} "
                                f"({e.source})")
        elif e.section == "code_path":
            problems += chains(e)
        elif e.remove:
            if e.name in section:
                problems.append(f"overlay {e.key}: {engine} still has it ({e.source})")
        elif e.section == "log_lines":
            want, got = e.value or {}, section.get(e.name) or {}
            who = lambda entry: sorted({(s["process"], s["ranks"]) for s in entry.get("sources", [])})  # noqa: E731
            if bool(got.get("found")) != bool(want.get("found")) or not set(who(want)) <= set(who(got)):
                problems.append(f"overlay {e.key}: {engine} has found={got.get('found')} printed by {who(got)}, "
                                f"the overlay says found={want.get('found')} printed by {who(want)} ({e.source})")
        elif not _holds(section.get(e.name), e.value):
            problems.append(f"overlay {e.key}: {engine} has {json.dumps(section.get(e.name))}, the overlay says "
                            f"{json.dumps(e.value)} ({e.source})")
    for section in ("flags", "env"):
        gone = sorted(set(committed.get(section, {})) - set(raw.get(section, {})))
        problems += [f"{section} {n}: in the committed facts, not in {engine}" for n in gone]
    for reg, names in committed.get("registries", {}).items():
        gone = sorted(set(names) - set(raw.get("registries", {}).get(reg, [])))
        problems += [f"registries.{reg} {n}: in the committed facts, not in {engine}" for n in gone]
    return problems


def _holds(got: Any, want: Any) -> bool:
    """An overlay value holds when the engine's entry has every key the overlay gives (a public source may show a
    flag's form but not its default): the keys it does not give are the engine's, not compared."""
    if isinstance(want, dict) and isinstance(got, dict):
        return all(got.get(k) == v for k, v in want.items())
    return bool(got == want)


def _overlay_chain_problems(e: Any, python: Path) -> list[str]:
    """A code_path overlay entry against the real fork: every hop of its chain holds there (file, function, the
    name it calls)."""
    from tooling.code_path import Hop, PathError, Sources

    sources = Sources([engine_site_packages(python)])
    out = []
    for h in (e.value or {}).get("chain") or []:
        try:
            sources.verify(Hop(h["file"], h["function"], h["calls"], h.get("via")))
        except PathError as exc:
            out.append(f"overlay {e.key}: {exc} ({e.source})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tooling.channel_facts", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("extract", help="a channel's facts from an engine venv")
    p.add_argument("--channel", required=True)
    p.add_argument("--python", type=Path, required=True, help="the engine venv's interpreter")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write channels/facts/<channel>.json")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed facts differ")
    p = sub.add_parser("overlay-check", help="(image build of a fork or an image channel) the overlay against it")
    p.add_argument("--channel", required=True)
    p.add_argument("--python", type=Path, default=Path(sys.executable))
    args = parser.parse_args(argv)
    try:
        if args.cmd == "overlay-check":
            problems = overlay_check(args.channel, args.python)
            for line in problems:
                print(f"engine facts: channel {args.channel}: {line}", file=sys.stderr)
            if problems:
                print(f"engine facts: the engine does not match channel {args.channel}'s facts: fix the overlay "
                      f"(channels/overlays/{args.channel}.yaml) or the lock; stopped", file=sys.stderr)
                return 1
            print(f"engine facts: channel {args.channel}: every overlay entry holds in the engine")
            return 0
        facts = channel_facts(args.channel, args.python)
        if args.write:
            path = facts_path(args.channel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dumps(facts))
            print(f"wrote {path.relative_to(ROOT)}")
        elif args.check:
            problems = check_committed(args.channel, facts)
            for line in problems:
                print(f"engine facts: channel {args.channel}: {line}", file=sys.stderr)
            if problems:
                return 1
            print(f"engine facts: channel {args.channel}: the engine's facts are the committed ones")
        else:
            print(dumps(facts), end="")
    except FactsError as exc:
        print(f"engine facts: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
