"""A port that is taken is reported with the process that holds it (procfs), or with why that cannot be told.

Seen from a fresh clone: rank 0 said only "cannot listen on rendezvous port 39788: Address already in use"."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance import port_holder
from tests.conftest import BIN, Rank, free_port, master_port, wait_for_ranks

HOLD = ("import socket, sys, time; s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET); "
        "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print('listening', flush=True); time.sleep(600)")


@pytest.fixture
def holder() -> Iterator[Callable[[str, int], subprocess.Popen[str]]]:
    """Start a process that listens on (address, port) and keeps it: another serve, a stale run."""
    procs: list[subprocess.Popen[str]] = []

    def hold(address: str, port: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, address, str(port)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        procs.append(proc)
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait(10)


def test_a_head_whose_rendezvous_port_is_held_names_the_holder_and_the_ranks_fail_within_seconds(
        tmp_path: Path, holder) -> None:
    """Two `appliance run` ranks (dry run: no engine) whose master port + 1 another process holds: the head
    exits at once naming that process, and the test fails on the head's exit, not after the worker's 600 s."""
    master = master_port()
    other = holder("0.0.0.0", master + 1)
    base = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    base |= {"APPLIANCE_HOME": str(tmp_path / "home"), "APPLIANCE_RENDEZVOUS_TIMEOUT_S": "600",
             "PATH": f"{BIN}:{base.get('PATH', '')}"}
    ranks = []
    for rank, ip in ((1, "127.0.0.2"), (0, "127.0.0.1")):
        out = tmp_path / f"rank{rank}.out"
        proc = subprocess.Popen([str(BIN / "appliance"), "run", "cpu-smoke-2node", "--dry-run", "--skip-doctor",
                                 "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(master),
                                 "--run-dir", str(tmp_path / f"run{rank}")],
                                env=base | {"APPLIANCE_HOST_IP": ip}, stdout=out.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        ranks.append(Rank(f"rank {rank}", proc, out))
    start = time.monotonic()
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            wait_for_ranks(lambda: False, ranks, 600, "the serve came up")
    finally:
        for r in ranks:
            r.proc.kill()
            r.proc.wait(10)
    assert time.monotonic() - start < 90
    message = str(failed.value)
    assert message.startswith("rank 0 exited (status 2)")
    assert f"the head cannot listen on rendezvous port {master + 1}" in message
    assert f"pid {other.pid} ({sys.executable} -c import socket" in message
    assert f"holds it: LISTEN 0.0.0.0:{master + 1}" in message
    assert "--- rank 1 (still running: True) ---" in message  # the worker, still waiting: its output shown too


def test_the_exporter_names_the_process_on_its_port(tmp_path: Path, holder) -> None:
    port = free_port()
    other = holder("127.0.0.1", port)
    log = tmp_path / "vllm.log"
    log.write_text("")
    done = subprocess.run([str(BIN / "appliance"), "exporter", "--profile", "cpu-smoke", "--log", str(log),
                           "--no-engine", "--host", "127.0.0.1", "--port", str(port)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; port {port}: pid {other.pid}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_listener_on_ipv6_loopback_is_found_in_tcp6(holder) -> None:
    port = free_port()
    other = holder("::1", port)
    assert f"pid {other.pid} (" in port_holder.describe(port)
    assert f"LISTEN [::1]:{port}" in port_holder.describe(port)


def fake_procfs(tmp_path: Path, tcp: str = "", tcp6: str = "", fds: dict[int, list[str]] | None = None) -> Path:
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (root / "net" / "tcp").write_text(header + tcp)
    (root / "net" / "tcp6").write_text(header + tcp6)
    for pid, links in (fds or {}).items():
        fd = root / str(pid) / "fd"
        fd.mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"vllm\0serve\0--port\0" + str(pid).encode() + b"\0")
        for i, target in enumerate(links):
            (fd / str(i)).symlink_to(target)
    return root


# Port 29501 is 0x733D; 127.0.0.1 is 0100007F in the kernel's word order.
LISTEN_ROW = "   0: 0100007F:733D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1\n"
V6_ROW = ("   0: 00000000000000000000000001000000:733D 00000000000000000000000000000000:0000 0A 00000000:00000000 "
          "00:00000000 00000000     0        0 777 1\n")


def test_a_socket_no_visible_process_has_open_is_said_to_be_another_pid_namespaces(tmp_path: Path) -> None:
    procfs = fake_procfs(tmp_path, tcp=LISTEN_ROW, fds={12: ["socket:[99]"]})
    text = port_holder.describe(29501, procfs)
    assert "a socket LISTEN 127.0.0.1:29501 of uid 1000 belongs to no process this user can see" in text
    assert "another PID namespace" in text


def test_the_process_whose_fd_points_at_the_sockets_inode_is_named_with_its_command(tmp_path: Path) -> None:
    procfs = fake_procfs(tmp_path, tcp6=V6_ROW, fds={12: ["/dev/null"], 31: ["pipe:[5]", "socket:[777]"]})
    said = port_holder.describe(29501, procfs)
    assert said == "port 29501: pid 31 (vllm serve --port 31) holds it: LISTEN [::1]:29501"


def test_a_time_wait_remnant_and_a_gone_holder_and_no_procfs_are_each_said(tmp_path: Path) -> None:
    wait = LISTEN_ROW.replace(" 0A ", " 06 ").replace(" 4242 ", " 0 ")
    assert "1 connection(s) without a process (TIME_WAIT" in port_holder.describe(29501, fake_procfs(tmp_path, wait))
    assert "any more: its holder has just let it go" in port_holder.describe(29502, fake_procfs(tmp_path / "b"))
    assert "cannot be read" in port_holder.describe(29501, tmp_path / "nowhere")
