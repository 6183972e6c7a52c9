"""Property-based fuzzing of every command's contract (issue 11: keep hostile input from coming back).

Hypothesis generates profiles, --set overrides, placement flags, APPLIANCE_* values, serve logs, receipts and raw
HTTP requests to the exporter; every example must keep the contract:
- exit 0 or 2 (logscan 0/1; gate compare 0/1/2; argparse's own refusals are 2), never a traceback;
- bounded time (TIME_LIMIT_S per command, enforced by a timer: a hang is a failure, not a stuck CI job) and bounded
  memory growth;
- no secret in any output: HF_TOKEN and VLLM_API_KEY hold generated values, which the inputs also carry;
- `run --dry-run` writes exactly the planned supervisor sections (no smuggled `[program:…]`).

The budget is fixed and derandomized (same examples every run, no example database), a few minutes on 2 cores.
Commands run in-process (the CLI's `main` with argv, SystemExit caught) to keep it fast. The figures (inputs tried,
tracebacks, hangs, leaks, slowest case) are printed at the end of the module and written to
$APPLIANCE_FUZZ_REPORT when set.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import socket
import string
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.cli import main
from tests.test_gate_compare import receipt as good_receipt

ROOT = Path(__file__).resolve().parent.parent
TIME_LIMIT_S = 20.0
"""Per command; the slowest case measured is far below (see the report). Generous: CI machines are shared."""
RSS_GROWTH_LIMIT_KIB = 256 * 1024
BUDGET = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.function_scoped_fixture])


# --- the contract and its figures ----------------------------------------------------------------------------------

class Hang(Exception):
    pass


@dataclass
class Figures:
    inputs: int = 0
    tracebacks: int = 0
    hangs: int = 0
    leaks: int = 0
    slowest_s: float = 0.0
    slowest: str = ""
    per_area: dict[str, int] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)
    """How the CLI examples ended, per area ("render:0"): the generators must reach the accepting paths too."""

    def to_json(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "tracebacks": self.tracebacks, "hangs": self.hangs, "leaks": self.leaks,
                "slowest_s": round(self.slowest_s, 3), "slowest": self.slowest, "per_area": self.per_area,
                "exits": self.exits}


FIGURES = Figures()


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def _alarm(_signum: int, _frame: object) -> None:
        raise Hang(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _shown(argv: list[str]) -> str:
    return " ".join(a if len(a) < 60 else a[:57] + "..." for a in argv)[:300]


def run_cli(area: str, argv: list[str], *, env: dict[str, str] | None = None,
            secrets: tuple[str, ...] = (), codes: tuple[int, ...] = (0, 2), secret_ok_on_success: bool = False
            ) -> Result:
    """`appliance ARGV` in-process under the contract; the figures count every call."""
    FIGURES.inputs += 1
    FIGURES.per_area[area] = FIGURES.per_area.get(area, 0) + 1
    out, err = io.StringIO(), io.StringIO()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.monotonic()
    code: int | None = None
    try:
        with environment(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                time_limit(TIME_LIMIT_S):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own refusals
                code = exc.code if isinstance(exc.code, int) else 2
    except Hang:
        FIGURES.hangs += 1
        pytest.fail(f"hang: appliance {_shown(argv)}")
    except Exception:
        FIGURES.tracebacks += 1
        pytest.fail(f"traceback from appliance {_shown(argv)}:\n{traceback.format_exc()}")
    seconds = time.monotonic() - began
    if seconds > FIGURES.slowest_s:
        FIGURES.slowest_s, FIGURES.slowest = seconds, f"{area}: appliance {_shown(argv)}"
    text = out.getvalue() + err.getvalue()
    if "Traceback (most recent call last)" in text:
        FIGURES.tracebacks += 1
        pytest.fail(f"a traceback printed by appliance {_shown(argv)}:\n{text[-3000:]}")
    assert code in codes, f"exit {code} from appliance {_shown(argv)}:\n{text[-2000:]}"
    FIGURES.exits[f"{area}:{code}"] = FIGURES.exits.get(f"{area}:{code}", 0) + 1
    if not (secret_ok_on_success and code == 0):
        leaked = [s for s in secrets if s in text]
        if leaked:
            FIGURES.leaks += 1
            pytest.fail(f"secret in the output of appliance {_shown(argv)}:\n{text[-2000:]}")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown < RSS_GROWTH_LIMIT_KIB, f"memory grew {grown} KiB on appliance {_shown(argv)}"
    return Result(code, out.getvalue(), err.getvalue(), seconds)


@pytest.fixture(scope="module", autouse=True)
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    yield FIGURES
    report = json.dumps(FIGURES.to_json())
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(f"\nfuzz figures: {report}")
    if os.environ.get("APPLIANCE_FUZZ_REPORT"):
        Path(os.environ["APPLIANCE_FUZZ_REPORT"]).write_text(report + "\n")


# --- strategies ------------------------------------------------------------------------------------------------------

secret_values = st.text(string.ascii_letters + string.digits, min_size=10, max_size=20).map(lambda s: f"Sx{s}")
CONTROL = ["\n", "\r", "\x00", "\x1b", "\t", "\x7f", "\x85", "\u2028", "\x1b[2J", "\r\n[program:evil]\n"]
SPECIAL = ["\n[program:evil]\ncommand=/bin/sh -c id", " ;comment", " #x", "%(ENV_HOME)s", "%", "--api-key", "-x",
           "", " ", "\\", '"', "'", "..", "../../etc/passwd", "/etc/passwd", "a" * 200_000, "é" * 70_000,
           "[1, 2]", "{a: 1}", "&a [*a]", "!!binary aGk=", "!!python/object:os.system x", "2026-13-45", "yes",
           "null", "~", "9" * 5000, "-9" * 10, ".nan", ".inf", "-.inf", "1e999", "0x1F", "[[[[[[[[", "? [a]\n: b",
           "a: b: c", "@", "`", "|", ">", "*x", "!x"]
hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(SPECIAL),
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=8), st.sampled_from(CONTROL), st.text(max_size=8)),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
env_text = hostile_text.map(lambda s: s.replace("\x00", ""))  # the environment cannot hold NUL


def _field_paths() -> list[str]:
    from appliance.profile.model import Profile

    paths = []
    for name, info in Profile.model_fields.items():
        sub = getattr(info.annotation, "model_fields", None)
        args = [a for a in getattr(info.annotation, "__args__", ()) if hasattr(a, "model_fields")]
        sub = sub or (args[0].model_fields if args else None)
        paths += [f"{name}.{s}" for s in sub] if sub else [name]
    return paths


FIELD_PATHS = _field_paths()
override_keys = st.one_of(st.sampled_from(FIELD_PATHS), st.sampled_from(FIELD_PATHS).map(lambda p: p + ".x"),
                          st.text(max_size=12))
def now_and_then(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws. (Hypothesis biases integers towards 0 and its boundaries, so
    `integers(0, n) == 0` would be true far more often than 1 in n.)"""
    return st.sampled_from([True] + [False] * (n - 1))


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], n: int = 5) -> st.SearchStrategy[Any]:
    """`bad` about once in `n` draws, else `good`: hostile input, but enough valid input to reach the renderers."""
    return now_and_then(n).flatmap(lambda hostile: bad if hostile else good)


printable = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=30)
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    # Values near and past each bound, and printable text of any script: these reach the accepting paths.
    "server.port": st.integers(-1, 65536), "server.health_port": st.integers(-1, 65536),
    "server.host": st.sampled_from(["0.0.0.0", "::", "127.0.0.1", "localhost", "[::1]", "head-0.svc", "300.1.1.1"]),
    "server.served_model_name": printable, "description": printable, "server.tokenizer_mode": printable,
    "model.revision": printable, "distributed.nccl_ib_hca": printable,
    "limits.max_model_len": st.integers(0, 2_000_000), "limits.max_num_seqs": st.integers(-1, 5000),
    "limits.gpu_memory_utilization": st.floats(-1, 2), "distributed.master_port": st.integers(1000, 65536),
    "cache.block_size": st.integers(0, 5000), "speculative.num_tokens": st.integers(0, 20),
    "engine.kv_offload_gib": st.floats(allow_nan=True, allow_infinity=True), "hardware.nodes": st.integers(0, 20),
    "cache.guard": st.sampled_from(["auto", "0", "1", "2", "3"]), "engine.cudagraph_mode": st.sampled_from(
        ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "full"]),
}


@st.composite
def plausible_override(draw: st.DrawFn) -> str:
    key = draw(st.sampled_from(sorted(PLAUSIBLE)))
    value = draw(PLAUSIBLE[key])
    return f"{key}={json.dumps(value) if isinstance(value, str) else value}"  # a JSON string is YAML-quoted text


overrides = st.lists(mostly(plausible_override(), st.builds(lambda k, v: f"{k}={v}", override_keys, hostile_text),
                             3), max_size=3)
PROFILES = ["cpu-smoke", "cpu-smoke-2node", "gb10-tp2", "rtx-pro-6000-tp2"]
profile_names = mostly(st.sampled_from(PROFILES), hostile_text)


@st.composite
def placement_flags(draw: st.DrawFn) -> list[str]:
    flags: list[str] = []
    for flag, values in (("--node-rank", st.one_of(st.integers(-3, 20).map(str), hostile_text)),
                         ("--master-addr", st.one_of(st.sampled_from(["10.0.0.1", "fd00::1", "head"]), hostile_text)),
                         ("--master-port", st.one_of(st.integers(-1, 70000).map(str), hostile_text)),
                         ("--fabric-ifname", st.one_of(st.sampled_from(["eth0", "enp1s0f0np0"]), hostile_text))):
        if draw(st.booleans()):
            flags.append(f"{flag}={draw(values)}")
    return flags


def _with_secrets(items: list[str], secret: str, draw: st.DrawFn) -> list[str]:
    """Put the secret into some of the generated values, as a user pasting a token into the wrong place would."""
    return [f"{i}{secret}" if draw(now_and_then(4)) else i for i in items]


# --- profile commands: validate, config, render, k8s -----------------------------------------------------------------

@settings(BUDGET, max_examples=300)
@given(data=st.data(), command=st.sampled_from(["validate", "config", "render", "k8s"]), name=profile_names,
       sets=overrides, hf=secret_values, key=secret_values)
def test_profile_commands_keep_the_contract_for_any_override_and_flag(data: st.DataObject, command: str, name: str,
                                                                       sets: list[str], hf: str, key: str) -> None:
    argv = [command, name]
    for item in _with_secrets(sets, hf, data.draw):
        argv.append(f"--set={item}")
    if command in ("render", "k8s") and data.draw(st.booleans()):
        argv += data.draw(placement_flags()) if command == "render" else \
            [f"--name={data.draw(hostile_text)}", f"--shm-size={data.draw(hostile_text)}"]
    # render/k8s exit 0 print what the profile says, by design (an operator's own value in the serve command);
    # a refusal must never echo a secret.
    run_cli(command, argv, env={"HF_TOKEN": hf, "VLLM_API_KEY": key}, secrets=(hf, key),
            secret_ok_on_success=command in ("render", "k8s"))


ENV_GOOD: dict[str, st.SearchStrategy[str]] = {
    "APPLIANCE_PROFILE": st.sampled_from(["cpu-smoke-2node", "gb10-tp2", "cpu-smoke"]),
    "APPLIANCE_SET": st.lists(plausible_override(), max_size=2).map(";".join),
    "APPLIANCE_NODE_RANK": st.integers(-1, 3).map(str),
    "APPLIANCE_MASTER_ADDR": st.sampled_from(["10.0.0.1", "fd00::1", "head", "[fd00::2]", "10.0.0.256"]),
    "APPLIANCE_MASTER_PORT": st.integers(1000, 65536).map(str),
    "APPLIANCE_FABRIC_IFNAME": st.sampled_from(["eth0", "enp1s0f0np0", "ib0", "a" * 15, "a" * 16]),
    "APPLIANCE_HOST_IP": st.sampled_from(["10.0.0.2", "fd00::2", "host-b"]),
    "APPLIANCE_HEALTH_PORT": st.integers(0, 65536).map(str),
    "APPLIANCE_MODEL_DIR": st.sampled_from(["/models/x", "~/models/y", "relative/dir"]),
    "APPLIANCE_LOG_DIR": st.sampled_from(["/tmp/appliance-fuzz-logs", "~/logs"]),
    "APPLIANCE_RENDEZVOUS_TIMEOUT_S": st.floats(0, 100000).map(str),
}


@settings(BUDGET, max_examples=150)
@given(data=st.data(), hf=secret_values)
def test_appliance_env_values_keep_the_contract(data: st.DataObject, hf: str) -> None:
    env = {"HF_TOKEN": hf, "APPLIANCE_MASTER_ADDR": "10.0.0.1"}
    for var, good in ENV_GOOD.items():
        if data.draw(now_and_then(2)):  # unset, or left as above
            continue
        value = data.draw(mostly(good, env_text, 4))
        env[var] = f"{value}{hf}" if data.draw(now_and_then(8)) else value
    env.setdefault("APPLIANCE_PROFILE", "cpu-smoke-2node")
    command = data.draw(st.sampled_from(["render", "config", "validate"]))
    run_cli("env", [command], env=env, secrets=(hf,), secret_ok_on_success=command == "render")


@pytest.fixture(scope="module")
def engine_with_secrets() -> Iterator[str]:
    """A real process whose command line reads like an engine's and carries an API key: doctor names it."""
    import subprocess
    import sys

    key = "SxDoctorFuzzKey0099"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "vllm", "serve", "m",
                             "--api-key", key])
    yield key
    proc.kill()
    proc.wait()


@settings(BUDGET, max_examples=40)
@given(data=st.data(), sets=overrides, hf=secret_values)
def test_doctor_keeps_the_contract_and_never_shows_a_secret(data: st.DataObject, sets: list[str], hf: str,
                                                            engine_with_secrets: str) -> None:
    argv = ["doctor", "cpu-smoke", *(f"--set={item}" for item in _with_secrets(sets, hf, data.draw))]
    if data.draw(st.booleans()):
        argv.append("--json")
    run_cli("doctor", argv, env={"HF_TOKEN": hf}, secrets=(hf, engine_with_secrets), codes=(0, 1, 2))


# --- profile files ---------------------------------------------------------------------------------------------------

yaml_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), st.sampled_from(SPECIAL)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.one_of(st.sampled_from([*FIELD_PATHS, "extends", "name"]),
                                                         st.text(max_size=8)), children, max_size=4)),
    max_leaves=20)
BASE_TEXT = (ROOT / "profiles" / "cpu-smoke.yaml").read_text()


@st.composite
def profile_documents(draw: st.DrawFn) -> bytes:
    import yaml

    kind = draw(st.sampled_from(["structure", "insert", "replace-line", "bytes", "extends"]))
    if kind == "structure":
        return yaml.safe_dump(draw(yaml_values), allow_unicode=True).encode("utf-8", "surrogatepass")
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    lines = BASE_TEXT.splitlines(keepends=True)
    at = draw(st.integers(0, len(lines) - 1))
    piece = draw(hostile_text)
    if kind == "insert":
        lines.insert(at, piece + "\n")
    elif kind == "replace-line":
        head = lines[at].split(":", 1)[0]
        lines[at] = f"{head}: {piece}\n"
    else:
        lines.insert(0, f"extends: {draw(st.one_of(hostile_text, st.sampled_from(['[/etc/passwd]', '../x'])))}\n")
    return "".join(lines).encode("utf-8", "surrogatepass")


@settings(BUDGET, max_examples=300)
@given(doc=profile_documents(), command=st.sampled_from(["validate", "config"]), hf=secret_values)
def test_any_profile_file_keeps_the_contract(doc: bytes, command: str, hf: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzzed.yaml"
        path.write_bytes(doc.replace(b"SECRET", hf.encode()))
        run_cli("profile-file", [command, str(path)], env={"HF_TOKEN": hf}, secrets=(hf,))


# --- logscan ----------------------------------------------------------------------------------------------------------

LOG_LINES = (ROOT / "tests" / "fixtures" / "logs" / "cpu-smoke-serve.log").read_text().splitlines()
FATAL_TEMPLATES = ["ERROR EngineDeadError: request failed --api-key {s}",
                   "RuntimeError: CUDA error: an illegal memory access was encountered token={s}",
                   "torch.OutOfMemoryError: CUDA out of memory. Authorization: Bearer {s}",
                   "NCCL error: unhandled system error HF_TOKEN={s}",
                   "Check failed: num_tokens > 64 {s}",
                   "ModuleNotFoundError: No module named 'flashinfer' {s}"]


@st.composite
def serve_logs(draw: st.DrawFn, secret: str) -> bytes:
    # Half the logs are the real serve log with lines inserted, so a passing verdict is reachable too.
    parts: list[bytes] = [line.encode() for line in LOG_LINES] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["real", "real", "fatal", "text", "bytes", "long"]))
        if kind == "real":
            parts.append(draw(st.sampled_from(LOG_LINES)).encode())
        elif kind == "fatal":
            parts.insert(draw(st.integers(0, len(parts))),
                         draw(st.sampled_from(FATAL_TEMPLATES)).format(s=secret).encode())
        elif kind == "text":
            parts.append(draw(hostile_text).encode("utf-8", "surrogatepass"))
        elif kind == "bytes":
            parts.append(draw(st.binary(max_size=80)))
        else:
            parts.append(b"x" * draw(st.integers(60_000, 300_000)) + secret.encode())
    return b"\n".join(parts) + (b"\n" if draw(st.booleans()) else b"")


@settings(BUDGET, max_examples=150)
@given(data=st.data(), secret=secret_values, as_json=st.booleans(),
       profile=st.sampled_from(["cpu-smoke", "gb10-tp2", "cpu-smoke-2node"]))
def test_logscan_keeps_the_contract_for_any_log(data: st.DataObject, secret: str, as_json: bool,
                                                profile: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = []
        for i in range(2 if profile == "cpu-smoke-2node" else 1):
            log = Path(tmp) / f"rank{i}.log"
            log.write_bytes(data.draw(serve_logs(secret)))
            logs.append(str(log))
        argv = ["logscan", *logs, "--profile", profile] + (["--json"] if as_json else [])
        run_cli("logscan", argv, env={"VLLM_API_KEY": secret}, secrets=(secret,), codes=(0, 1))


# --- gate compare -----------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**64), max_value=2**64),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children,
                                                                               max_size=3)),
    max_leaves=8)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def receipts(draw: st.DrawFn, secret: str) -> str:
    r = good_receipt(tg=draw(st.floats(0, 100)), found=draw(st.integers(0, 24)))
    r["checks"][0]["summary"] = f"llama-benchy --api-key {secret}"
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(r)[1:]))
        parent = r
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    text = json.dumps(r)
    if draw(now_and_then(10)):
        cut = draw(st.integers(0, len(text)))
        text = text[:cut]
    return text


@settings(BUDGET, max_examples=300)
@given(data=st.data(), secret=secret_values, as_json=st.booleans())
def test_gate_compare_keeps_the_contract_for_any_receipts(data: st.DataObject, secret: str, as_json: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.json", Path(tmp) / "b.json"
        a.write_text(data.draw(receipts(secret)))
        b.write_text(data.draw(receipts(secret)))
        argv = ["gate", "compare", str(a), str(b)] + (["--json"] if as_json else [])
        result = run_cli("gate-compare", argv, env={"VLLM_API_KEY": secret}, secrets=(secret,), codes=(0, 1, 2))
        if as_json and result.code != 2:  # a judged number is always finite: NaN is never an improvement
            import math

            for f in json.loads(result.out)["findings"]:
                assert not any(isinstance(v, float) and not math.isfinite(v) for v in (f["a"], f["b"])), f


# --- run --dry-run: exactly the planned supervisor sections -----------------------------------------------------------

PLANNED = {"supervisord", "unix_http_server", "rpcinterface:supervisor", "supervisorctl", "program:vllm",
           "program:exporter", "program:logtail", "eventlistener:crashguard"}


@settings(BUDGET, max_examples=40)
@given(data=st.data(), sets=overrides, hf=secret_values)
def test_run_dry_run_writes_only_the_planned_programs(data: st.DataObject, sets: list[str], hf: str,
                                                     smoke_model_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--model-dir", str(smoke_model_dir),
                "--run-dir", str(Path(tmp) / "run")]
        argv += [f"--set={item}" for item in sets]
        if data.draw(st.booleans()):
            argv += data.draw(placement_flags())
        result = run_cli("run-dry-run", argv, env={"HF_TOKEN": hf, "APPLIANCE_HOME": str(Path(tmp) / "home")},
                         secrets=(hf,), secret_ok_on_success=True)
        conf = Path(tmp) / "run" / "supervisord.conf"
        if result.code == 0:
            sections = {line[1:-1] for line in conf.read_text().splitlines() if line.startswith("[")}
            assert sections == PLANNED, sections - PLANNED
            assert hf not in conf.read_text()  # secrets are inherited, never written
        else:
            assert not conf.exists()


# --- exporter: argument types and raw HTTP ----------------------------------------------------------------------------

@settings(BUDGET, max_examples=500)
@given(kind=st.sampled_from(["port", "rank", "seconds", "http_url", "bind_host", "peer", "log_file"]),
       text=hostile_text)
def test_exporter_argument_types_accept_or_refuse_cleanly(kind: str, text: str) -> None:
    import argparse

    from appliance.health import exporter_args

    FIGURES.inputs += 1
    FIGURES.per_area["exporter-args"] = FIGURES.per_area.get("exporter-args", 0) + 1
    with contextlib.suppress(argparse.ArgumentTypeError), time_limit(5):
        getattr(exporter_args, kind)(text)


@pytest.fixture(scope="module")
def exporter_url() -> Iterator[tuple[str, str]]:
    """The real exporter server and poll loop in-process; its log holds a fatal line with the secret."""
    from appliance.health.exporter import ExporterConfig, build_exporter
    from appliance.profile.loader import load_profile

    secret = "SxHttpFuzzSecret0042"
    saved = os.environ.get("VLLM_API_KEY")
    os.environ["VLLM_API_KEY"] = secret
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "vllm.log"
        log.write_text(f"ERROR EngineDeadError: boom with {secret} and Bearer {secret}\n")
        exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", interval=0.2,
                                                 stale_after=30, live_grace=3600, connection_timeout=1.0))
        stop = threading.Event()
        thread = threading.Thread(target=exporter.serve, args=(stop,), daemon=True)
        thread.start()
        yield f"127.0.0.1:{exporter.server.server_address[1]}", secret
        stop.set()
        thread.join(10)
    if saved is None:
        os.environ.pop("VLLM_API_KEY", None)
    else:
        os.environ["VLLM_API_KEY"] = saved


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    method = draw(st.one_of(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "BREW"]),
                            st.text(max_size=8)))
    path = draw(st.one_of(st.sampled_from(["/live", "/ready", "/startup", "/status", "/metrics", "/", "/status/",
                                           "/status?x=1", "//status", "/../../etc/passwd", "/%00", "*"]),
                          st.text(max_size=40).map(lambda s: "/" + s), st.just("/" + "a" * 70_000)))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "", "HTTP/1.1x"]))
    headers = draw(st.lists(st.builds(lambda k, v: f"{k}: {v}", st.text(string.ascii_letters, min_size=1,
                                                                         max_size=10), st.text(max_size=20)),
                            max_size=4))
    if draw(now_and_then(20)):
        headers += [f"X-{i}: y" for i in range(150)]  # over http.client's header limit
    body = draw(st.binary(max_size=100))
    head = f"{method} {path} {version}\r\n" + "".join(f"{h}\r\n" for h in headers)
    data = head.encode("utf-8", "surrogatepass") + b"\r\n" + body
    return data[: draw(st.integers(0, len(data)))] if draw(now_and_then(5)) else data


def _exchange(address: str, data: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


@settings(BUDGET, max_examples=250)
@given(request=raw_requests())
def test_the_exporter_answers_any_request_and_stays_up(exporter_url: tuple[str, str], request: bytes) -> None:
    address, secret = exporter_url
    FIGURES.inputs += 1
    FIGURES.per_area["exporter-http"] = FIGURES.per_area.get("exporter-http", 0) + 1
    began = time.monotonic()
    with time_limit(TIME_LIMIT_S):
        reply = _exchange(address, request)
        live = httpx.get(f"http://{address}/live", timeout=5)
    seconds = time.monotonic() - began
    if seconds > FIGURES.slowest_s:
        FIGURES.slowest_s, FIGURES.slowest = seconds, f"exporter-http: {request[:80]!r}"
    # Any reply at all (an HTTP/0.9-style request line gets a bare body, no status line), of bounded size.
    assert len(reply) < 1 << 20
    if secret.encode() in reply:
        FIGURES.leaks += 1
        pytest.fail(f"secret in the reply to {request[:200]!r}")
    assert live.status_code in (200, 503) and live.json()["state"] == "failed"  # up, and judging the fatal line
    assert threading.active_count() < 80
