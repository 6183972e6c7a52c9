"""Host facts for preflight: available memory, the kernel log, an engine already running."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

from appliance.redact import redact

GIB = 1024**3


def meminfo_gib(key: str, meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """One /proc/meminfo line (`MemAvailable`, `MemTotal`) in GiB; None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024 / GIB
    except (OSError, ValueError, IndexError):
        return None
    return None


def mem_available_gib(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    return meminfo_gib("MemAvailable", meminfo)


def kernel_log_this_boot() -> str | None:
    """The kernel log since boot, or None when this process may not read it (containers often can't)."""
    for cmd in (["journalctl", "-k", "-b", "--no-pager", "-q"], ["dmesg"]):
        if shutil.which(cmd[0]):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
            except (OSError, subprocess.SubprocessError):
                continue
            if r.returncode == 0:
                return r.stdout
    return None


def nv_no_memory_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "NV_ERR_NO_MEMORY" in ln]


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
            found.append((int(entry.name), redact(cmd.replace(b"\0", b" ").decode(errors="replace").strip())[:160]))
    return found


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
