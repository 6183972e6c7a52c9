"""The seed's benchmark standard through the real `llama-benchy` (PyPI), parsed into a table.

llama-benchy tokenizes its corpus locally (`--tokenizer`, here the checkpoint's own folder when it is
on disk) and fetches the corpus from `--book-url`. Offline, the gate serves its own filler text on
loopback and gives llama-benchy a private HOME so its URL-keyed corpus cache does not pile up.
The `±` it prints is the spread inside one invocation: 5-30x smaller than build-to-build spread, so
the receipt keeps it but `gate compare` does not use it to call a difference real.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.gate import engine_steps
from appliance.gate.benchy_rows import row_name
from appliance.gate.context import GateContext
from appliance.gate.corpus import filler
from appliance.gate.receipt_model import BenchRow
from appliance.gate.result import CheckInterrupted, CheckResult, GateStatus, utc_now
from appliance.gate.sizing import BenchParams
from appliance.gate.tools import install_hint
from appliance.jsonstrict import JsonObject
from appliance.paths import venv_executable
from appliance.safe_write import open_for_writing, write_file

OFFLINE_CORPUS_CHARS = 300_000
MAX_CORPUS_BYTES = 64 << 20
"""A --bench-corpus file is a book (llama-benchy draws its prompts from it); far beyond this it is a mistake."""
"""About 75k tokens: the deepest standard request (32768 + 2048) fits twice; llama-benchy repeats it if not."""


# llama-benchy takes its key only as `--api-key`, where `ps` would show it for the whole run. Started by its
# own interpreter, it gets the key put into its sys.argv from the environment instead.
_KEY_FROM_ENV = ("import os, sys; sys.argv[1:1] = ['--api-key', os.environ['VLLM_API_KEY']]; "
                 "from llama_benchy.__main__ import main; sys.exit(main())")


def _interpreter(script: str) -> str:
    """The Python a console script runs under (its `#!` line), else this one."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode(errors="replace")
    except OSError:
        return sys.executable
    shebang = first[2:].strip() if first.startswith("#!") else ""
    return shebang if shebang and " " not in shebang and Path(shebang).is_file() else sys.executable


def launch(cmd: list[str]) -> list[str]:
    """How to start llama-benchy's argv CMD: as is, or, with VLLM_API_KEY set, with the key passed outside
    every command line."""
    if not os.environ.get("VLLM_API_KEY"):
        return cmd
    return [_interpreter(cmd[0]), "-c", _KEY_FROM_ENV, *cmd[1:]]


def argv(exe: str, ctx: GateContext, p: BenchParams, result_file: Path, book_url: str | None) -> list[str]:
    out = [exe, "--base-url", f"{ctx.url}/v1", "--model", ctx.checkpoint, "--served-model-name", ctx.model]
    if ctx.tokenizer:
        out += ["--tokenizer", ctx.tokenizer]
    out += ["--pp", *map(str, p.pp), "--tg", *map(str, p.tg), "--depth", *map(str, p.depth),
            "--runs", str(p.runs), "--concurrency", *map(str, p.concurrency)]
    if p.prefix_caching:
        out.append("--enable-prefix-caching")
    if book_url:
        out += ["--book-url", book_url]
    if p.skip_coherence:
        out.append("--skip-coherence")
    if p.no_cache:
        out.append("--no-cache")
    if p.exact_tg:
        out.append("--exact-tg")
    for entry in p.extra_body:
        out += ["--extra-body", entry]
    return [*out, "--format", "json", "--save-result", str(result_file)]


def _metric(run: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = run.get(key)
    return value if isinstance(value, dict) and isinstance(value.get("mean"), int | float) else None


def _row(test: str, kind: str, run: dict[str, Any], speed: str, **extra: Any) -> JsonObject:
    m = _metric(run, speed)
    row: JsonObject = {"test": test, "kind": kind, "depth": run.get("context_size", 0),
                       "concurrency": run.get("concurrency", 1),
                       "t_s": round(m["mean"], 2) if m else None, "t_s_std": round(m["std"], 2) if m else None,
                       "values": [round(v, 2) for v in m["values"]] if m else []}
    for name, key in extra.items():
        metric = _metric(run, key)
        row[name] = round(metric["mean"], 2) if metric else None
    return row


def parse_results(data: dict[str, Any]) -> list[JsonObject]:
    """Rows named as llama-benchy names them (`pp2048 @ d8192`, `ctx_tg @ d8192`, `tg128`) from its JSON."""
    rows = []
    multi = int(data.get("max_concurrency") or 1) > 1
    runs = data.get("benchmarks") or []
    several = len({r.get("prompt_size") for r in runs if not r.get("is_context_prefill_phase")}) > 1
    for run in runs:
        depth, c = run.get("context_size", 0), run.get("concurrency", 1)
        kinds = ("ctx_pp", "ctx_tg") if run.get("is_context_prefill_phase") else ("pp", "tg")
        prompt = run.get("prompt_size") if several else None
        names = ((row_name(kinds[0], run.get("prompt_size"), depth, c, multi), kinds[0]),
                 (row_name(kinds[1], run.get("response_size"), depth, c, multi, prompt), kinds[1]))
        (pp_name, pp_kind), (tg_name, tg_kind) = names
        if _metric(run, "pp_throughput"):
            rows.append(_row(pp_name, pp_kind, run, "pp_throughput", ttfr_ms="ttfr", est_ppt_ms="est_ppt",
                             e2e_ttft_ms="e2e_ttft"))
        if _metric(run, "tg_throughput") or _metric(run, "peak_throughput"):
            rows.append(_row(tg_name, tg_kind, run, "tg_throughput", peak_t_s="peak_throughput"))
    return rows


def table(rows: list[BenchRow]) -> str:
    """Markdown, in llama-benchy's columns."""
    def cell(value: float | None, std: float | None = None) -> str:
        if value is None:
            return ""
        return f"{value:.2f} ± {std:.2f}" if std is not None else f"{value:.2f}"

    lines = ["| test | t/s | peak t/s | ttfr (ms) | est_ppt (ms) | e2e_ttft (ms) |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.test} | {cell(r.t_s, r.t_s_std)} | {cell(r.peak_t_s)} | {cell(r.ttfr_ms)} | "
              f"{cell(r.est_ppt_ms)} | {cell(r.e2e_ttft_ms)} |" for r in rows]
    return "\n".join(lines)


@contextlib.contextmanager
def serve_file(path: Path) -> Iterator[str]:
    """A loopback HTTP server for llama-benchy's --book-url; yields the URL. It serves the file's whole
    folder: give it a folder holding only that file."""
    handler = functools.partial(_Quiet, directory=str(path.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="gate-corpus", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{path.name}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def corpus(p: BenchParams) -> Iterator[tuple[str | None, dict[str, str], JsonObject]]:
    """(book URL or None for llama-benchy's own, env overrides, provenance of the corpus)."""
    if p.corpus == "default":
        yield None, {}, {"corpus": "llama-benchy default book"}
        return
    with tempfile.TemporaryDirectory(prefix="gate-benchy-home-") as home:
        # Served from a folder of its own, never the user's folder nor the receipt's.
        book = Path(home) / "corpus" / "book.txt"
        book.parent.mkdir()
        if p.corpus == "builtin":
            write_file(book, filler(OFFLINE_CORPUS_CHARS), field="--bench-corpus")
            about = {"corpus": "builtin filler (appliance.gate.corpus)"}
        else:
            from appliance.paths import read_capped

            write_file(book, read_capped(Path(p.corpus), "--bench-corpus", MAX_CORPUS_BYTES, "corpus"),
                       field="--bench-corpus")
            about = {"corpus": str(Path(p.corpus))}
        # llama-benchy caches the corpus under ~/.cache keyed by URL; a loopback URL changes every run.
        from appliance.run.model_location import hf_home

        with serve_file(book) as url:
            yield url, {"HOME": home, "HF_HOME": str(hf_home())}, about


def _classify(rc: int, tail: list[str]) -> tuple[GateStatus, str]:
    text = "\n".join(tail)
    if "Coherence test FAILED" in text:
        line = next(line for line in tail if "Coherence test FAILED" in line)
        return "fail", f"llama-benchy's coherence test failed: {line.strip()[:200]}"
    if "Error downloading or processing book" in text:
        return "unavailable", ("llama-benchy could not fetch its corpus (offline?); run with --bench-corpus builtin "
                               "or --bench-corpus FILE")
    if "Error loading tokenizer" in text:
        return "error", "llama-benchy could not load the tokenizer; pass --tokenizer DIR (the checkpoint folder)"
    last = next((line for line in reversed(tail) if line.strip()), "")
    return "error", f"llama-benchy exited {rc}: {last.strip()[:200]}"


def failure(done: Invocation) -> tuple[GateStatus, str] | None:
    """Why a llama-benchy run measured nothing it can stand behind, or None when it exited 0 with rows."""
    if done.rc == 0 and done.rows:
        return None
    return _classify(done.rc, done.tail) if done.rc != 0 else ("error", "llama-benchy produced no rows")


def _result(status: GateStatus, summary: str, p: BenchParams, cmd: list[str], rows: list[JsonObject],
            about: JsonObject, raw: dict[str, Any] | None, started: str, began: float) -> CheckResult:
    return CheckResult("bench", status, summary, started_at=started, seconds=time.monotonic() - began,
                       params={"pp": list(p.pp), "tg": list(p.tg), "depth": list(p.depth), "runs": p.runs,
                               "concurrency": list(p.concurrency), "prefix_caching": p.prefix_caching,
                               **{k: v for k, v in about.items() if k != "spec_decode"}},
                       metrics={"rows": rows, "spec_decode": about.get("spec_decode")},
                       details={"argv": cmd, "llama_benchy_version": (raw or {}).get("version"),
                                "latency_mode": (raw or {}).get("latency_mode"),
                                "latency_ms": (raw or {}).get("latency_ms")})


def _summary(rows: list[JsonObject]) -> str:
    def first(kind: str) -> str:
        r = next((r for r in rows if r["kind"] == kind and r["t_s"] is not None), None)
        return f"{r['test']} {r['t_s']:.1f} t/s" if r else ""

    return ", ".join(x for x in (first("pp"), first("tg"), first("ctx_pp")) if x) + f" ({len(rows)} rows)"


@dataclass
class Invocation:
    """One llama-benchy run: its argv, exit, last lines, whether Ctrl-C ended it, its JSON and the rows parsed."""
    cmd: list[str]
    rc: int
    tail: list[str]
    interrupted: bool
    raw: Any
    rows: list[JsonObject]
    about: JsonObject


def invoke(ctx: GateContext, p: BenchParams, exe: str, stem: str = "llama-benchy") -> Invocation:
    """Run llama-benchy once with `p`, its JSON and log as STEM.json / STEM.log in the receipt folder."""
    result_file = ctx.out_dir / f"{stem}.json"
    result_file.unlink(missing_ok=True)
    log = ctx.out_dir / f"{stem}.log"
    with corpus(p) as (url, env_extra, about):
        cmd = argv(exe, ctx, p, result_file, url)
        env = {**os.environ, **env_extra, "PYTHONUNBUFFERED": "1"}
        rc, tail, interrupted = _drive(launch(cmd), env, log, ctx, p.timeout_s)
    raw = _tool_json(result_file)
    return Invocation(cmd, rc, tail, interrupted, raw, parse_results(raw) if raw else [], about)


def run(ctx: GateContext) -> CheckResult:
    p = ctx.params.bench
    started, began = utc_now(), time.monotonic()
    exe = venv_executable("llama-benchy")
    if exe is None:
        return _result("unavailable", f"llama-benchy is not installed here ({install_hint('llama-benchy')})", p,
                       [], [], {}, None, started, began)
    before = engine_steps.scrape(ctx.url)
    done = invoke(ctx, p, exe)
    cmd, rc, tail, interrupted, raw = done.cmd, done.rc, done.tail, done.interrupted, done.raw
    spec = engine_steps.acceptance(before, engine_steps.scrape(ctx.url))
    about = {**done.about, "spec_decode": spec}
    rows = engine_steps.with_verify_steps(done.rows, spec["mean_acceptance_length"] if spec else None)
    if interrupted:
        raise CheckInterrupted(_result("interrupted", f"interrupted; {len(rows)} row(s) measured before Ctrl-C",
                                       p, cmd, rows, about, raw, started, began))
    if rc == 0 and rows:
        return _result("pass", _summary(rows), p, cmd, rows, about, raw, started, began)
    status, why = _classify(rc, tail) if rc != 0 else ("error", "llama-benchy produced no rows")
    result = _result(status, why, p, cmd, rows, about, raw, started, began)
    result.details["timed_out"] = rc == 124  # _drive's own bound (p.timeout_s) ran out
    return result


def _tool_json(path: Path) -> Any:
    """llama-benchy's result file: strict JSON, bounded; None when it wrote none (or none this reader takes)."""
    from appliance.errors import ApplianceError
    from appliance.jsonstrict import load_file

    if not path.is_file():
        return None
    try:
        return load_file(path, "llama-benchy result", 64 << 20, "llama-benchy result")
    except ApplianceError:
        return None


def _drive(cmd: list[str], env: dict[str, str], log: Path, ctx: GateContext,
           timeout: float) -> tuple[int, list[str], bool]:
    """Run llama-benchy in its own session (Ctrl-C reaches it through us, once), stream its progress lines."""
    tail: deque[str] = deque(maxlen=80)
    with open_for_writing(log, field="--out") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                tail.append(line.rstrip())
                if line.startswith("Running test:") or "Coherence test" in line:
                    ctx.progress.step(line.strip())

        reader = threading.Thread(target=pump, name="gate-benchy-out", daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            reader.join(5)
            return 124, [*tail, f"timed out after {timeout:.0f} s"], False
        except KeyboardInterrupt:
            _stop(proc)  # llama-benchy saves its partial table on SIGINT
            reader.join(5)
            return 130, list(tail), True
        reader.join(5)
    return rc, list(tail), False


def _stop(proc: subprocess.Popen[str]) -> None:
    # SIGINT first: llama-benchy then saves its partial table. A gate started in the background inherits
    # SIGINT ignored (and so does llama-benchy): SIGTERM, then SIGKILL, bound the wait.
    for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
