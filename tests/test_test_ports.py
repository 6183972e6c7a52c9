"""The ports tests give servers (tests/ports.py): below the ephemeral range, with the ports a serve derives from
a master port, reserved against every other test process on the machine until the engine has bound them."""

from __future__ import annotations

import fcntl
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.bounds import MODEL_SYNC_PORT_OFFSET, QUALIFY_PORT_OFFSET, RENDEZVOUS_PORT_OFFSET
from tests import conftest, ports
from tests.conftest import ROOT, free_port, master_port

# A child that reserves every port of a small range, says which, and holds them until its stdin closes.
HOLD_ALL = ("import sys; sys.path.insert(0, sys.argv[1]); from tests import ports; r = range(int(sys.argv[2]), "
            "int(sys.argv[3])); got = []\n"
            "while True:\n"
            "    try:\n        got.append(ports.reserve(candidates=r))\n"
            "    except RuntimeError:\n        break\n"
            "print(' '.join(map(str, got)), flush=True); sys.stdin.read()")


def locked_elsewhere(port: int) -> bool:
    """Whether another open of the port's lock file is refused (flock: one holder per lock file)."""
    with (ports.LOCK_DIR / str(port)).open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def claimable(candidates: range, count: int) -> list[int]:
    """`count` ports of `candidates` that reserve could hand out now: one process runs the whole suite, so the
    ports earlier tests were handed stay refused to it, and a server an earlier test stopped can leave its port in
    TIME_WAIT; a test that picked its ports blind failed on that (a CI run: "no 1 free consecutive port(s) in
    28920-28921")."""
    found = [p for p in candidates if not ports.handed_out(p) and not locked_elsewhere(p) and ports.bindable(p)]
    assert len(found) >= count, f"fewer than {count} claimable ports in {candidates}: {found}"
    return found[:count]


def test_ports_lie_below_the_kernels_ephemeral_range_where_no_connection_takes_its_source_port():
    low, _ = ports.ephemeral_range()
    master = master_port()
    assert ports.FLOOR <= free_port() < low
    assert ports.FLOOR <= master < master + ports.MASTER_SPAN - 1 < low


def test_a_master_port_comes_with_its_rendezvous_fabric_and_model_sync_ports_reserved_and_free():
    master = master_port()
    for port in (master, *(master + off for off in (RENDEZVOUS_PORT_OFFSET, QUALIFY_PORT_OFFSET,
                                                    MODEL_SYNC_PORT_OFFSET))):
        assert locked_elsewhere(port), port
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))  # nothing is bound there


def test_a_port_another_test_process_holds_is_never_handed_out_until_that_process_ends():
    """Without the cross-process lock, both processes would hand out the same ports (each sees them free)."""
    top = ports.candidate_range().stop
    low = claimable(range(top - 200, top - 100), 1)[0]
    child = subprocess.Popen([sys.executable, "-c", HOLD_ALL, str(ROOT), str(low), str(low + 1)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    held = [int(p) for p in child.stdout.readline().split()]
    try:
        assert held  # the child got what no one else held
        with pytest.raises(RuntimeError, match="no 1 free consecutive port"):
            ports.reserve(candidates=held)
    finally:
        child.stdin.close()
        child.wait(30)
    assert ports.reserve(candidates=held) in held  # its locks died with it


def test_a_port_something_listens_on_is_skipped_and_none_is_handed_out_twice():
    top = ports.candidate_range().stop
    busy, free = claimable(range(top - 80, top - 60), 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", busy))
        s.listen()
        assert ports.reserve(candidates=[busy, free]) == free
    with pytest.raises(RuntimeError):
        ports.reserve(candidates=[free])  # already handed out in this process, even if released later


def test_a_reservation_ends_with_the_fixture_or_test_that_made_it():
    ports.push_owner()
    port = ports.reserve()
    assert locked_elsewhere(port)
    ports.release(ports.pop_owner())
    assert not locked_elsewhere(port)


@pytest.fixture(scope="module")
def module_port() -> int:
    return free_port()


def test_a_module_fixtures_port_stays_reserved_when_a_test_ends_and_the_tests_own_port_does_not(
        module_port: int, request: pytest.FixtureRequest) -> None:
    """The end of a test (conftest's pytest_runtest_call wrapper, driven here as pytest drives it) releases what
    the test body reserved and nothing a longer-lived fixture holds: in one test, so no order between tests or
    split across processes can make it pass untested."""
    assert locked_elsewhere(module_port)
    wrapper = conftest.pytest_runtest_call(request.node)
    next(wrapper)  # a test starts
    own = free_port()
    assert locked_elsewhere(own)
    with pytest.raises(StopIteration):
        wrapper.send(None)  # ... and ends
    assert not locked_elsewhere(own)
    assert locked_elsewhere(module_port)


def test_no_room_below_the_ephemeral_range_is_said_with_the_fix(tmp_path: Path):
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("1024\t65535\n")
    with pytest.raises(RuntimeError, match=r"net\.ipv4\.ip_local_port_range"):
        ports.candidate_range(fake)
