"""Who can reach what a serve listens on: where the exporter binds when nothing says, a warning at `run` when the
OpenAI API listens beyond loopback without VLLM_API_KEY (anyone who reaches the port may use the model), and when
the exporter's /status and /metrics do."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from appliance.bounds import EXPORTER_BIND_ALL, EXPORTER_BIND_LOCAL


@dataclass(frozen=True)
class ExporterBind:
    host: str
    origin: str
    """Why this address: `env:APPLIANCE_EXPORTER_HOST`, or the `derived:` reason."""


def exporter_bind(role: str, host_ip: str | None, setting: str | None) -> ExporterBind:
    """The exporter's bind address: APPLIANCE_EXPORTER_HOST when set (compose and the Kubernetes manifests set
    0.0.0.0), else no wider than this rank's peers need. Who asks an exporter from elsewhere: only the head, which
    compares what each worker loaded (K15) at the worker's rendezvous address (multinode/rendezvous.Peer: the source
    address of the worker's join, APPLIANCE_HOST_IP when known). A worker asks the head's API, never its exporter,
    so a single node and a head keep /status and /metrics on loopback."""
    if setting:
        return ExporterBind(setting, "env:APPLIANCE_EXPORTER_HOST")
    if role != "worker":
        return ExporterBind(EXPORTER_BIND_LOCAL, f"derived:{role} (no peer asks its exporter)")
    if host_ip:
        return ExporterBind(host_ip, "derived:worker, host_ip (the address the head asks it at)")
    return ExporterBind(EXPORTER_BIND_ALL, "derived:worker without host_ip (the address the head will see is the "
                                           "kernel's choice of route)")


def asked_at(bind: str) -> str:
    """Where a tool on this host asks an exporter bound at `bind`: loopback for every interface, else that address
    (a worker bound at its fabric address listens there only)."""
    return EXPORTER_BIND_LOCAL if bind in (EXPORTER_BIND_ALL, "::", "[::]") else bind


def is_loopback(host: str | None) -> bool:
    """None is vLLM's default, every interface (its `--host` unset): not loopback."""
    if host is None:
        return False
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, it is no promise of loopback


def exposure_warnings(role: str, api_host: str | None, api_port: int, exporter_host: str, exporter_port: int,
                      env: Mapping[str, str]) -> list[str]:
    """`role`: a worker serves no API, and its exporter must be reached by the head's (no warning for either)."""
    out = []
    if role != "worker" and not is_loopback(api_host) and not env.get("VLLM_API_KEY"):
        where = "every interface (server.host unset)" if api_host is None else f"{api_host} (server.host)"
        out.append(f"WARN  exposure    the API listens on {where}, port {api_port}, with no VLLM_API_KEY: whoever "
                   f"reaches this host may use the model. Set VLLM_API_KEY (the .env or the Secret "
                   f"appliance-secrets), or server.host: 127.0.0.1 where only this host asks it")
    if role == "single" and not is_loopback(exporter_host):
        out.append(f"WARN  exposure    the exporter's /status and /metrics listen on {exporter_host}, port "
                   f"{exporter_port} (APPLIANCE_EXPORTER_HOST): a Prometheus elsewhere needs that; where nothing "
                   f"off this host scrapes it, set APPLIANCE_EXPORTER_HOST=127.0.0.1")
    return out
