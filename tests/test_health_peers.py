"""The head's cross-rank NCCL comparison after launch (K15), with real exporter processes per rank.

The serve logs are DeepSeek excerpts built from vLLM's format strings (fixtures/logs/deepseek/README.md):
the test double for what only an SM12x pair prints. The exporters, their HTTP exchange and the
comparison are the real ones. The CPU build loads no NCCL, so the two-rank `appliance run` test
(test_multinode_appliance_run.py) shows the same wiring ending in `unknown`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from appliance.errors import ApplianceError
from appliance.health.peers import agreement, agreements, compared_facts, parse_peer
from appliance.health.table import load_table
from tests.conftest import free_port, wait_for
from tests.in_process import run_main

LOGS = Path(__file__).parent / "fixtures" / "logs" / "deepseek"


def test_the_table_names_the_facts_compared_across_ranks() -> None:
    assert compared_facts(load_table()) == {"nccl_version": "K15", "nccl_lib_version": "K15", "nccl_cuda": "K15"}


def test_a_fact_agrees_only_when_every_rank_reported_the_same_value() -> None:
    assert agreement("K15", "nccl_version", {"rank 0": "2.30.7", "rank 1": ["2.30.7"]}).status == "pass"
    fail = agreement("K15", "nccl_version", {"rank 0": "2.30.7", "rank 1": "2.27.3"})
    assert fail.status == "fail" and "(rank 0 2.30.7, rank 1 2.27.3)" in fail.message and "fix:" in fail.message
    unknown = agreement("K15", "nccl_version", {"rank 0": "2.30.7", "rank 1": None})
    assert unknown.status == "unknown" and "not reported by rank 1" in unknown.message  # never a silent pass
    assert agreement("K15", "nccl_version", {"rank 0": None, "rank 1": []}).status == "unknown"
    # Two workers of one rank that loaded different NCCLs disagree too.
    assert agreement("K15", "nccl_version", {"rank 0": ["2.30.7", "2.28.9"], "rank 1": "2.30.7"}).status == "fail"


def test_a_fact_only_one_rank_can_print_is_not_compared_and_the_rest_are() -> None:
    """printed_by: on two GB10s only rank 0 prints `vLLM is using nccl==`; rank 1's silence is no disagreement and no
    `unknown` forever. NCCL's own banner, which both print, carries the comparison."""
    compared = {"nccl_version": "K15", "nccl_lib_version": "K15"}
    per_rank = {"rank 0": {"nccl_version": ["2.30.7"], "nccl_lib_version": ["2.30.7"]},
                "rank 1": {"nccl_lib_version": ["2.30.7"]}}
    printed = {"rank 0": {"nccl_version", "nccl_lib_version"}, "rank 1": {"nccl_lib_version"}}
    (only,) = agreements(compared, per_rank, printed)
    assert (only.fact, only.status) == ("nccl_lib_version", "pass")
    blind = {a.fact: a.status for a in agreements(compared, per_rank)}  # the mutant: every rank asked for every fact
    assert blind["nccl_version"] == "unknown"


@pytest.mark.parametrize("text", ["1", "0=http://10.0.0.2:8470", "x=http://h:1", "1=10.0.0.2:8470"])
def test_a_bad_peer_names_the_flag_the_value_and_the_form(text: str) -> None:
    with pytest.raises(ApplianceError) as err:
        parse_peer(text)
    assert err.value.field == "--peer" and err.value.value == text and "RANK=URL" in str(err.value.fix)


def test_a_peer_is_a_rank_and_a_base_url() -> None:
    assert parse_peer("2=http://[fd00::2]:8470/") == (2, "http://[fd00::2]:8470")


@contextmanager
def exporter(log: str, rank: int, *peers: str) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "appliance", "exporter", "gb10-tp2", "--log", str(LOGS / log), "--no-engine",
            "--host", "127.0.0.1", "--port", str(port), "--node-rank", str(rank), "--interval", "0.3",
            "--peer-interval", "0.3"]
    for peer in peers:
        argv += ["--peer", peer]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: httpx.get(f"{url}/status", timeout=2).status_code == 200, 30, 0.2), \
            proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else "exporter did not answer"
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def status(url: str) -> dict:
    return httpx.get(f"{url}/status", timeout=5).json()


def nccl(body: dict) -> dict:
    """NCCL's own banner: every rank prints it (NCCL_DEBUG=INFO); vLLM's `nccl==` line is rank 0's alone, so it is
    not compared on two GB10s (only one rank can say it)."""
    facts = [a["fact"] for a in body["ranks"]["agreements"]]
    assert "nccl_version" not in facts, facts
    return next(a for a in body["ranks"]["agreements"] if a["fact"] == "nccl_lib_version")


def ranks_settled(url: str, want: str) -> dict:
    assert wait_for(lambda: nccl(status(url))["status"] == want, 20, 0.2), status(url)["ranks"]
    return status(url)


def test_a_pair_that_loaded_the_same_nccl_passes_and_a_vanished_worker_keeps_its_last_answer() -> None:
    with ExitStack() as worker_stack:
        worker = worker_stack.enter_context(exporter("gb10-tp2-dspark-worker.log", 1))
        with exporter("gb10-tp2-dspark-head.log", 0, f"1={worker}") as head:
            body = ranks_settled(head, "pass")
            assert nccl(body)["message"] == "K15 nccl_lib_version is 2.30.7 on every rank"
            (peer,) = body["ranks"]["peers"]
            assert (peer["rank"], peer["url"], peer["state"]) == (1, worker, "ready")
            assert peer["facts"]["nccl_lib_version"] == ["2.30.7"]
            assert httpx.get(f"{head}/ready", timeout=5).status_code == 200
            metrics = httpx.get(f"{head}/metrics").text
            assert 'appliance_ranks_agreement{fact="nccl_lib_version",rule="K15",status="pass"} 1.0' in metrics

            worker_stack.close()  # the worker's exporter goes: the head says so and keeps what it heard
            assert wait_for(lambda: status(head)["ranks"]["peers"][0]["error"], 20, 0.2)
            peer = status(head)["ranks"]["peers"][0]
            assert peer["facts"]["nccl_lib_version"] == ["2.30.7"] and peer["state"] is None
            assert nccl(status(head))["status"] == "pass"


def test_a_worker_that_loaded_another_nccl_keeps_the_head_from_ready_naming_both_versions() -> None:
    with exporter("nccl-mismatch-worker.log", 1) as worker, \
            exporter("gb10-tp2-dspark-head.log", 0, f"1={worker}") as head:
        body = ranks_settled(head, "fail")
        assert "nccl_lib_version differs between ranks (rank 0 2.30.7, rank 1 2.27.3)" in nccl(body)["message"]
        assert body["state"] == "degraded"  # the head's own log says ready; the pair does not agree
        ready = httpx.get(f"{head}/ready", timeout=5)
        assert ready.status_code == 503
        assert any(r.startswith("K15 nccl_lib_version differs between ranks") for r in ready.json()["reasons"])
        metrics = httpx.get(f"{head}/metrics").text
        assert 'appliance_ranks_agreement{fact="nccl_lib_version",rule="K15",status="fail"} 1.0' in metrics


def test_a_worker_exporter_that_never_answers_is_unknown_and_does_not_block_the_head() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with exporter("gb10-tp2-dspark-head.log", 0, f"1={closed}") as head:
        body = ranks_settled(head, "unknown")
        assert "not reported by rank 1" in nccl(body)["message"]
        assert body["ranks"]["peers"][0]["error"].startswith("ConnectError")
        assert httpx.get(f"{head}/ready", timeout=5).status_code == 200


@pytest.mark.parametrize(("argv", "named"), [
    (["--node-rank", "0", "--peer", "one=http://h:1"], "--peer"),
    (["--node-rank", "1", "--peer", "2=http://127.0.0.1:1"], "--peer is for the head"),
])
def test_the_exporter_refuses_a_bad_peer_with_exit_2_and_no_traceback(argv: list[str], named: str) -> None:
    r = run_main(["exporter", "gb10-tp2", "--log", str(LOGS / "gb10-tp2-dspark-head.log"), "--no-engine", "--port",
                  str(free_port()), *argv], limit_s=60)  # in-process: refused before it serves
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr


def test_the_head_asks_its_workers_all_at_once_so_dead_hosts_do_not_add_up() -> None:
    """Every worker's exporter answers only once all four requests are in flight together (a barrier): asked
    one after another, each would wait out its timeout and the head's poll loop would grow with the node count."""
    import http.server
    import json
    import threading
    import time

    from appliance.health.peers import PeerWatch

    together = threading.Barrier(4, timeout=5)

    class Worker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                together.wait()
                body = json.dumps({"state": "ready", "facts": {"nccl_version": "2.30.7"}}).encode()
                self.send_response(200)
            except threading.BrokenBarrierError:
                body = b"{}"
                self.send_response(504)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    watch = PeerWatch({rank: url for rank in range(1, 5)}, {"nccl_version": "K15"}, clock=time.monotonic, timeout=10)
    try:
        cross = watch.check({"nccl_version": "2.30.7"})
    finally:
        watch.close()
        server.shutdown()
    assert [p.error for p in cross.peers] == [None] * 4 and [p.state for p in cross.peers] == ["ready"] * 4
    assert [a.status for a in cross.agreements] == ["pass"]
