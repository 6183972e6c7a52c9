"""K24 on real processes: a REAL memory hog drives the host's MemAvailable down while the real cpu-smoke serve
runs under `appliance run` (supervisord, the exporter with its memory watchdog, the vLLM CPU engine).

Thresholds are set relative to MemAvailable when the test starts (the machine is shared), so the hog takes only
a few GiB and is bounded by MemAvailable itself: it stops allocating at `bound`, below the watchdog's floor, and
it is always freed. What must hold: the watchdog first takes the serve out of traffic, then stops the engine
cleanly while MemAvailable is still above the hog's bound; nothing else is killed (the hog, the exporter and
supervisord live on); and once the hog exits the engine is started again and serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from appliance.hostmem.sources import mem_available_gib
from tests.conftest import http_ok, start_serve, wait_for

HOG = r"""
import sys, threading, time
bound, cap, step, pause, hold = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), \
    float(sys.argv[5])
def avail():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024 / 1024
released = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), released.set()), daemon=True).start()
chunks = []
while len(chunks) * step < cap * 1024 and not released.is_set():
    a = avail()
    if a <= bound:
        print(json.dumps({"t": time.time(), "event": "bound", "held_mib": len(chunks) * step, "avail": a}), flush=True)
        break
    chunks.append(b"\x01" * (step << 20))  # written, so resident: not a lazily mapped zero page
    print(json.dumps({"t": time.time(), "event": "alloc", "held_mib": len(chunks) * step, "avail": a}), flush=True)
    time.sleep(pause)
print(json.dumps({"t": time.time(), "event": "hold", "held_mib": len(chunks) * step, "avail": avail()}), flush=True)
released.wait(hold)
""".replace("import sys,", "import json, sys,")


def status(url: str) -> dict:
    return httpx.get(f"{url}/status", timeout=5).json()


def events(url: str) -> list[dict]:
    memory = status(url).get("memory") or {}
    return list(memory.get("events") or [])


@pytest.mark.serial  # its thresholds are MemAvailable read at the start: a serve starting beside it would move them
def test_a_memory_hog_stops_the_engine_before_its_bound_and_the_serve_returns_when_it_exits(
        smoke_model_dir: Path, tmp_path: Path) -> None:
    base = mem_available_gib(Path("/proc"))
    assert base is not None and base > 10, f"MemAvailable {base} GiB: too little to run this test safely"
    not_ready, floor, bound = base - 5.5, base - 6.5, base - 7.5
    # The hog stops allocating at `bound` (MemAvailable) and holds: the engine must be stopped before that. With the
    # engine stopped (~2.5 GiB freed) and the hog holding, MemAvailable stays ~2 GiB under `resume`; once the hog
    # exits it is back near `base`.
    resume = base - 3.0
    sets = ["memory.watchdog=stop", f"memory.not_ready_below_gib={not_ready:.2f}",
            f"memory.stop_below_gib={floor:.2f}", f"memory.resume_above_gib={resume:.2f}", "memory.lead_s=1",
            "memory.recover_s=3"]
    serve = start_serve(tmp_path / "run", smoke_model_dir, *sets)
    timeline: list[dict] = []
    hog: subprocess.Popen[str] | None = None
    t0 = time.time()

    def mark(what: str, **more: object) -> None:
        timeline.append({"t": round(time.time() - t0, 2), "what": what,
                         "mem_available_gib": round(mem_available_gib(Path("/proc")) or -1, 2), **more})

    try:
        assert wait_for(lambda: http_ok(f"{serve.exporter}/ready"), timeout=240, interval=2), \
            serve.output.read_text()[-3000:]
        exporter_pid, engine_pid = serve.program_pid("exporter"), serve.program_pid("vllm")
        mark("serve ready", base=round(base, 2), not_ready=round(not_ready, 2), floor=round(floor, 2),
             resume=round(resume, 2), hog_bound=round(bound, 2))
        hog = subprocess.Popen([sys.executable, "-c", HOG, f"{bound:.3f}", "7", "128", "0.25", "300"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        mark("hog started", pid=hog.pid)
        stopped = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and stopped is None:
            evs = events(serve.exporter)
            stopped = next((e for e in evs if e["action"] == "engine-stopped"), None)
            ready = httpx.get(f"{serve.exporter}/ready", timeout=5)
            mark("poll", ready=ready.status_code, vllm=serve.ctl("status", "vllm").split()[1:2])
            time.sleep(0.5)
        assert stopped is not None, f"the watchdog never stopped the engine: {json.dumps(timeline)[-3000:]}"
        actions = [e["action"] for e in events(serve.exporter)]
        assert actions.index("level not-ready") < actions.index("engine-stopped") \
            or "falling at" in stopped["detail"], actions
        assert stopped["mem_available_gib"] > bound, f"engine stopped only at the hog's bound: {stopped}"
        assert stopped["detail"].startswith("K24"), stopped
        assert wait_for(lambda: "STOPPED" in serve.ctl("status", "vllm"), timeout=90, interval=1), \
            serve.ctl("status")
        mark("engine stopped", event=stopped)
        # Nothing else was killed: the hog, the exporter and supervisord live on; /ready says why it is not ready.
        assert hog.poll() is None, "the hog was killed"
        assert serve.proc.poll() is None and serve.program_pid("exporter") == exporter_pid
        not_ready_body = httpx.get(f"{serve.exporter}/ready", timeout=5)
        assert not_ready_body.status_code == 503
        assert any(r.startswith("K24 engine stopped by the memory watchdog") for r in not_ready_body.json()["reasons"])
        metrics = httpx.get(f"{serve.exporter}/metrics", timeout=5).text
        assert "appliance_memory_watchdog_engine_stopped 1.0" in metrics
        assert "appliance_memory_watchdog_engine_stops_total 1.0" in metrics
        with pytest.raises(ProcessLookupError):
            os.kill(engine_pid, 0)
        time.sleep(3)  # memory stays short while the hog holds: the engine must not come back
        assert "STOPPED" in serve.ctl("status", "vllm")
        mark("hog released")
        assert hog.stdin is not None
        hog.stdin.close()
        hog.wait(30)
        hog_log = [json.loads(line) for line in (hog.stdout.read() if hog.stdout else "").splitlines() if line]
        mark("hog exited", held_mib_max=max((h["held_mib"] for h in hog_log), default=0),
             hog_bound_reached=any(h["event"] == "bound" for h in hog_log))
        assert wait_for(lambda: any(e["action"] == "engine-started" for e in events(serve.exporter)), 60, 1), \
            events(serve.exporter)
        mark("engine started by the watchdog")
        assert wait_for(lambda: http_ok(f"{serve.exporter}/ready"), timeout=240, interval=2), status(serve.exporter)
        mark("serve ready again")
        answer = httpx.post(f"{serve.url}/v1/completions", timeout=60,
                            json={"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 4})
        assert answer.status_code == 200, answer.text
        mark("completion answered", text=answer.json()["choices"][0]["text"])
        assert "appliance_memory_watchdog_engine_restarts_total 1.0" in \
            httpx.get(f"{serve.exporter}/metrics", timeout=5).text
    finally:
        if hog is not None and hog.poll() is None:
            hog.kill()
            hog.wait(10)
        serve.stop()
        (tmp_path / "timeline.json").write_text(json.dumps({"timeline": timeline}, indent=1))
        if os.environ.get("APPLIANCE_EVIDENCE_DIR"):  # to keep a run's figures (docs/evidence/memory-watchdog-hog/)
            out = Path(os.environ["APPLIANCE_EVIDENCE_DIR"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "timeline.json").write_text(json.dumps({"timeline": timeline}, indent=1))
            for name in ("exporter.log", "supervisord.conf"):
                if (serve.run_dir / name).exists():
                    (out / name).write_text((serve.run_dir / name).read_text())
        print(json.dumps({"timeline": [t for t in timeline if t["what"] != "poll" or t.get("ready") != 200]},
                         indent=1))
