"""What the host says about its memory: procfs (meminfo, memory PSI) and the kernel log.

Every reader takes its source as an argument (a procfs root, a kernel-log path), so a container that
mounts the host's /proc elsewhere, and a test that writes a fake procfs folder, use the same code as
the host. A source that cannot be read gives None ("unknown"), never a healthy-looking zero.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from appliance.paths import healthchecks_dir
from appliance.yamlstrict import load_data_table

GIB = 1024**3
DEV_KMSG = Path("/dev/kmsg")
MAX_KMSG_READ = 16 << 20


MAX_PROCFS_BYTES = 1 << 20
"""meminfo and pressure/memory are a few hundred bytes; a procfs root from APPLIANCE_PROCFS may hold anything."""
MAX_KB_DIGITS = 15
"""kB of memory: 15 digits are 931 PiB. A 5,000-digit MemTotal is no memory size."""


def read_source(path: Path, max_bytes: int = MAX_PROCFS_BYTES) -> str | None:
    """A host source's text, or None ("unknown") when it is missing, unreadable, too big, or no regular file (a FIFO
    in a fake procfs would block the reader: it is refused on the open handle, never read)."""
    from appliance.errors import ApplianceError
    from appliance.paths import read_capped

    try:
        return read_capped(path, "APPLIANCE_PROCFS", max_bytes, "host source").decode("utf-8", "replace")
    except ApplianceError:
        return None


def meminfo(procfs: Path) -> dict[str, float] | None:
    """/proc/meminfo in GiB per key; None when it cannot be read."""
    text = read_source(procfs / "meminfo")
    return None if text is None else parse_meminfo(text)


def parse_meminfo(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isascii() and parts[0].isdigit() and len(parts[0]) <= MAX_KB_DIGITS:
            out[key.strip()] = int(parts[0]) * 1024 / GIB  # the kernel writes kB (KiB)
    return out


def mem_available_gib(procfs: Path) -> float | None:
    info = meminfo(procfs)
    return None if info is None else info.get("MemAvailable")


@dataclass(frozen=True)
class Pressure:
    """Memory pressure stall information (PSI): % of the last 10 s some / all tasks stalled on memory."""

    some_avg10: float
    full_avg10: float


_PSI = re.compile(r"^(some|full)\s.*?avg10=(\d{1,3}\.\d{1,2})\b", re.MULTILINE)  # a percentage, as the kernel writes


def memory_pressure(procfs: Path) -> Pressure | None:
    """/proc/pressure/memory; None when the kernel has no PSI (CONFIG_PSI off, or psi=0) or it is unreadable."""
    text = read_source(procfs / "pressure" / "memory")
    if text is None:
        return None
    found = dict(_PSI.findall(text))
    if "some" not in found:
        return None
    return Pressure(float(found["some"]), float(found.get("full", "0")))


# --- the kernel log -----------------------------------------------------------------------------

Action = Literal["stop", "not-ready"]


class KernelSignal(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    rule: str
    pattern: str
    action: Action
    hold_s: float = Field(60, ge=0)
    meaning: str

    def matches(self, line: str) -> bool:
        return _compiled(self.pattern).search(line) is not None


class KernelChecks(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    signals: list[KernelSignal]


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@cache
def load_kernel_checks(path: Path | None = None) -> KernelChecks:
    return load_data_table(path or healthchecks_dir() / "kernelchecks.yaml", KernelChecks, "kernel-check table")


@dataclass(frozen=True)
class KernelHit:
    signal: KernelSignal
    line: str


def kernel_hits(lines: list[str], checks: KernelChecks) -> list[KernelHit]:
    return [KernelHit(s, line) for line in lines for s in checks.signals if s.matches(line)]


class KernelLog:
    """New kernel-log lines since the last call; the first call returns this boot's log so far.

    Source: `path` when given (a file, e.g. a host's kern.log mounted in, or a test's file; read
    incrementally, truncation safe), else /dev/kmsg (one record per read, non-blocking). `readable`
    is False when neither can be read: the caller reports the kernel log as unknown.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.error: str | None = None
        self._fd: int | None = None
        self._offset = 0
        self._partial = ""

    @property
    def source(self) -> str:
        return str(self.path) if self.path else str(DEV_KMSG)

    def read_new(self) -> list[str] | None:
        """New whole lines, or None when the source cannot be read (the error is in `error`)."""
        return self._read_file(self.path) if self.path else self._read_kmsg()

    def _read_file(self, path: Path) -> list[str] | None:
        """Opened without blocking and read only as a regular file (a FIFO given as APPLIANCE_KMSG would hang the
        watchdog), at most MAX_KMSG_READ bytes a call: a huge log is read from its newest part."""
        import stat

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self.error = f"{path}: {exc.strerror or exc}"
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.error = f"{path}: not a regular file"
                return None
            if st.st_size < self._offset:  # truncated or replaced: start over
                self._offset, self._partial = 0, ""
            if st.st_size - self._offset > MAX_KMSG_READ:  # keep the newest part; the rest is older news
                self._offset, self._partial = st.st_size - MAX_KMSG_READ, ""
            data = os.pread(fd, st.st_size - self._offset, self._offset)
        except OSError as exc:
            self.error = f"{path}: {exc.strerror or exc}"
            return None
        finally:
            os.close(fd)
        self.error = None
        self._offset += len(data)
        text = self._partial + data.decode(errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines

    def _read_kmsg(self) -> list[str] | None:
        if self._fd is None:
            try:
                self._fd = os.open(DEV_KMSG, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as exc:
                self.error = f"{DEV_KMSG}: {exc.strerror}"
                return None
        lines = []
        while True:
            try:
                record = os.read(self._fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before we read them: go on
                    continue
                self.error = f"{DEV_KMSG}: {exc.strerror}"
                return None
            if not record:
                break
            # "prio,seq,usec,flags;message\n continuation" -> the message
            lines.append(record.decode(errors="replace").split(";", 1)[-1].split("\n", 1)[0])
        self.error = None
        return lines

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def kernel_log_this_boot(path: Path | None = None) -> tuple[list[str] | None, str]:
    """(lines, source) of the kernel log since boot, for a one-shot check (doctor). Lines None = unknown."""
    log = KernelLog(path)
    try:
        lines = log.read_new()
    finally:
        log.close()
    if lines is not None or path is not None:
        return lines, log.source if lines is not None else f"{log.source} ({log.error})"
    for cmd in (["journalctl", "-k", "-b", "--no-pager", "-q"], ["dmesg"]):
        if shutil.which(cmd[0]):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
            except (OSError, subprocess.SubprocessError):
                continue
            if r.returncode == 0:
                return r.stdout.splitlines(), " ".join(cmd)
    return None, f"{log.source} ({log.error}); journalctl -k and dmesg not readable either"
