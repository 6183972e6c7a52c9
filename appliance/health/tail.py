"""Incremental reading of a growing log: whole lines only, in bounded chunks, rotation and
truncation safe, memory flat in the size of the log.

- rotation (the path now names another file: supervisord's and logrotate's rename): the old file
  is read to its end first, then the new one from its start;
- truncation (copytruncate, or `>` on restart): detected by the size dropping below our offset or
  by the file's first bytes changing; reading restarts at offset 0;
- a partial last line is held back until its newline arrives (a line longer than `max_line` is
  passed on in pieces rather than buffered without bound).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

FINGERPRINT = 256


class LogTailer:
    def __init__(self, path: Path, *, chunk_size: int = 1 << 20, max_line: int = 1 << 16) -> None:
        self.path = path
        self.chunk_size = chunk_size
        self.max_line = max_line
        self._fh: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._fingerprint = b""
        self.rotations = 0
        self.truncations = 0
        self.bytes_read = 0

    def poll(self) -> Iterator[bytes]:
        """Chunks of whole lines appended since the last call (each at most chunk_size + max_line)."""
        if self._fh is None and not self._open():
            return
        while True:
            yield from self._drain()
            if not self._replaced():
                return
            if self._partial:  # the old file's last line never got its newline
                yield self._partial + b"\n"
                self._partial = b""
            self.rotations += 1
            self.close()
            if not self._open():
                return

    @property
    def pending(self) -> bytes:
        """The partial last line held back so far (what a progress bar is drawing now), left in place."""
        return self._partial

    def flush(self) -> bytes:
        """The held-back partial last line, for a reader that knows the file is complete."""
        rest, self._partial = self._partial, b""
        return rest

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh, self._ident, self._offset, self._fingerprint = None, None, 0, b""

    def _open(self) -> bool:
        try:  # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, stalling the poll loop
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO, a folder, a device: no log to tail
            os.close(fd)
            return False
        fh = os.fdopen(fd, "rb")
        self._fh, self._ident, self._offset, self._fingerprint = fh, (st.st_dev, st.st_ino), 0, b""
        return True

    def _replaced(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # rotated away, new file not there yet: keep the old handle for now
        return (st.st_dev, st.st_ino) != self._ident

    def _truncated(self, fh: BinaryIO) -> bool:
        if os.fstat(fh.fileno()).st_size < self._offset:
            return True
        if self._fingerprint:
            return os.pread(fh.fileno(), len(self._fingerprint), 0) != self._fingerprint
        return False

    def _drain(self) -> Iterator[bytes]:
        fh = self._fh
        assert fh is not None
        if self._truncated(fh):
            self.truncations += 1
            self._offset, self._partial, self._fingerprint = 0, b"", b""
        fh.seek(self._offset)
        while data := fh.read(self.chunk_size):
            if len(self._fingerprint) < FINGERPRINT and self._offset < FINGERPRINT:
                self._fingerprint = (self._fingerprint + data)[:FINGERPRINT]
            self._offset += len(data)
            self.bytes_read += len(data)
            buf = self._partial + data if self._partial else data
            cut = buf.rfind(b"\n") + 1
            if cut:
                self._partial = buf[cut:]
                yield buf[:cut]
            else:
                self._partial = buf
            if len(self._partial) > self.max_line:
                yield self._partial + b"\n"
                self._partial = b""
