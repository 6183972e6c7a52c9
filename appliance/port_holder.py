"""Who holds a TCP port, for the error that says a port is taken.

What `ss -tanp` does, from procfs alone (no tool needed in the image): the rows of /proc/net/tcp and tcp6
whose local port it is give each socket's state, addresses, owner uid and inode; the process holding the
socket is the one with a /proc/PID/fd link to `socket:[inode]`. It can tell only about this network
namespace's sockets (the only ones that can hold a port here) and the processes this user may see in this
PID namespace, and says which it could not see.
Stdlib only, and never raises: it runs inside another error.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass
from pathlib import Path

STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
          "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
          "0C": "NEW_SYN_RECV"}
MAX_CMD = 120


@dataclass(frozen=True)
class Row:
    """One socket of /proc/net/tcp{,6}."""

    local: str
    remote: str
    state: str
    uid: int
    inode: int


def _address(field: str, v6: bool) -> tuple[str, int]:
    """`0100007F:9C6D` -> ('127.0.0.1', 40045): the address is the kernel's words in host (little-endian) order."""
    raw, port = field.split(":")
    words = bytes.fromhex(raw)
    packed = b"".join(words[i:i + 4][::-1] for i in range(0, len(words), 4))
    host = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, packed)
    return (f"[{host}]" if v6 else host), int(port, 16)


def sockets_on(port: int, procfs: Path = Path("/proc")) -> list[Row] | None:
    """The sockets whose local port is `port` (None: procfs has no socket tables to read)."""
    rows, readable = [], False
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = (procfs / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            f = line.split()
            try:
                (host, lport), (rhost, rport) = _address(f[1], v6), _address(f[2], v6)
                if lport == port:
                    rows.append(Row(f"{host}:{lport}", f"{rhost}:{rport}", STATES.get(f[3], f[3]), int(f[7]),
                                    int(f[9])))
            except (IndexError, ValueError, OSError):
                continue  # a row in a format we do not know: no evidence either way
    return rows if readable else None


def holders(inodes: set[int], procfs: Path = Path("/proc")) -> tuple[dict[int, list[int]], int]:
    """({inode: [pid, ...]}, how many processes' fd tables could not be read)."""
    links = {f"socket:[{i}]": i for i in inodes}
    found: dict[int, list[int]] = {}
    hidden = 0
    try:
        pids = [int(e.name) for e in os.scandir(procfs) if e.name.isdigit()]
    except OSError:
        return found, 0
    for pid in sorted(pids):
        try:
            fds = os.listdir(procfs / str(pid) / "fd")
        except PermissionError:
            hidden += 1
            continue
        except OSError:
            continue  # gone meanwhile
        for fd in fds:
            try:
                target = os.readlink(procfs / str(pid) / "fd" / fd)
            except OSError:
                continue
            if target in links and pid not in found.setdefault(links[target], []):
                found[links[target]].append(pid)
    return found, hidden


def command_of(pid: int, procfs: Path = Path("/proc")) -> str:
    try:
        words = (procfs / str(pid) / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    except OSError:
        text = ""
    if not text:
        try:
            text = (procfs / str(pid) / "comm").read_text().strip()
        except OSError:
            text = "?"
    from appliance.redact import clip

    # Another process's command line may carry --api-key: masked before it is cut (a secret across the cut would
    # leak in part), control and format characters escaped.
    return clip(text, MAX_CMD)


def describe(port: int, procfs: Path = Path("/proc")) -> str:
    """One sentence: which process holds `port`, or why it cannot be told."""
    try:
        rows = sockets_on(port, procfs)
        if rows is None:
            return f"who holds port {port} cannot be told here: {procfs}/net/tcp cannot be read"
        if not rows:
            return (f"no socket on port {port} is listed in {procfs}/net/tcp or tcp6 any more: its holder has "
                    f"just let it go (try again)")
        owned = [r for r in rows if r.inode]
        found, hidden = holders({r.inode for r in owned}, procfs)
        parts = []
        for r in owned:
            pids = found.get(r.inode)
            where = f"{r.state} {r.local}" + ("" if r.state == "LISTEN" else f" -> {r.remote}")
            if pids:
                parts.append(", ".join(f"pid {p} ({command_of(p, procfs)})" for p in pids) + f" holds it: {where}")
            else:
                why = (f"{hidden} process(es) here hide their files from this user: run as root, or `ss -tanp`"
                       if hidden else "a process of another PID namespace sharing this network has it: another "
                       "container of the pod, or the host")
                parts.append(f"a socket {where} of uid {r.uid} belongs to no process this user can see ({why})")
        fileless = [r for r in rows if not r.inode]
        if fileless:  # TIME_WAIT remnants of closed connections (freed within a minute), or not yet accepted
            states = ", ".join(sorted({r.state for r in fileless}))
            parts.append(f"{len(fileless)} connection(s) without a process ({states}, e.g. {fileless[0].local} -> "
                         f"{fileless[0].remote})")
        return f"port {port}: " + "; ".join(parts)
    except Exception as exc:  # never let the explanation hide the error it explains
        return f"who holds port {port} cannot be told: {type(exc).__name__}: {exc}"


def in_use(exc: OSError) -> bool:
    return exc.errno == errno.EADDRINUSE
