"""The IPv4 address of a network interface (the fabric's), for VLLM_HOST_IP on each rank: the `interface_ip` the
run-time placement resolution reads (appliance/placement.py)."""

from __future__ import annotations

import fcntl
import socket
import struct

from appliance.errors import ApplianceError

_SIOCGIFADDR = 0x8915


def ipv4_of(ifname: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            raise ApplianceError(
                f"fabric interface {ifname!r} has no IPv4 address here",
                field="APPLIANCE_FABRIC_IFNAME", value=ifname,
                fix="name the ConnectX/fabric interface of this node (ip -br addr lists them), or set "
                    "APPLIANCE_HOST_IP",
                reason="NCCL, Gloo and VLLM_HOST_IP must all use the fast fabric",
            ) from None
    return socket.inet_ntoa(packed[20:24])
