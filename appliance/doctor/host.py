"""Host facts for preflight: available memory, the kernel log, an engine already running."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from appliance.hostmem.sources import parse_meminfo, read_source
from appliance.redact import clip


def meminfo_gib(key: str, meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """One /proc/meminfo line (`MemAvailable`, `MemTotal`) in GiB; None where it cannot be read."""
    text = read_source(meminfo)
    return None if text is None else parse_meminfo(text).get(key)


def mem_available_gib(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    return meminfo_gib("MemAvailable", meminfo)


_ENGINE = re.compile(rb"(vllm(\S*)?\s+serve|vllm\.entrypoints|VLLM::EngineCore|EngineCore_)")


def running_engines(proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command) of vLLM processes already running on this machine (or in this container)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if _ENGINE.search(cmd.replace(b"\0", b" ")):
            # The command line may carry --api-key/--hf-token: redacted before it is shown anywhere.
            found.append((int(entry.name), clip(cmd.replace(b"\0", b" ").decode(errors="replace").strip(), 160)))
    return found


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def memlock_limit() -> tuple[int | None, int | None]:
    """(soft, hard) RLIMIT_MEMLOCK of this process in bytes; None = unlimited (RLIM_INFINITY)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return (None if soft == resource.RLIM_INFINITY else soft, None if hard == resource.RLIM_INFINITY else hard)
