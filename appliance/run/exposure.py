"""Who can reach what a serve listens on: a warning at `run` when the OpenAI API listens beyond loopback without
VLLM_API_KEY (anyone who reaches the port may use the model), and when the exporter's /status and /metrics do."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping


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
