"""Each rank's network identity (K39): the interface, address, RDMA device and GID index that NCCL, Gloo and
vLLM use on this node, resolved from the kernel's own tables before the engine starts.

Without them torch's Gloo binds what gethostname() resolves to, which /etc/hosts often maps to loopback (127.0.1.1;
a host-network pod's carries only 127.0.0.1), and its full mesh fails there (aws-samples/aws-do-eks#69; #51 found
that GLOO_SOCKET_IFNAME takes one concrete name, so it is resolved per rank, not written as a pattern). The peers
name the interface on every node by hand (NVIDIA dgx-spark-playbooks nvidia/vllm/README.md: VLLM_HOST_IP,
UCX_NET_DEVICES, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME; jasl/vllm-ds4-sm120-harness
scripts/dgx_spark_start_mp_serve.sh requires NCCL_IB_HCA too); here each rank finds its own, so one manifest serves
every node.

The order, for an interface:
  1. given (APPLIANCE_FABRIC_IFNAME / --fabric-ifname): it wins;
  2. the netdev of an RDMA device NCCL will use (/sys/class/infiniband/DEV/device/net/IF) that holds the route to
     the master address, else the first such netdev with an active port and an address;
  3. the interface of the route to the master address (/proc/net/route, /proc/net/ipv6_route).
The address: given (APPLIANCE_HOST_IP), else the interface's. The RDMA device: distributed.nccl_ib_hca, else the
one whose netdev is the interface. The GID index: distributed.nccl_ib_gid_index, else the RoCE v2 entry of that
device whose address is the rank's (shown, not rendered: NCCL picks the same one by default).

Everything is read as data under injectable roots (APPLIANCE_PROCFS, a sysfs path), so tests drive it with fake
trees; the one kernel call is the IPv4 address of an interface (SIOCGIFADDR), injectable too.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.errors import ApplianceError
from appliance.placement import RESOLVED_KINDS
from appliance.profile.topology import ib_devices

if TYPE_CHECKING:
    from appliance.placement import Placement, ResolvedPlacement
    from appliance.profile.model import Profile

RULE = "K39"
PROCFS = Path("/proc")
SYSFS = Path("/sys")
REASON = (f"{RULE}: without a concrete interface Gloo binds what the host name resolves to, often loopback "
          "(127.0.1.1; 127.0.0.1 in a host-network pod), and its full mesh fails there; NCCL's out-of-band traffic "
          "and VLLM_HOST_IP then miss the fabric")
RTF_UP, RTF_REJECT = 0x0001, 0x0200
_SIOCGIFADDR = 0x8915
ROCE_V2 = "RoCE v2"

AddressOf = Callable[[str], str | None]
HostLookup = Callable[[str], list[str]]


# --- the kernel's tables, read as data ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    ifname: str
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    metric: int


def _hex_ipv4(word: str) -> ipaddress.IPv4Address:
    """/proc/net/route writes addresses as the kernel holds them: a 32-bit word in host byte order."""
    return ipaddress.IPv4Address(struct.pack("=I", int(word, 16)))


def routes(procfs: Path = PROCFS) -> list[Route]:
    """The usable routes of the main table (/proc/net/route and /proc/net/ipv6_route); unreadable files: none."""
    out: list[Route] = []
    for line in _lines(procfs / "net" / "route")[1:]:
        f = line.split()
        if len(f) < 8 or not int(f[3], 16) & RTF_UP or int(f[3], 16) & RTF_REJECT:
            continue
        mask = bin(int.from_bytes(_hex_ipv4(f[7]).packed, "big")).count("1")
        out.append(Route(f[0], ipaddress.IPv4Network(f"{_hex_ipv4(f[1])}/{mask}", strict=False), int(f[6])))
    for line in _lines(procfs / "net" / "ipv6_route"):
        f = line.split()
        if len(f) < 10 or not int(f[8], 16) & RTF_UP or int(f[8], 16) & RTF_REJECT:
            continue
        net = ipaddress.IPv6Network((ipaddress.IPv6Address(bytes.fromhex(f[0])), int(f[1], 16)), strict=False)
        out.append(Route(f[9], net, int(f[5], 16)))
    return out


def route_ifname(address: str, table: list[Route]) -> str | None:
    """The interface of the longest matching prefix (lowest metric among equals): where the kernel sends `address`."""
    ip = ipaddress.ip_address(address)
    matches = [r for r in table if r.network.version == ip.version and ip in r.network]
    if not matches:
        return None
    return min(matches, key=lambda r: (-r.network.prefixlen, r.metric)).ifname


def ipv4_address(ifname: str) -> str | None:
    """The interface's IPv4 address (SIOCGIFADDR); None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def ipv6_addresses(ifname: str, procfs: Path = PROCFS) -> list[str]:
    """Global IPv6 addresses of the interface (/proc/net/if_inet6: address, index, prefix, scope, flags, name)."""
    out = []
    for line in _lines(procfs / "net" / "if_inet6"):
        f = line.split()
        if len(f) == 6 and f[5] == ifname and int(f[3], 16) == 0:
            out.append(str(ipaddress.IPv6Address(bytes.fromhex(f[0]))))
    return out


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: str
    state: str
    """ACTIVE, DOWN, ... (ports/N/state, `4: ACTIVE`)."""
    link_layer: str


@dataclass(frozen=True)
class RdmaDevice:
    name: str
    netdevs: tuple[str, ...]
    ports: tuple[RdmaPort, ...]

    @property
    def active(self) -> bool:
        return any(p.state == "ACTIVE" for p in self.ports)


def rdma_devices(sysfs: Path = SYSFS) -> list[RdmaDevice]:
    """Every RDMA device with its own netdevs (device/net/) and ports; none without /sys/class/infiniband."""
    root = sysfs / "class" / "infiniband"
    out = []
    for dev in _children(root):
        ports = tuple(RdmaPort(dev.name, p.name, _read(p / "state").split(":")[-1].strip() or "?",
                               _read(p / "link_layer").strip() or "?") for p in _children(dev / "ports"))
        out.append(RdmaDevice(dev.name, tuple(n.name for n in _children(dev / "device" / "net")), ports))
    return out


def link_state(ifname: str, sysfs: Path = SYSFS) -> str:
    """operstate of a netdev: up, down, unknown (`?` when unreadable)."""
    return _read(sysfs / "class" / "net" / ifname / "operstate").strip() or "?"


def roce_v2_gid_index(device: RdmaDevice, ifname: str, address: str | None, sysfs: Path = SYSFS) -> int | None:
    """The GID index of the RoCE v2 entry on `ifname` whose GID is the rank's address (IPv4-mapped for IPv4);
    None where the device has none."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:  # none, or a host name given as APPLIANCE_HOST_IP: NCCL chooses
        return None
    want = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed) if ip.version == 4 else ip
    for port in _children(sysfs / "class" / "infiniband" / device.name / "ports"):
        for gid in _children(port / "gids"):
            if not gid.name.isdigit():
                continue
            attrs = port / "gid_attrs"
            if _read(attrs / "types" / gid.name).strip() != ROCE_V2 \
                    or _read(attrs / "ndevs" / gid.name).strip() != ifname:
                continue
            try:
                if ipaddress.IPv6Address(_read(gid).strip()) == want:
                    return int(gid.name)
            except ValueError:
                continue
    return None


# --- the resolution ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tables:
    """Where the resolution reads this host: injectable roots and the two calls that ask the kernel / resolver."""

    procfs: Path = PROCFS
    sysfs: Path = SYSFS
    address_of: AddressOf = ipv4_address
    lookup_host: HostLookup | None = None

    def addresses(self, host: str) -> list[str]:
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        if self.lookup_host is not None:
            return self.lookup_host(host)
        try:
            return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
        except OSError:
            return []

    def address(self, ifname: str) -> str | None:
        return self.address_of(ifname) or next(iter(ipv6_addresses(ifname, self.procfs)), None)


@dataclass(frozen=True)
class NetIdentity:
    """One rank's network identity, each value with its origin (`cli:`, `env:`, `profile:`, `derived:…`)."""

    ifname: str | None
    host_ip: str | None
    rdma_device: str | None
    gid_index: int | None
    origins: dict[str, str]


def uses_rdma(profile: Profile) -> bool:
    return profile.hardware.target != "cpu" and not profile.distributed.nccl_ib_disable


def needs_identity(profile: Profile, role: str) -> bool:
    """A rank of a multi-node GPU serve. The CPU build's multi-node profiles are one-host rehearsals: their ranks
    meet on loopback on purpose (tests give each rank its 127.0.0.x), so they are left as they are."""
    return role != "single" and profile.hardware.target != "cpu"


def resolve_identity(profile: Profile, place: ResolvedPlacement, tables: Tables | None = None) -> NetIdentity:
    """This rank's identity: given values over the profile's over what this host's tables say (module docstring)."""
    t = tables or Tables()
    origins: dict[str, str] = {}
    master = place.master_addr
    master_ips = t.addresses(master) if master else []
    table = routes(t.procfs)
    via = next((ifname for ip in master_ips if (ifname := route_ifname(ip, table))), None)
    devices = _wanted(rdma_devices(t.sysfs), profile.distributed.nccl_ib_hca) if uses_rdma(profile) else []
    ifname = place.fabric_ifname
    if ifname:
        origins["ifname"] = place.origin("fabric_ifname")
    else:
        ifname, origins["ifname"] = _pick_ifname(devices, via, master, t)
    # A value derived by resolve_placement (the head's master address, which may be a host name such as the LWS
    # leader's) is not the user's: the interface's own address says it here.
    given_ip = not place.origin("host_ip").startswith(RESOLVED_KINDS)
    host_ip = place.host_ip if given_ip else None
    if host_ip:
        origins["host_ip"] = place.origin("host_ip")
    elif ifname:
        host_ip = t.address(ifname)
        origins["host_ip"] = f"derived:address of {ifname}"
    device = next((d for d in devices if ifname in d.netdevs), None)
    rdma: str | None = profile.distributed.nccl_ib_hca
    if rdma:
        origins["rdma_device"] = "profile:distributed.nccl_ib_hca"
    elif device is not None:
        rdma = device.name
        origins["rdma_device"] = f"derived:RDMA device of {ifname} (/sys/class/infiniband/{rdma}/device/net/{ifname})"
    else:
        origins["rdma_device"] = "default (none: NCCL uses sockets)" if not devices else "default"
    gid = profile.distributed.nccl_ib_gid_index
    if gid is not None:
        origins["gid_index"] = "profile:distributed.nccl_ib_gid_index"
    elif device is not None and ifname:
        gid = roce_v2_gid_index(device, ifname, host_ip, t.sysfs)
        origins["gid_index"] = f"derived:RoCE v2 GID of {host_ip} on {rdma}" if gid is not None else "default"
    else:
        origins["gid_index"] = "default"
    return NetIdentity(ifname, host_ip, rdma, gid, origins)


def _wanted(devices: list[RdmaDevice], hca: str | None) -> list[RdmaDevice]:
    """The devices NCCL_IB_HCA lets NCCL use (its prefix match; `^` excludes), all of them without one."""
    if not hca:
        return devices
    if hca.startswith("^"):
        excluded = ib_devices(hca[1:])
        return [d for d in devices if not any(d.name.startswith(n) for n in excluded)]
    names = ib_devices(hca)
    exact = hca.startswith("=")
    return [d for d in devices if any(d.name == n if exact else d.name.startswith(n) for n in names)]


def _pick_ifname(devices: list[RdmaDevice], via: str | None, master: str | None,
                 t: Tables) -> tuple[str | None, str]:
    usable = [(d, n) for d in devices if d.active for n in d.netdevs if t.address(n)]
    for d, n in usable:
        if n == via:
            return n, f"derived:route to master_addr {master} via {n}, the netdev of RDMA device {d.name}"
    if usable:
        d, n = usable[0]
        return n, f"derived:netdev of the first active RDMA device {d.name} (/sys/class/infiniband)"
    if via:
        return via, f"derived:route to master_addr {master} (/proc/net/route)"
    return None, "default"


def check_identity(ident: NetIdentity, rank: int, master: str | None) -> None:
    """Refuse (K39) a multi-node rank without a concrete, non-loopback interface and address."""
    if not ident.ifname:
        raise ApplianceError(
            f"rank {rank} cannot find its fabric interface: "
            + (f"no route to master_addr {master}" if master else "no APPLIANCE_MASTER_ADDR")
            + " and no RDMA netdev with an address",
            field="APPLIANCE_FABRIC_IFNAME", value=None,
            fix="set APPLIANCE_FABRIC_IFNAME (or --fabric-ifname) to this node's fabric interface, and "
                "APPLIANCE_MASTER_ADDR to the head's address on it (`appliance profiles --host` lists them)",
            reason=REASON)
    if ident.ifname == "lo":
        raise ApplianceError(
            f"rank {rank}'s fabric interface is the loopback ({ident.origins['ifname']})",
            field="APPLIANCE_FABRIC_IFNAME", value=ident.ifname,
            fix="set APPLIANCE_MASTER_ADDR to the head's address on the fabric (not 127.0.0.1), or "
                "APPLIANCE_FABRIC_IFNAME to the fabric interface", reason=REASON)
    if not ident.host_ip:
        raise ApplianceError(
            f"rank {rank}'s fabric interface {ident.ifname} has no address",
            field="APPLIANCE_HOST_IP", value=None,
            fix=f"give {ident.ifname} an address on the fabric, or set APPLIANCE_HOST_IP", reason=REASON)
    if _is_loopback(ident.host_ip):
        raise ApplianceError(
            f"rank {rank}'s address {ident.host_ip} is a loopback address ({ident.origins['host_ip']})",
            field="APPLIANCE_HOST_IP", value=ident.host_ip,
            fix="set APPLIANCE_HOST_IP to this node's address on the fabric, or unset it to take "
                f"{ident.ifname}'s", reason=REASON)


def with_identity(profile: Profile, place: ResolvedPlacement, tables: Tables | None = None) -> ResolvedPlacement:
    """`place` with this rank's identity resolved and checked (K39); a single node or a CPU rehearsal as it is."""
    if not needs_identity(profile, place.role):
        return place
    ident = resolve_identity(profile, place, tables)
    check_identity(ident, place.node_rank, place.master_addr)
    origins = {**place.origins, "fabric_ifname": ident.origins["ifname"], "host_ip": ident.origins["host_ip"],
               "rdma_device": ident.origins["rdma_device"], "gid_index": ident.origins["gid_index"]}
    return replace(place, fabric_ifname=ident.ifname, host_ip=ident.host_ip, rdma_device=ident.rdma_device,
                   gid_index=ident.gid_index, origins=origins)


def check_rendered(profile: Profile, given: Placement, role: str) -> str | None:
    """`appliance render` for a multi-node rank, which may run on another host than the rank's, so it reads no
    host table: a worker without a given interface is refused (K39: its Gloo would bind loopback); a head without
    one gets a warning line (its address is the master address; `appliance run` resolves its interface at start).
    A given interface or address (the head's: its master address) that is loopback is refused."""
    if not needs_identity(profile, role):
        return None
    rank = given.node_rank or 0
    address = given.host_ip or (given.master_addr if role == "head" else None)
    if given.fabric_ifname == "lo" or (address and _is_loopback(address)):
        origins = {"ifname": given.origin("fabric_ifname"),
                   "host_ip": given.origin("host_ip") if given.host_ip else given.origin("master_addr")}
        check_identity(NetIdentity(given.fabric_ifname or "?", address or "0.0.0.0", None, None, origins),
                       rank, given.master_addr)
    if given.fabric_ifname:
        return None
    if role == "worker":
        raise ApplianceError(
            f"rank {rank} of {profile.name} is rendered without its fabric interface",
            field="--fabric-ifname", value=None,
            fix="give --fabric-ifname (or APPLIANCE_FABRIC_IFNAME) for this rank, or start it with `appliance run` "
                "on the node, which resolves its interface, address and RDMA device there",
            reason=REASON)
    return (f"appliance render: warning: {RULE}: the head's GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, "
            "TP_SOCKET_IFNAME and UCX_NET_DEVICES are not rendered without --fabric-ifname; `appliance run` "
            "resolves them on the node")


# --- what `profiles --host` shows --------------------------------------------------------------------------------

def host_lines(tables: Tables | None = None) -> Iterator[str]:
    """RDMA device -> netdev -> address and link state, one line each; then the .env lines for head and worker."""
    t = tables or Tables()
    devices = rdma_devices(t.sysfs)
    if not devices:
        yield "RDMA devices: none (/sys/class/infiniband is empty): NCCL will use sockets"
        return
    yield "RDMA devices (device/port state -> netdev -> address, link):"
    first: tuple[str, str, str] | None = None
    for d in devices:
        ports = ",".join(f"{p.port}:{p.state}:{p.link_layer}" for p in d.ports) or "no ports"
        for n in d.netdevs or ("-",):
            address = t.address(n) if n != "-" else None
            yield f"  {d.name} [{ports}] -> {n} -> {address or 'no address'}, link {link_state(n, t.sysfs)}"
            if first is None and d.active and address:
                first = (d.name, n, address)
    if first is None:
        yield "  no active RDMA port with an addressed netdev: cable and address the fabric first"
        return
    dev, ifname, address = first
    yield "suggested .env lines, with this host as the head:"
    yield f"  head:   APPLIANCE_NODE_RANK=0 APPLIANCE_MASTER_ADDR={address} APPLIANCE_FABRIC_IFNAME={ifname}"
    yield f"  worker: APPLIANCE_NODE_RANK=1 APPLIANCE_MASTER_ADDR={address}"
    yield (f"  (each rank resolves its own interface, address and RDMA device at start, here {dev}; "
           "APPLIANCE_FABRIC_IFNAME set on a rank wins)")


def _is_loopback(host: str) -> bool:
    """127.0.0.0/8 or ::1; a host name (APPLIANCE_HOST_IP may be one) is judged where it is resolved, by the engine."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _children(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []
