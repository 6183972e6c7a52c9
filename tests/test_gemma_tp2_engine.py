"""The GB10 two-node shape on the CPU build, for real: two `appliance run` processes (head on 127.0.0.1, headless
worker on 127.0.0.2), each under its own supervisord, tensor parallel 2 through vLLM's own mp launcher, serving
Gemma 3 270M (4 heads, 1 KV head: TP=2 divides it; SmolLM2's 9 heads do not). Live on both ranks: the
rendezvous (identity incl. the K25 fingerprint), the K25 fabric qualification over Gloo, the K23 admission,
the K24 watchdog, and the head's cross-rank checks through the worker's exporter. It answers requests."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    Rank,
    free_port,
    http_ok,
    master_port,
    start_rank,
    stop_supervisord,
    supervisorctl,
    wait_for_ranks,
)


@pytest.fixture(scope="session")
def gemma_model_dir(vllm_engine: Path) -> Path:
    """Gemma 3 270M for the engine: only a test that serves it asks for it."""
    from appliance.gemma_model import prepare_gemma_model

    return prepare_gemma_model()


def complete(api: int, prompt: str) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{api}/v1/completions", timeout=120,
                      json={"model": "gemma3", "prompt": prompt, "max_tokens": 6, "temperature": 0})


def test_tensor_parallel_two_ranks_on_two_addresses_answer_with_every_check_live(
        tmp_path: Path, gemma_model_dir: Path) -> None:
    api, master, head_health, worker_health = free_port(), master_port(), free_port(), free_port()
    profile = "cpu-gemma-tp2-2node"
    worker, _, _ = start_rank(tmp_path, profile, gemma_model_dir, 1, "127.0.0.2", api, master, worker_health)
    time.sleep(2)
    head, _, _ = start_rank(tmp_path, profile, gemma_model_dir, 0, "127.0.0.1", api, master, head_health)
    ranks = [Rank("rank 0 (head)", head, tmp_path / "rank0.out"),
             Rank("rank 1 (worker)", worker, tmp_path / "rank1.out")]
    try:
        wait_for_ranks(lambda: http_ok(f"http://127.0.0.1:{api}/health"), ranks, 480, "the head's API answered")
        for r in (0, 1):
            start = (tmp_path / f"rank{r}.out").read_text()
            assert "appliance run: fabric pass over gloo (rank 1: " in start, start[-2000:]
            assert "K23 needs" in start
            pid = int(supervisorctl(tmp_path / f"rank{r}", "pid", "vllm"))
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            assert cmdline[cmdline.index("--tensor-parallel-size") + 1] == "2"
            assert ("--headless" in cmdline) is (r == 1)

        answers = [complete(api, "The capital of France is")]
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers += list(pool.map(lambda i: complete(api, f"Question {i}: what is 2+{i}? Answer:"), range(3)))
        for a in answers:
            assert a.status_code == 200, a.text
            assert a.json()["usage"]["completion_tokens"] == 6 and a.json()["choices"][0]["text"].strip()

        # A worker's exporter binds its APPLIANCE_HOST_IP natively: where the head asks it, and no other address.
        head_url, worker_url = f"http://127.0.0.1:{head_health}", f"http://127.0.0.2:{worker_health}"
        wait_for_ranks(lambda: http_ok(f"{head_url}/ready") and http_ok(f"{worker_url}/ready"), ranks, 90,
                       "both exporters turned ready", interval=2)
        for url, role in ((head_url, "head"), (worker_url, "worker")):
            status = httpx.get(f"{url}/status", timeout=5).json()
            assert status["role"] == role and status["state"] == "ready"
            assert status["fabric"]["verdict"] == "pass" and status["fabric"]["backend"] == "gloo"
            assert status["fabric"]["peers"]["1"]["bandwidth_gbps"] > 0
            assert status["memory"]["rule"] == "K24" and status["memory"]["mem_available_gib"] > 0
        ranks = httpx.get(f"{head_url}/status", timeout=5).json()["ranks"]
        assert [(p["rank"], p["state"], p["error"]) for p in ranks["peers"]] == [(1, "ready", None)]
        metrics = httpx.get(f"{head_url}/metrics", timeout=5).text
        assert 'appliance_fabric_qualification{backend="gloo",rule="K25",verdict="pass"} 1.0' in metrics
        assert 'appliance_fabric_bandwidth_bytes_per_second{peer="1"}' in metrics
    finally:
        stop_supervisord(head)
        stop_supervisord(worker)
