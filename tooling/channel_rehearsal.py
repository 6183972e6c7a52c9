"""The rehearsal of every channel: each channel's engine installed from the package index (amd64) and held to the
repository: its facts re-extracted and compared with channels/facts/, every profile of the channel parsed by that
engine's own argument parser, every log pattern the channel's profiles expect found in its sources.

    python -m tooling.channel_rehearsal run [--channel NAME]... [--venv NAME=DIR]... [--json]
    python -m tooling.channel_rehearsal parse-profiles --channel NAME     (inside the channel's venv)

Steps, per channel:
  resolve   GPU channels: the channel's whole CUDA stack for both platforms, metadata only (the GPU-stack
            rehearsal's resolver, tooling/rehearsal.py); CPU channels: their install is the resolve.
  install   the channel's engine into ~/.cache/appliance-channels/<channel>-<lock digest 12>/venv (or
            $APPLIANCE_CHANNELS_CACHE): a CPU channel through scripts/install-engine.sh, a GPU channel (a fork: its
            base release) with the channel's own pins as constraints on Python 3.11, its wheels downloaded into one
            wheelhouse all channels share (<cache>/wheelhouse), where the machine's CPU torch build of the locked
            torch (when it has one) stands in for the CUDA one (the facts are read from the engine's parser, env
            module, registries and sources, none of which the torch build changes; the CUDA stack itself is the
            GPU-stack rehearsal's).
  facts     the engine's facts re-extracted (tooling/channel_facts.py) and compared with the committed ones.
  parse     every profile of the channel, every rank, through the engine's own `vllm serve` parser.
  patterns  every log pattern the channel's profiles expect (all roles, readiness included) found in the engine's
            sources (or printed outside them: channels/sources.yaml).

Each step's result is kept in the channel's cache folder keyed by what it depends on (the lock digest, the
extractor and its inputs, the rendered argvs): a step whose key is unchanged since it last passed is not redone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from appliance.channels.engines import prune_stale  # noqa: E402
from appliance.container.buildargs import lock_files  # noqa: E402
from appliance.container.cpu_engine import CPU_CUDA_EXTRAS  # noqa: E402
from appliance.lockfile import base_channel, channel, channel_digest, channel_names, load  # noqa: E402
from tooling import rehearsal as gpu_rehearsal  # noqa: E402

FACTS_PYTHON = "3.11"
"""The facts venvs' Python: the CPU torch build this machine holds is a cp311 wheel (and the CPU channels' Python)."""
FACTS_INPUTS = ("tooling/engine_facts.py", "tooling/platform_double.py", "tooling/channel_facts.py",
                "tooling/code_path.py", "appliance/engine_args.py", "healthchecks/logchecks.yaml",
                "channels/sources.yaml")


class ChannelRehearsalError(Exception):
    """A step failed; the message names the channel, the step and why."""


def cache_root() -> Path:
    return Path(os.environ.get("APPLIANCE_CHANNELS_CACHE") or Path.home() / ".cache" / "appliance-channels")


def wheelhouse() -> Path:
    """The wheels every GPU channel's install downloaded, shared across channels and lock digests."""
    return cache_root() / "wheelhouse"


def channel_dir(lock: dict, name: str) -> Path:
    return cache_root() / f"{name}-{channel_digest(lock, name)[:12]}"


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part + b"\0")
    return h.hexdigest()


def _stamp(folder: Path, step: str) -> Path:
    return folder / f"{step}.json"


def _passed(folder: Path, step: str, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_stamp(folder, step).read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("key") == key else None


def _mark(folder: Path, step: str, key: str, result: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _stamp(folder, step).write_text(json.dumps({"key": key, **result}, indent=1))


def _run(cmd: list[str], step: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise ChannelRehearsalError(f"{step} failed (exit {out.returncode}):\n{tail}")
    return out.stdout


# --- install ------------------------------------------------------------------------------------

def _install_cpu(name: str, venv: Path) -> None:
    env = os.environ | {"APPLIANCE_CHANNEL": name, "APPLIANCE_VENV": str(venv), "APPLIANCE_INSTALL_TOOLS": "0"}
    _run(["bash", str(ROOT / "scripts" / "install-engine.sh")], f"channel {name}: install-engine.sh", env)


def _install_gpu(lock: dict, name: str, venv: Path) -> None:
    ch = channel(lock, name)
    files = lock_files(ch, ROOT / "pyproject.toml")
    reqs = [r for r in files["requirements.txt"].splitlines() if r.strip()]
    cons = [c for c in files["constraints.txt"].splitlines() if c.strip()]
    # Pins only FlashInfer's own indexes carry (cubin, jit-cache) are kernels, not facts: left out, as the
    # GPU-stack rehearsal names them.
    off_index = {p["name"] for p in ch["packages"] if p.get("index", "pypi") != "pypi"}
    reqs = [r for r in reqs if r.split("==")[0].split("[")[0] not in off_index]
    cons = [c for c in cons if c.split("==")[0] not in off_index]
    if ch["engine"]["source"] == "fork":
        reqs.append(f"{ch['engine']['base']['name']}=={ch['engine']['base']['version']}")
    folder = venv.parent
    (folder / "requirements.txt").write_text("".join(f"{r}\n" for r in reqs))
    (folder / "constraints.txt").write_text("".join(f"{c}\n" for c in cons))
    python = gpu_rehearsal.find_python(FACTS_PYTHON)
    _run([python, "-m", "venv", str(venv)], f"channel {name}: venv")
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    # One wheelhouse for every channel's install (pip's HTTP cache keeps nothing where the index answers no-store):
    # a channel whose lock moved, or another channel sharing its stack, downloads only the wheels it lacks.
    house = wheelhouse()
    house.mkdir(parents=True, exist_ok=True)
    lists = ["-r", str(folder / "requirements.txt"), "-c", str(folder / "constraints.txt")]
    _run([*pip, "download", "-q", "--dest", str(house), "--find-links", str(house), *lists],
         f"channel {name}: pip download")
    _run([*pip, "install", "-q", "--find-links", str(house), *lists], f"channel {name}: pip install")
    # The CUDA builds of these extras beside a CPU torch break `import vllm` (the CPU engine's fix-up drops them too).
    extras = [x for x in CPU_CUDA_EXTRAS if x != "triton"]
    _run([*pip, "uninstall", "-y", "-q", *extras], f"channel {name}: drop CUDA-only extras")


def install(lock: dict, name: str, venv_override: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The channel's engine venv (installed once per lock digest) and what this call did. An image channel installs
    nothing: its base channel's venv (the release whose facts stand for the image's) is reused."""
    if venv_override is not None:
        return venv_override, {"venv": str(venv_override), "installed": False, "seconds": 0.0, "given": True}
    if channel(lock, name)["engine"]["source"] == "image":
        base = base_channel(lock, name)
        if base is None:
            raise ChannelRehearsalError(f"channel {name}: its engine.base is no PyPI channel of the lock: nothing "
                                        f"installs the release its facts come from")
        venv, result = install(lock, base)
        return venv, {**result, "base_channel": base}
    folder = channel_dir(lock, name)
    venv = folder / "venv"
    key = channel_digest(lock, name)
    if _passed(folder, "install", key) and (venv / "bin" / "python").exists():
        return venv, {"venv": str(venv), "installed": False, "seconds": 0.0}
    start = time.monotonic()
    prune_stale(cache_root(), name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    if channel(lock, name)["target"] == "cpu":
        # install-engine.sh is marker-keyed: a venv the appliance's engine store made (the same layout, when
        # APPLIANCE_ENGINES is this cache) is kept, not installed again.
        _install_cpu(name, venv)
    else:
        shutil.rmtree(venv, ignore_errors=True)
        _install_gpu(lock, name, venv)
    took = round(time.monotonic() - start, 1)
    size = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
    result = {"venv": str(venv), "installed": True, "seconds": took, "venv_mb": round(size / 1e6)}
    _mark(folder, "install", key, result)
    return venv, result


# --- facts, parse, patterns ---------------------------------------------------------------------

def _facts_key(lock: dict, name: str) -> str:
    from appliance.channels.facts import facts_path

    parts = [channel_digest(lock, name).encode(), facts_path(name, ROOT).read_bytes()]
    parts += [(ROOT / rel).read_bytes() for rel in FACTS_INPUTS]
    for extra in (ROOT / "channels" / "overlays" / f"{name}.yaml", ROOT / "tooling" / "code_paths" / f"{name}.yaml"):
        if extra.is_file():
            parts.append(extra.read_bytes())
    return _sha(*parts)


def facts(lock: dict, name: str, venv: Path) -> dict[str, Any]:
    from tooling.channel_facts import channel_facts, check_committed

    folder = channel_dir(lock, name)
    key = _facts_key(lock, name)
    if _passed(folder, "facts", key):
        return {"checked": False, "seconds": 0.0, "why": "engine, extractor and committed facts unchanged"}
    start = time.monotonic()
    fresh = channel_facts(name, venv / "bin" / "python", ROOT)
    problems = check_committed(name, fresh, ROOT)
    if problems:
        raise ChannelRehearsalError(f"channel {name}: the engine's facts differ from channels/facts/{name}.json "
                                    f"({len(problems)} entries):\n  " + "\n  ".join(problems[:40])
                                    + f"\n  fix: python -m tooling.channel_facts extract --channel {name} "
                                      f"--python {venv}/bin/python --write, and review the diff")
    result = {"checked": True, "seconds": round(time.monotonic() - start, 1)}
    _mark(folder, "facts", key, result)
    return result


def channel_profiles(name: str) -> list[str]:
    from appliance.profile import list_profiles, load_profile

    return [n for n in list_profiles() if load_profile(n).profile.engine.channel == name]


def _argvs(name: str) -> dict[str, list[list[str]]]:
    from appliance.placement import resolve_placement
    from appliance.profile import load_profile
    from appliance.render import Placement, build_plan

    out = {}
    for profile_name in channel_profiles(name):
        profile = load_profile(profile_name).profile
        out[profile_name] = [build_plan(profile, resolve_placement(profile, Placement(node_rank=r,
                                                                                      master_addr="192.0.2.1"))).argv
                             for r in range(profile.hardware.nodes)]
    return out


def parse(lock: dict, name: str, venv: Path) -> dict[str, Any]:
    argvs = _argvs(name)
    folder = channel_dir(lock, name)
    key = _sha(channel_digest(lock, name).encode(), json.dumps(argvs, sort_keys=True).encode(),
               (ROOT / "appliance" / "engine_args.py").read_bytes(), Path(__file__).read_bytes())
    if _passed(folder, "parse", key):
        return {"parsed": {p: len(a) for p, a in argvs.items()}, "seconds": 0.0, "why": "argvs unchanged"}
    start = time.monotonic()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
           "PYTHONPATH": str(ROOT), "APPLIANCE_ROOT": str(ROOT), "CUDA_VISIBLE_DEVICES": "",
           "VIRTUAL_ENV": str(venv)}
    out = _run([str(venv / "bin" / "python"), "-m", "tooling.channel_rehearsal", "parse-profiles", "--channel", name],
               f"channel {name}: the engine's own parser", env, cwd=ROOT)
    parsed = json.loads(out.strip().splitlines()[-1])
    result = {"parsed": parsed, "seconds": round(time.monotonic() - start, 1)}
    _mark(folder, "parse", key, result)
    return result


def parse_profiles(name: str) -> dict[str, int]:
    """Inside the channel's venv: every profile of the channel, on every rank, through this vLLM's parser."""
    from appliance.engine_args import parse_serve_argv
    from appliance.profile import load_profile
    from tooling.platform_double import install_sm12x_platform_double, needs_double

    if needs_double():
        install_sm12x_platform_double()
    done: dict[str, int] = {}
    last: list[str] = []
    for profile_name, argvs in _argvs(name).items():
        profile = load_profile(profile_name).profile
        for rank, argv in enumerate(argvs):
            try:
                parsed = parse_serve_argv(argv)
            except ValueError as exc:
                raise ChannelRehearsalError(f"channel {name}: profile {profile_name} rank {rank}: the engine's "
                                            f"parser rejects the argv: {exc}") from None
            want = {"model": profile.model.checkpoint, "tensor_parallel_size": profile.parallel.tensor,
                    "max_model_len": profile.limits.max_model_len}
            got = {k: parsed.get(k) for k in want}
            if got != want:
                raise ChannelRehearsalError(f"channel {name}: profile {profile_name} rank {rank}: the engine parsed "
                                            f"{got}, the profile says {want}")
            last = argv
        done[profile_name] = len(argvs)
    if last:
        try:  # the parser is the engine's real one: it refuses a flag it does not know
            parse_serve_argv([*last, "--no-such-flag"])
        except ValueError:
            return done
        raise ChannelRehearsalError(f"channel {name}: the parser accepted --no-such-flag: it is not the real one")
    return done


def expected_patterns(name: str) -> dict[str, list[str]]:
    """pattern id -> the profiles (and roles) of the channel that expect one of its facts."""
    from appliance.health.context import HealthContext
    from appliance.profile import load_profile
    from appliance.profile.topology import role_for

    out: dict[str, list[str]] = {}
    for profile_name in channel_profiles(name):
        loaded = load_profile(profile_name)
        profile = loaded.profile
        ctx = HealthContext.load(loaded)
        for role in sorted({role_for(profile, r) for r in range(profile.hardware.nodes)}):
            judge = ctx.judge(role)
            names = {n for e in judge.expectations for n in e.facts()} | set(judge.readiness_evidence())
            for pattern in ctx.table.facts:
                if names & set(pattern.produces()):
                    out.setdefault(pattern.id, []).append(f"{profile_name}[{role}]")
    return out


def patterns(name: str) -> dict[str, Any]:
    """Every expected pattern is found in the channel's (just verified) facts, or printed outside the engine."""
    from appliance.channels.facts import load_facts, load_sources

    facts = load_facts(name, ROOT)
    outside = {o.pattern for o in load_sources(ROOT).printed_outside}
    expected = expected_patterns(name)
    missing = {p: who for p, who in expected.items()
               if p not in outside and not (facts.line(p) or {}).get("found")}
    if missing:
        raise ChannelRehearsalError(f"channel {name}: its profiles expect log lines its engine does not print: " +
                                    "; ".join(f"{p} (expected by {', '.join(who[:3])})" for p, who in
                                              sorted(missing.items())))
    return {"expected": len(expected), "outside_engine": sorted(set(expected) & outside)}


def resolve(lock: dict, name: str) -> dict[str, Any]:
    ch = channel(lock, name)
    if ch["target"] != "gpu":
        return {"resolved": False, "why": "a CPU channel resolves in its install (linux/amd64 only)"}
    if ch["engine"]["source"] == "image":
        return {"resolved": False, "why": "an image channel's stack is its published image's, pinned by digest"}
    folder = channel_dir(lock, name)
    key = channel_digest(lock, name)
    if (hit := _passed(folder, "resolve", key)) is not None:
        return {"resolved": False, "seconds": 0.0, "why": "lock unchanged since it resolved",
                "platforms": hit.get("platforms")}
    start = time.monotonic()
    try:
        out = gpu_rehearsal.resolve(lock, list(ch["images"]["platforms"]), channel=name)
    except gpu_rehearsal.RehearsalError as exc:
        raise ChannelRehearsalError(f"channel {name}: {exc}") from None
    result = {"resolved": True, "seconds": round(time.monotonic() - start, 1),
              "platforms": {p: v["packages"] for p, v in out["platforms"].items()}, "unchecked": out["unchecked"]}
    _mark(folder, "resolve", key, result)
    return result


def rehearse(lock: dict, name: str, venv_override: Path | None = None) -> dict[str, Any]:
    start = time.monotonic()
    out: dict[str, Any] = {"channel": name, "lock_digest": channel_digest(lock, name)[:12]}
    out["resolve"] = resolve(lock, name)
    venv, out["install"] = install(lock, name, venv_override)
    out["facts"] = facts(lock, name, venv)
    out["parse"] = parse(lock, name, venv)
    out["patterns"] = patterns(name)
    out["seconds"] = round(time.monotonic() - start, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tooling.channel_rehearsal", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="rehearse channels (default: every channel)")
    p.add_argument("--channel", action="append", help="a channel (repeatable)")
    p.add_argument("--venv", action="append", default=[], metavar="NAME=DIR",
                   help="use an existing venv for a channel (e.g. the repository's .venv for the default CPU one)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("parse-profiles", help="(inside the channel's venv) its profiles through its parser")
    p.add_argument("--channel", required=True)
    args = parser.parse_args(argv)
    lock = load(ROOT / "versions.json")
    try:
        if args.cmd == "parse-profiles":
            print(json.dumps(parse_profiles(args.channel)))
            return 0
        given = dict(item.split("=", 1) for item in args.venv)
        results = [rehearse(lock, name, Path(given[name]) if name in given else None)
                   for name in (args.channel or channel_names(lock))]
        print(json.dumps(results, indent=2) if args.json else "\n".join(
            f"channel {r['channel']}: pass in {r['seconds']} s (install {r['install']['seconds']} s, facts "
            f"{r['facts']['seconds']} s, parse {r['parse']['seconds']} s; {sum(r['parse']['parsed'].values())} "
            f"argvs, {r['patterns']['expected']} expected patterns)" for r in results))
    except ChannelRehearsalError as exc:
        print(f"channel rehearsal: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
