"""Two `appliance run` processes — head and headless worker of `cpu-smoke-2node` on two loopback
addresses — each under its own supervisord: the cross-node exchange, vLLM's own mp launcher, the
rendered argv and engine env on both ranks, and the worker turning unhealthy when its head goes (K22)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx

from appliance.render.plan import ENGINE_ENV_KEYS
from tests.conftest import (
    BIN,
    Rank,
    free_port,
    http_ok,
    master_port,
    start_rank,
    stop_supervisord,
    supervisorctl,
    wait_for,
    wait_for_ranks,
)


def proc_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(kv.split("=", 1) for kv in raw if "=" in kv)


def test_head_and_worker_appliance_runs_form_one_serve_and_the_worker_fails_when_the_head_goes(
        tmp_path: Path, smoke_model_dir: Path) -> None:
    api, master = free_port(), master_port()
    # The worker starts first: its rendezvous retries until the head answers.
    profile = "cpu-smoke-2node"
    worker, worker_env, worker_dir = start_rank(tmp_path, profile, smoke_model_dir, 1, "127.0.0.2", api, master)
    time.sleep(3)
    head, head_env, head_dir = start_rank(tmp_path, profile, smoke_model_dir, 0, "127.0.0.1", api, master)
    ranks = [Rank("rank 0 (head)", head, tmp_path / "rank0.out"),
             Rank("rank 1 (worker)", worker, tmp_path / "rank1.out")]
    try:
        wait_for_ranks(lambda: http_ok(f"http://127.0.0.1:{api}/health"), ranks, 420, "the head's API answered",
                       interval=2)
        assert "RUNNING" in supervisorctl(worker_dir, "status", "vllm")

        # What supervisor runs on each rank is that rank's rendered plan.
        for env, run_dir, rank in ((head_env, head_dir, 0), (worker_env, worker_dir, 1)):
            plan = json.loads(subprocess.run([str(BIN / "appliance"), "render", "--format", "json"], env=env,
                                             capture_output=True, text=True, check=True).stdout)
            pid = int(supervisorctl(run_dir, "pid", "vllm"))
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            assert cmdline[-len(plan["argv"]) + 1:] == plan["argv"][1:]
            assert plan["role"] == ("head" if rank == 0 else "worker")
            assert ("--headless" in cmdline) is (rank == 1)
            running = proc_env(pid)
            assert {k: running.get(k) for k in plan["env"]} == plan["env"]
        head_engine = {k: v for k, v in proc_env(int(supervisorctl(head_dir, "pid", "vllm"))).items()
                       if k in ENGINE_ENV_KEYS}
        worker_engine = {k: v for k, v in proc_env(int(supervisorctl(worker_dir, "pid", "vllm"))).items()
                         if k in ENGINE_ENV_KEYS}
        assert head_engine == worker_engine and head_engine

        # Natively a worker's exporter binds its APPLIANCE_HOST_IP, where the head asks it, and no other address.
        worker_exporter = f"http://127.0.0.2:{worker_env['APPLIANCE_HEALTH_PORT']}"
        assert json.loads((worker_dir / "launch.json").read_text())["exporter"]["host"] == "127.0.0.2"
        assert json.loads((head_dir / "launch.json").read_text())["exporter"]["host"] == "127.0.0.1"
        wait_for_ranks(lambda: http_ok(f"{worker_exporter}/ready"), ranks, 60, "the worker's exporter turned ready",
                       interval=2)

        # After launch the head's exporter compares what the ranks loaded (K15) through the worker's exporter,
        # whose address and port came with the rendezvous. The CPU build loads no NCCL: `unknown`, never a pass.
        head_status = f"http://127.0.0.1:{head_env['APPLIANCE_HEALTH_PORT']}/status"
        peer_url = f"http://127.0.0.2:{worker_env['APPLIANCE_HEALTH_PORT']}"
        assert json.loads((head_dir / "launch.json").read_text())["exporter"]["peers"] == {"1": peer_url}
        assert wait_for(lambda: httpx.get(head_status).json()["ranks"]["peers"][0]["state"] == "ready",
                        timeout=30, interval=1), httpx.get(head_status).json()["ranks"]
        ranks = httpx.get(head_status).json()["ranks"]
        assert [(p["rank"], p["url"], p["error"]) for p in ranks["peers"]] == [(1, peer_url, None)]
        # `vLLM is using nccl==` is printed by a group's rank 0 only (printed_by, issue 20): fewer than two ranks print
        # it, so the worker is not asked for it and there is no agreement to report (it would never turn known).
        assert not [a for a in ranks["agreements"] if a["fact"] == "nccl_version"], ranks["agreements"]

        stop_supervisord(head)
        # K22: the headless worker keeps running without its head; its health must say so.
        assert wait_for(lambda: not http_ok(f"{worker_exporter}/ready"), timeout=30, interval=1)
    finally:
        stop_supervisord(head)
        group = subprocess.run(["pgrep", "-s", str(worker.pid)], capture_output=True, text=True).stdout.split()
        started = time.monotonic()
        stop_supervisord(worker)
        wait_for(lambda: not [p for p in group if Path(f"/proc/{p}").exists()], timeout=60, interval=1)
        assert [p for p in group if Path(f"/proc/{p}").exists()] == []
        assert time.monotonic() - started < 90
