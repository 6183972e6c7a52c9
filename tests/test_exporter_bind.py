"""Where the exporter listens (issue 25, item 5): no wider than its peers need natively — loopback on a single node
and a head (a worker asks the head's API, never its exporter), a worker at the address the head asks it at (its
rendezvous source, APPLIANCE_HOST_IP) — while compose and the Kubernetes manifests set every interface explicitly
(a Prometheus on another node, the PodMonitor on the pod IP, the leader asking each worker's pod)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import httpx
import pytest
import yaml

from appliance.placement import Placement, resolve_placement
from appliance.profile import load_profile
from appliance.run.exposure import asked_at, exporter_bind

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("rank", "host_ip", "setting", "bound"), [
    (None, None, None, "127.0.0.1"),  # a single node
    (0, "10.0.0.1", None, "127.0.0.1"),  # a head: nobody off the host asks it
    (1, "10.0.0.2", None, "10.0.0.2"),  # a worker: where the head's exporter asks it (K15 per rank)
    (1, None, None, "0.0.0.0"),  # a worker whose source address is the kernel's route choice
    (1, "10.0.0.2", "127.0.0.1", "127.0.0.1"),  # APPLIANCE_EXPORTER_HOST wins on every rank
    (None, None, "0.0.0.0", "0.0.0.0"),
])
def test_the_bind_address_follows_the_rank_unless_set(rank: int | None, host_ip: str | None, setting: str | None,
                                                      bound: str) -> None:
    name = "cpu-smoke" if rank is None else "cpu-smoke-2node"
    place = resolve_placement(load_profile(name).profile,
                              Placement(node_rank=rank, master_addr=None if rank is None else "10.0.0.1",
                                        host_ip=host_ip))
    bind = exporter_bind(place.role, place.host_ip, setting)
    assert bind.host == bound
    assert bind.origin.startswith("env:APPLIANCE_EXPORTER_HOST" if setting else f"derived:{place.role}")


def test_the_head_asks_a_worker_where_it_binds() -> None:
    """The head's peer URL for a worker is the worker's rendezvous source address (host_ip, which `join_head` binds
    as its source): the same address the worker's exporter binds."""
    from appliance.multinode.rendezvous import Peer

    place = resolve_placement(load_profile("cpu-smoke-2node").profile,
                              Placement(node_rank=1, master_addr="127.0.0.1", host_ip="127.0.0.2", health_port=9411))
    bind = exporter_bind(place.role, place.host_ip, None)
    # What the head's rendezvous records for the worker: the source address of its join (rendezvous._admit).
    peer = Peer(identity=None, address=place.host_ip or "", nonce="n",  # type: ignore[arg-type]
                health_port=place.health_port)
    assert peer.health_url == f"http://{bind.host}:9411"


def test_a_tool_on_the_host_asks_a_wildcard_exporter_on_loopback_and_a_bound_one_at_its_address() -> None:
    assert [asked_at(h) for h in ("0.0.0.0", "::", "127.0.0.1", "10.0.0.2")] == \
        ["127.0.0.1", "127.0.0.1", "127.0.0.1", "10.0.0.2"]


def test_the_exporter_by_hand_binds_loopback_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.commands import exporter as command
    from appliance.settings import load_settings

    parser = argparse.ArgumentParser()
    command.register(parser)
    log = tmp_path / "vllm.log"
    log.write_text("")
    monkeypatch.delenv("APPLIANCE_EXPORTER_HOST", raising=False)
    config, _ = command._by_hand(parser.parse_args(["cpu-smoke", "--log", str(log)]), load_settings())
    assert config.host == "127.0.0.1"
    monkeypatch.setenv("APPLIANCE_EXPORTER_HOST", "0.0.0.0")
    config, _ = command._by_hand(parser.parse_args(["cpu-smoke", "--log", str(log)]), load_settings())
    assert config.host == "0.0.0.0"
    config, _ = command._by_hand(parser.parse_args(["cpu-smoke", "--log", str(log), "--host", "127.0.0.2"]),
                                 load_settings())
    assert config.host == "127.0.0.2"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback to bind")
def test_an_ipv6_bind_address_listens_on_ipv6(tmp_path: Path) -> None:
    """A worker's fabric address may be IPv6: the listener takes the address family of the address it binds."""
    from appliance.health.exporter import ExporterConfig, build_exporter

    log = tmp_path / "vllm.log"
    log.write_text("")
    exporter = build_exporter(ExporterConfig(loaded=load_profile("cpu-smoke"), log=log, role="single", host="::1",
                                             port=0, probe_socket=False))
    try:
        assert exporter.server.socket.family == socket.AF_INET6
        port = exporter.server.server_address[1]
        import threading

        threading.Thread(target=exporter.server.serve_forever, daemon=True).start()
        assert httpx.get(f"http://[::1]:{port}/live", timeout=5).status_code in (200, 503)
    finally:
        exporter.server.shutdown()
        exporter.close()


def test_compose_sets_every_interface_explicitly_and_lets_env_narrow_it() -> None:
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert doc["x-env"]["APPLIANCE_EXPORTER_HOST"] == "${APPLIANCE_EXPORTER_HOST:-0.0.0.0}"
    serves = {name: s for name, s in doc["services"].items() if "APPLIANCE_PROFILE" in (s.get("environment") or {})}
    assert serves and all(s["environment"]["APPLIANCE_EXPORTER_HOST"] == "${APPLIANCE_EXPORTER_HOST:-0.0.0.0}"
                          for s in serves.values())


@pytest.mark.parametrize("name", ["cpu-smoke", "cpu-smoke-2node", "gb10-tp2", "rtx-pro-6000-tp2"])
def test_every_kubernetes_serve_container_binds_every_interface(name: str) -> None:
    from tests.test_k8s_manifests import manifests, pod_templates

    templates = [t for doc in manifests(name) if doc["kind"] in ("Deployment", "LeaderWorkerSet")
                 for t in pod_templates(doc)]
    assert len(templates) == (1 if load_profile(name).profile.hardware.nodes == 1 else 2)
    for template in templates:
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        assert env["APPLIANCE_EXPORTER_HOST"] == "0.0.0.0"
