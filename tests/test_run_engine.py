"""`appliance run cpu-smoke` against the REAL vLLM CPU engine under supervisord."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
from openai import OpenAI

from appliance.render.supervisord import STOP_WAIT_S
from tests.conftest import EARLIER_RUN, Serve, http_ok, render_json, start_serve, wait_for
from tests.hubdouble import safetensors_bytes


def counter(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def test_completion_and_chat_through_the_openai_client_and_counters_advance(smoke_serve: Serve) -> None:
    before = httpx.get(f"{smoke_serve.url}/metrics").text
    client = OpenAI(base_url=f"{smoke_serve.url}/v1", api_key="unused")
    completion = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=8)
    assert completion.choices[0].text.strip()
    chat = client.chat.completions.create(model="smollm2", max_tokens=8,
                                          messages=[{"role": "user", "content": "Say hello."}])
    assert chat.choices[0].message.content.strip()
    after = httpx.get(f"{smoke_serve.url}/metrics").text
    assert counter(after, "vllm:generation_tokens_total") >= counter(before, "vllm:generation_tokens_total") + 2
    assert counter(after, "vllm:prompt_tokens_total") > counter(before, "vllm:prompt_tokens_total")


def test_the_log_tail_prints_this_run_only_and_the_last_runs_logs_are_kept(smoke_serve: Serve) -> None:
    """The run folder held an earlier run's logs (conftest's smoke_serve): they moved aside before supervisord
    appended, so neither the container's stdout nor the exporter's log holds them, and the engine's own lines are
    on stdout (the log tail, `tail -n +1 -F`)."""
    first = (smoke_serve.run_dir / "vllm.log").read_text().splitlines()[0]  # this run's: the serve is healthy
    assert wait_for(lambda: first in smoke_serve.output.read_text(), timeout=30, interval=0.5), first
    out = smoke_serve.output.read_text()
    assert EARLIER_RUN not in out, out[:2000]
    assert "(the last run's: vllm.log.1)" in out
    for log in ("vllm.log", "exporter.log"):
        assert EARLIER_RUN not in (smoke_serve.run_dir / log).read_text()
        assert (smoke_serve.run_dir / f"{log}.1").read_text() == f"{EARLIER_RUN} ({log})\n"


def test_the_argv_supervisor_runs_is_the_rendered_plan(smoke_serve: Serve) -> None:
    plan = render_json(smoke_serve)
    pid = smoke_serve.program_pid("vllm")
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    argv = plan["argv"]
    assert isinstance(argv, list)
    # The console script runs under the interpreter: [python, /venv/bin/vllm, serve, ...].
    assert Path(cmdline[-len(argv)]).name == "vllm"
    assert cmdline[-len(argv) + 1:] == argv[1:]
    environ = dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if kv)
    assert {k: environ.get(k) for k in plan["env"]} == plan["env"]  # type: ignore[union-attr]


def test_the_one_rank_cpu_engine_is_two_processes_its_worker_inside_the_engine_core(smoke_serve: Serve) -> None:
    """W6 on the real engine: the API server and its engine core, which runs the worker itself (vLLM's own layout on
    the CPU build adds a worker process, whose imports cost ~15 s of each start)."""
    import psutil

    api = psutil.Process(smoke_serve.program_pid("vllm"))
    tracker = "from multiprocessing.resource_tracker import main"  # spawn's bookkeeping process, no engine part
    engine = [p for p in api.children(recursive=True) if not any(tracker in word for word in p.cmdline())]
    assert [p.name() for p in engine] == ["VLLM::EngineCore"], [(p.name(), p.cmdline()[:3]) for p in engine]
    assert engine[0].ppid() == api.pid and not engine[0].children()  # no worker beneath it


def test_sigkill_of_the_engine_is_restarted_and_serves_again_without_orphans(smoke_serve: Serve) -> None:
    pid = smoke_serve.program_pid("vllm")
    children = subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True).stdout.split()
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not http_ok(f"{smoke_serve.url}/health"), timeout=20, interval=0.5)
    assert wait_for(lambda: smoke_serve.program_pid("vllm") not in (0, pid), timeout=60)
    assert wait_for(lambda: http_ok(f"{smoke_serve.url}/health"), timeout=240, interval=2)
    # The old engine core (same process group) was reaped, not left holding memory.
    leftover = [c for c in children if Path(f"/proc/{c}").exists()]
    assert leftover == []
    client = OpenAI(base_url=f"{smoke_serve.url}/v1", api_key="unused")
    assert client.completions.create(model="smollm2", prompt="One, two,", max_tokens=4).choices[0].text


def test_sigterm_stops_every_process_within_the_stop_timeout(smoke_serve: Serve) -> None:
    sup = smoke_serve.proc.pid
    group = subprocess.run(["pgrep", "-s", str(sup)], capture_output=True, text=True).stdout.split()
    assert len(group) >= 4  # supervisord, engine (+ engine core), exporter, logtail, crashguard
    start = time.monotonic()
    smoke_serve.stop(timeout=90)
    assert smoke_serve.proc.returncode is not None

    def alive() -> list[str]:
        return [Path(f"/proc/{p}/cmdline").read_bytes()[:80].decode(errors="replace")
                for p in group if Path(f"/proc/{p}").exists()]

    # Engine core and workers finish their own shutdown after the API server exits; all within the stop timeout.
    wait_for(lambda: not alive(), timeout=STOP_WAIT_S["cpu"] - (time.monotonic() - start), interval=0.5)
    assert alive() == []
    assert time.monotonic() - start < STOP_WAIT_S["cpu"]


def test_a_missing_model_dir_is_refused_before_anything_starts(tmp_path: Path, smoke_model_dir: Path) -> None:
    serve = start_serve(tmp_path / "run", tmp_path / "no-such-model")
    assert serve.proc.wait(60) == 2
    out = serve.output.read_text()
    assert "APPLIANCE_MODEL_DIR" in out and "holds no config.json" in out and "Traceback" not in out
    assert not (tmp_path / "run" / "supervisord.conf").exists()


def test_an_engine_that_cannot_start_stops_the_serve_instead_of_looping(tmp_path: Path,
                                                                         smoke_model_dir: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["NoSuchForCausalLM"], "model_type": "nosuch"}')
    (broken / "model.safetensors").write_bytes(safetensors_bytes(16))  # weights, so W3 lets the engine try
    serve = start_serve(tmp_path / "run", broken)
    try:
        code = serve.proc.wait(300)
    finally:
        serve.stop()
    out = serve.output.read_text()
    assert "the engine cannot stay up" in out, out[-3000:]
    assert code is not None
