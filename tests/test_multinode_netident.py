"""Each rank's network identity (appliance/multinode/netident.py, K39): resolved from the kernel's routing tables and
/sys/class/infiniband (fake trees in tmp dirs, and the real kernel inside two network namespaces this test makes),
rendered as VLLM_HOST_IP, the four *_IFNAME/UCX variables and NCCL_IB_HCA with their origins, and refused when a
multi-node rank would run on no interface or on loopback. No traffic is sent anywhere: the namespaces only hold
routes and addresses that the resolution reads."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from appliance.cli import main
from appliance.errors import ApplianceError
from appliance.multinode.netident import Tables, host_lines, route_ifname, routes, with_identity
from appliance.placement import Placement, ResolvedPlacement, resolve_placement
from appliance.profile import load_profile
from appliance.render.managed import SOCKET_IFNAME_ENV
from appliance.render.plan import build_plan, fabric_env_origins

ROOT = Path(__file__).resolve().parents[1]
FABRIC, MGMT = "enp1s0f0np0", "enP7s7"
HEAD_IP, WORKER_IP, MGMT_IP = "192.168.100.10", "192.168.100.11", "172.16.5.9"
ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def _hex(address: str) -> str:
    """An IPv4 address as /proc/net/route writes it: the kernel's 32-bit word in host byte order."""
    return f"{struct.unpack('=I', socket.inet_aton(address))[0]:08X}"


def _route(ifname: str, dest: str, mask: str, *, flags: int = 0x1, metric: int = 0) -> str:
    return "\t".join([ifname, _hex(dest), "00000000", f"{flags:04X}", "0", "0", str(metric), _hex(mask), "0", "0",
                      "0"])


def _mapped_gid(address: str) -> str:
    """A RoCE v2 GID as /sys writes it: the IPv4-mapped IPv6 address in eight groups of four hex digits."""
    packed = ipaddress.IPv6Address(f"::ffff:{address}").packed
    return ":".join(packed[i:i + 2].hex() for i in range(0, 16, 2))


@pytest.fixture
def host(tmp_path: Path) -> Tables:
    """A GB10-like worker: a default route on the management port, the fabric's /24 on the ConnectX netdev,
    RDMA device rocep1s0f0 (its netdev the fabric port, RoCE v2 GID 3 = its address) and a second RDMA device
    whose port is down. The one kernel call (an interface's IPv4 address) is a test double: its answers are below."""
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "route").write_text("\n".join([
        ROUTE_HEADER,
        _route(MGMT, "0.0.0.0", "0.0.0.0", flags=0x3, metric=100),
        _route(MGMT, "172.16.5.0", "255.255.255.0", metric=100),
        _route(FABRIC, "192.168.100.0", "255.255.255.0"),
        _route("lo", "10.250.0.0", "255.255.0.0", flags=0x1 | 0x200),  # a reject route: never chosen
    ]) + "\n")
    (proc / "net" / "ipv6_route").write_text(
        f"fd000000000000000000000000000000 40 {'0' * 32} 00 {'0' * 32} 00000100 00000001 00000000 00000001 {FABRIC}\n")
    (proc / "net" / "if_inet6").write_text(f"fd000000000000000000000000000011 05 40 00 80 {FABRIC}\n")
    for dev, netdev, state in (("rocep1s0f0", FABRIC, "4: ACTIVE"), ("rocep1s0f1", "enp1s0f1np1", "1: DOWN")):
        d = sys_root / "class" / "infiniband" / dev
        (d / "device" / "net" / netdev).mkdir(parents=True)
        port = d / "ports" / "1"
        (port / "gids").mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "link_layer").write_text("Ethernet\n")
        for sub in ("types", "ndevs"):
            (port / "gid_attrs" / sub).mkdir(parents=True)
        entries = {"0": ("fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1"),
                   "3": (_mapped_gid(WORKER_IP if dev == "rocep1s0f0" else "192.168.200.11"), "RoCE v2")}
        for index, (gid, kind) in entries.items():
            (port / "gids" / index).write_text(gid + "\n")
            (port / "gid_attrs" / "types" / index).write_text(kind + "\n")
            (port / "gid_attrs" / "ndevs" / index).write_text(netdev + "\n")
        (sys_root / "class" / "net" / netdev).mkdir(parents=True)
        (sys_root / "class" / "net" / netdev / "operstate").write_text("up\n" if "ACTIVE" in state else "down\n")
    addresses = {FABRIC: WORKER_IP, MGMT: MGMT_IP, "lo": "127.0.0.1"}
    return Tables(procfs=proc, sysfs=sys_root, address_of=addresses.get, lookup_host=lambda name: [])


def worker(master: str = HEAD_IP, **given: object) -> tuple[object, ResolvedPlacement]:
    profile = load_profile("gb10-tp2").profile
    origins = {name: f"env:APPLIANCE_{name.upper()}" for name in given}
    return profile, resolve_placement(profile, Placement(node_rank=1, master_addr=master, origins=origins,
                                                         **given))  # type: ignore[arg-type]


def test_the_kernel_tables_are_read_as_data_longest_prefix_first(host: Tables) -> None:
    table = routes(host.procfs)
    assert {r.ifname for r in table} == {MGMT, FABRIC}  # the reject route is left out
    assert route_ifname(HEAD_IP, table) == FABRIC  # the /24 wins over the default route
    assert route_ifname("203.0.113.7", table) == MGMT  # only the default route matches
    assert route_ifname("fd00::1", table) == FABRIC  # /proc/net/ipv6_route
    assert route_ifname("2001:db8::1", table) is None


def test_a_worker_resolves_the_fabric_netdev_its_address_rdma_device_and_gid(host: Tables) -> None:
    profile, place = worker()
    at = with_identity(profile, place, host)  # type: ignore[arg-type]
    assert (at.fabric_ifname, at.host_ip, at.rdma_device, at.gid_index) == (FABRIC, WORKER_IP, "rocep1s0f0", 3)
    assert "route to master_addr 192.168.100.10" in at.origin("fabric_ifname")
    assert "rocep1s0f0" in at.origin("fabric_ifname")
    assert at.origin("host_ip") == f"derived:address of {FABRIC}"
    assert at.origin("rdma_device").startswith("derived:RDMA device of enp1s0f0np0")
    env = fabric_env_origins(profile, at)  # type: ignore[arg-type]
    assert {name: value for name, (value, _) in env.items()} == {
        "VLLM_HOST_IP": WORKER_IP, "NCCL_SOCKET_IFNAME": FABRIC, "GLOO_SOCKET_IFNAME": FABRIC,
        "TP_SOCKET_IFNAME": FABRIC, "UCX_NET_DEVICES": FABRIC, "NCCL_IB_HCA": "rocep1s0f0"}
    plan = build_plan(profile, at)  # type: ignore[arg-type]
    assert all(plan.env[name] == value for name, (value, _) in env.items())
    # launch.json carries them and reads them back with their origins
    back = ResolvedPlacement.from_json(json.loads(json.dumps(at.to_json())))
    assert (back.rdma_device, back.gid_index, back.origin("gid_index")) == ("rocep1s0f0", 3, at.origin("gid_index"))


def test_the_rdma_netdev_wins_over_a_route_to_the_master_on_the_management_network(host: Tables) -> None:
    profile, place = worker(master=MGMT_IP)  # e.g. a host-network pod's leader address: the node's InternalIP
    at = with_identity(profile, place, host)  # type: ignore[arg-type]
    assert (at.fabric_ifname, at.host_ip) == (FABRIC, WORKER_IP)
    assert "first active RDMA device rocep1s0f0" in at.origin("fabric_ifname")


def test_without_rdma_the_route_to_the_master_names_the_interface(host: Tables) -> None:
    shutil.rmtree(host.sysfs / "class" / "infiniband")
    profile, place = worker()
    at = with_identity(profile, place, host)  # type: ignore[arg-type]
    assert (at.fabric_ifname, at.host_ip, at.rdma_device) == (FABRIC, WORKER_IP, None)
    assert at.origin("fabric_ifname") == "derived:route to master_addr 192.168.100.10 (/proc/net/route)"
    assert "NCCL_IB_HCA" not in build_plan(profile, at).env  # type: ignore[arg-type]


def test_a_value_the_user_set_wins_and_is_shown_as_theirs(host: Tables) -> None:
    profile, place = worker(fabric_ifname=MGMT, host_ip="172.16.5.77")
    at = with_identity(profile, place, host)  # type: ignore[arg-type]
    assert (at.fabric_ifname, at.host_ip) == (MGMT, "172.16.5.77")
    env = fabric_env_origins(profile, at)  # type: ignore[arg-type]
    assert env["GLOO_SOCKET_IFNAME"] == (MGMT, "env:APPLIANCE_FABRIC_IFNAME")
    assert env["VLLM_HOST_IP"] == ("172.16.5.77", "env:APPLIANCE_HOST_IP")
    assert "NCCL_IB_HCA" not in env  # the management port is no RDMA device's netdev


@pytest.mark.parametrize(("master", "given", "field"), [
    ("127.0.0.1", {}, "APPLIANCE_FABRIC_IFNAME"),  # the route to a loopback master is `lo`
    (HEAD_IP, {"host_ip": "127.0.1.1"}, "APPLIANCE_HOST_IP"),  # what Ubuntu maps the host name to
    (HEAD_IP, {"fabric_ifname": "lo"}, "APPLIANCE_FABRIC_IFNAME"),
])
def test_a_loopback_identity_is_refused_with_the_rule(host: Tables, master: str, given: dict[str, str],
                                                      field: str) -> None:
    if master.startswith("127."):
        (host.procfs / "net" / "route").write_text("\n".join([ROUTE_HEADER, _route("lo", "127.0.0.0", "255.0.0.0")]))
        shutil.rmtree(host.sysfs / "class" / "infiniband")
    profile, place = worker(master=master, **given)
    with pytest.raises(ApplianceError) as caught:
        with_identity(profile, place, host)  # type: ignore[arg-type]
    assert caught.value.field == field and "K39" in str(caught.value.reason) and caught.value.fix


def test_a_rank_with_no_route_and_no_rdma_netdev_is_refused_with_the_fix(host: Tables) -> None:
    (host.procfs / "net" / "route").write_text(ROUTE_HEADER + "\n")
    (host.procfs / "net" / "ipv6_route").write_text("")
    shutil.rmtree(host.sysfs / "class" / "infiniband")
    profile, place = worker()
    with pytest.raises(ApplianceError) as caught:
        with_identity(profile, place, host)  # type: ignore[arg-type]
    assert caught.value.field == "APPLIANCE_FABRIC_IFNAME" and caught.value.value is None
    assert "APPLIANCE_FABRIC_IFNAME" in str(caught.value.fix) and str(caught.value.reason).startswith("K39")


def test_a_single_node_and_the_cpu_rehearsal_are_left_as_they_are(host: Tables) -> None:
    single = load_profile("rtx-pro-6000-tp2").profile
    place = resolve_placement(single)
    assert with_identity(single, place, host) is place
    cpu = load_profile("cpu-smoke-2node").profile
    rehearsal = resolve_placement(cpu, Placement(node_rank=1, master_addr="127.0.0.1", host_ip="127.0.0.2"))
    assert with_identity(cpu, rehearsal, host) is rehearsal  # one host, ranks on 127.0.0.x by design


def test_profiles_host_names_device_netdev_address_link_and_the_env_lines(host: Tables) -> None:
    lines = list(host_lines(host))
    assert f"  rocep1s0f0 [1:ACTIVE:Ethernet] -> {FABRIC} -> {WORKER_IP}, link up" in lines
    assert "  rocep1s0f1 [1:DOWN:Ethernet] -> enp1s0f1np1 -> no address, link down" in lines
    assert any(f"APPLIANCE_NODE_RANK=0 APPLIANCE_MASTER_ADDR={WORKER_IP} APPLIANCE_FABRIC_IFNAME={FABRIC}" in line
               for line in lines)
    assert f"  worker: APPLIANCE_NODE_RANK=1 APPLIANCE_MASTER_ADDR={WORKER_IP}" in lines
    shutil.rmtree(host.sysfs / "class" / "infiniband")
    assert [line for line in host_lines(host) if "none" in line]


def test_render_refuses_a_worker_without_its_interface_and_carries_them_with_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "gb10-tp2", "--node-rank", "1", "--master-addr", HEAD_IP]) == 2
    err = capsys.readouterr().err
    assert "K39" in err and "--fabric-ifname" in err
    assert main(["render", "gb10-tp2", "--node-rank", "1", "--master-addr", HEAD_IP, "--fabric-ifname", FABRIC,
                 "--json"]) == 0
    env = json.loads(capsys.readouterr().out)["env"]
    assert all(env[name] == FABRIC for name in SOCKET_IFNAME_ENV)
    assert main(["render", "gb10-tp2", "--master-addr", HEAD_IP, "--json"]) == 0  # the head: its address is known
    said = capsys.readouterr()
    assert json.loads(said.out)["env"]["VLLM_HOST_IP"] == HEAD_IP and "warning: K39" in said.err


def _pod_envs(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main(["k8s", "gb10-tp2", *argv]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d and d.get("kind") == "LeaderWorkerSet"]
    assert len(docs) == 1
    templates = [docs[0]["spec"]["leaderWorkerTemplate"][key] for key in ("leaderTemplate", "workerTemplate")]
    assert all(t["spec"]["hostNetwork"] is True for t in templates)
    assert all(t["spec"]["containers"][0]["command"] == ["appliance", "run"] for t in templates)
    return [{e["name"]: e.get("value") for e in t["spec"]["containers"][0]["env"]} for t in templates]


def test_k8s_rdma_pods_resolve_their_own_identity_at_start_from_one_manifest(
        capsys: pytest.CaptureFixture[str]) -> None:
    envs = _pod_envs(["--rdma"], capsys)
    assert len(envs) == 2  # the leader's and the worker's template
    for env in envs:
        # no pod IP (the node's InternalIP on the host network) and no per-node value: `appliance run` resolves them
        assert not env.keys() & {"APPLIANCE_HOST_IP", "VLLM_HOST_IP", "NCCL_IB_HCA", *SOCKET_IFNAME_ENV}
        assert env["APPLIANCE_MASTER_ADDR"] == "$(LWS_LEADER_ADDRESS)"
    for env in _pod_envs(["--rdma", "--fabric-ifname", FABRIC], capsys):
        assert env["APPLIANCE_FABRIC_IFNAME"] == FABRIC and "APPLIANCE_HOST_IP" not in env


def test_the_rule_is_in_the_rulebook_with_where_it_is_enforced(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "K39"]) == 0
    out = capsys.readouterr().out
    assert "K39" in out and "fix:" in out and "why:" in out and "run" in out


# --- the real kernel, in two network namespaces this test makes ------------------------------------------------------

def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def namespaces(ip_exe: str) -> Iterator[tuple[str, str]]:
    """Two namespaces joined by a veth pair, 10.203.0.1/24 and 10.203.0.2/24, both only inside them; removed after."""
    if subprocess.run([ip_exe, "netns", "list"], capture_output=True).returncode != 0:
        pytest.fail("this test needs root (ip netns): the CI host runs as root")
    tag = uuid.uuid4().hex[:6]
    head, work = f"app-h-{tag}", f"app-w-{tag}"
    made: list[str] = []
    try:
        for ns in (head, work):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", f"vh{tag}", "netns", head, "type", "veth", "peer", "name", f"vw{tag}", "netns", work)
        for ns, dev, address in ((head, f"vh{tag}", "10.203.0.1/24"), (work, f"vw{tag}", "10.203.0.2/24")):
            _ip("-n", ns, "addr", "add", address, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield head, work
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)


PROBE = """
import json, sys
from appliance.errors import ApplianceError
from appliance.multinode.netident import with_identity
from appliance.placement import Placement, resolve_placement
from appliance.profile import load_profile
profile = load_profile("gb10-tp2").profile
place = resolve_placement(profile, Placement(node_rank=int(sys.argv[1]), master_addr=sys.argv[2]))
try:
    at = with_identity(profile, place)
except ApplianceError as exc:
    print(json.dumps({"refused": exc.field, "reason": exc.reason}))
else:
    print(json.dumps({"ifname": at.fabric_ifname, "host_ip": at.host_ip, "origin": at.origin("fabric_ifname")}))
"""


def _resolve_in(ns: str, rank: int, master: str) -> dict[str, str]:
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PROBE, str(rank), master],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_rank_resolves_its_own_veth_and_address_in_its_namespace(namespaces: tuple[str, str]) -> None:
    head, work = namespaces
    tag = head.removeprefix("app-h-")
    assert _resolve_in(head, 0, "10.203.0.1") == {
        "ifname": f"vh{tag}", "host_ip": "10.203.0.1", "origin": "derived:route to master_addr 10.203.0.1 "
                                                                  "(/proc/net/route)"}
    worker_side = _resolve_in(work, 1, "10.203.0.1")
    assert (worker_side["ifname"], worker_side["host_ip"]) == (f"vw{tag}", "10.203.0.2")


def test_a_namespace_without_a_route_to_the_master_is_refused(namespaces: tuple[str, str]) -> None:
    _, work = namespaces
    said = _resolve_in(work, 1, "10.204.0.1")  # no route to it in the namespace (and nothing is sent)
    assert said["refused"] == "APPLIANCE_FABRIC_IFNAME" and said["reason"].startswith("K39")
    said = _resolve_in(work, 1, "127.0.0.1")  # the master on loopback: `lo`, refused
    assert said["refused"] == "APPLIANCE_FABRIC_IFNAME" and said["reason"].startswith("K39")


def test_a_worker_rank_in_its_namespace_resolves_at_start_in_appliance_run_before_nccl(
        namespaces: tuple[str, str]) -> None:
    """`appliance run --dry-run` refuses the rank (exit 2, K39) before any rendezvous when it cannot resolve."""
    _, work = namespaces
    env = {"PATH": str(Path(sys.executable).parent), "APPLIANCE_PROFILE": "gb10-tp2", "APPLIANCE_NODE_RANK": "1",
           "APPLIANCE_MASTER_ADDR": "10.204.0.1", "HOME": "/nonexistent"}
    r = subprocess.run(["ip", "netns", "exec", work, "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                        sys.executable, "-m", "appliance", "run", "--dry-run", "--skip-doctor"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "K39" in r.stderr and "Traceback" not in r.stderr


def test_one_environment_serves_both_ranks_each_resolving_its_own_in_run_dry_run(
        namespaces: tuple[str, str], tmp_path: Path) -> None:
    """Head and worker given the same variables but their rank (as one manifest gives them), each in its own
    namespace: `appliance run --dry-run` resolves each rank's veth and address, and shows each with its origin. The
    two meet at the appliance's rendezvous over the veth pair (inside the namespaces; the dry run stops there)."""
    head, work = namespaces
    tag = head.removeprefix("app-h-")
    common = {"PATH": str(Path(sys.executable).parent), "APPLIANCE_PROFILE": "gb10-tp2",
              "APPLIANCE_MASTER_ADDR": "10.203.0.1", "APPLIANCE_RENDEZVOUS_TIMEOUT_S": "90", "HOME": str(tmp_path)}
    ranks = {}
    for rank, ns in ((0, head), (1, work)):
        env = common | {"APPLIANCE_NODE_RANK": str(rank), "APPLIANCE_HOME": str(tmp_path / f"home{rank}")}
        ranks[rank] = subprocess.Popen(
            ["ip", "netns", "exec", ns, "env", "-i", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m",
             "appliance", "run", "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / f"run{rank}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    said = {}
    try:
        for rank, proc in ranks.items():
            out, err = proc.communicate(timeout=240)
            said[rank] = (proc.returncode, out, err)
    finally:
        for proc in ranks.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    for rank, dev, address in ((0, f"vh{tag}", "10.203.0.1"), (1, f"vw{tag}", "10.203.0.2")):
        rc, out, err = said[rank]
        assert rc == 0, err[-3000:]
        origin = "(derived:route to master_addr 10.203.0.1 (/proc/net/route))"
        for name in SOCKET_IFNAME_ENV:
            assert f"# network {name}={dev} {origin}" in out
        assert f"# network VLLM_HOST_IP={address}" in out
        assert f"# placement fabric_ifname: {dev} derived:" not in out  # shown with its origin in parentheses
        assert f"# placement fabric_ifname: {dev} ({origin[1:-1]})" in out


def test_config_shows_each_network_variable_with_its_origin_from_the_host_roots(
        host: Tables, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """APPLIANCE_PROCFS / APPLIANCE_SYSFS point `appliance config` at the fake trees; the interface's IPv4 address
    is asked of this kernel, which has no such interface, so its IPv6 address (if_inet6) is taken."""
    for name, value in {"APPLIANCE_PROCFS": str(host.procfs), "APPLIANCE_SYSFS": str(host.sysfs),
                        "APPLIANCE_NODE_RANK": "1", "APPLIANCE_MASTER_ADDR": HEAD_IP}.items():
        monkeypatch.setenv(name, value)
    assert main(["config", "gb10-tp2", "--json"]) == 0
    network = json.loads(capsys.readouterr().out)["network"]
    assert network["GLOO_SOCKET_IFNAME"]["value"] == FABRIC
    assert "route to master_addr 192.168.100.10" in network["GLOO_SOCKET_IFNAME"]["origin"]
    assert network["VLLM_HOST_IP"] == {"value": "fd00::11", "origin": f"derived:address of {FABRIC}"}
    assert network["NCCL_IB_HCA"]["value"] == "rocep1s0f0"
    monkeypatch.setenv("APPLIANCE_MASTER_ADDR", "127.0.0.1")
    (host.procfs / "net" / "route").write_text("\n".join([ROUTE_HEADER, _route("lo", "127.0.0.0", "255.0.0.0")]))
    shutil.rmtree(host.sysfs / "class" / "infiniband")
    assert main(["config", "gb10-tp2", "--json"]) == 0  # config shows it; `run` is what refuses
    unresolved = json.loads(capsys.readouterr().out)["network"]
    assert list(unresolved) == ["unresolved"]
    assert "loopback" in unresolved["unresolved"]["value"]
    assert unresolved["unresolved"]["origin"] == "refused (APPLIANCE_FABRIC_IFNAME)"
    assert main(["config", "gb10-tp2"]) == 0
    assert "network.unresolved" in capsys.readouterr().out


def test_profiles_host_prints_the_fabric_of_the_host_roots_it_is_given(
        host: Tables, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("APPLIANCE_SYSFS", str(host.sysfs))
    monkeypatch.setenv("APPLIANCE_PROCFS", str(host.procfs))
    assert main(["profiles", "--host"]) == 0
    out = capsys.readouterr().out
    # this kernel has no such interface: its address is the if_inet6 one of the fake procfs
    assert f"rocep1s0f0 [1:ACTIVE:Ethernet] -> {FABRIC} -> fd00::11, link up" in out
    assert f"APPLIANCE_MASTER_ADDR=fd00::11 APPLIANCE_FABRIC_IFNAME={FABRIC}" in out


def test_the_heads_address_is_its_interfaces_not_a_master_host_name(host: Tables) -> None:
    """On Kubernetes the master address is the LWS leader's DNS name; resolve_placement derives the head's address
    from it, which is no address to bind: the head takes its interface's own."""
    profile = load_profile("gb10-tp2").profile
    place = resolve_placement(profile, Placement(node_rank=0, master_addr="leader.appliance.svc"))
    assert place.host_ip == "leader.appliance.svc"  # what the placement alone says
    at = with_identity(profile, place, host)  # type: ignore[arg-type]
    assert (at.fabric_ifname, at.host_ip) == (FABRIC, WORKER_IP)  # the fixture host's RDMA netdev and address
    assert at.origin("host_ip") == f"derived:address of {FABRIC}"
