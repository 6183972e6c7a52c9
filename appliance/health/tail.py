"""Incremental reading of a growing log: whole lines only, in bounded chunks, rotation and
truncation safe, memory flat in the size of the log.

- rotation (the path now names another file: supervisord's and logrotate's rename): the old file
  is read to its end first, then the new one from its start;
- truncation (copytruncate, or `>` on restart): detected by the size dropping below our offset or
  by the file's first bytes changing; reading restarts at offset 0;
- a partial last line is held back until its newline arrives (a line longer than `max_line` is
  passed on in pieces rather than buffered without bound).

Reads go into one buffer kept for the tailer's life, and each chunk is one copy out of it: a fresh
megabyte per read (and another to join the held-back line) made glibc hand memory back and fault it in
again on every chunk, which cost the scanner more than finding its lines.
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
        self._buf: bytearray | None = None
        self._held = 0
        """Bytes of a partial last line at the start of `_buf` (never more than max_line between reads)."""
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
            if self._held:  # the old file's last line never got its newline
                yield self._take_held() + b"\n"
            self.rotations += 1
            self.close()
            if not self._open():
                return

    @property
    def pending(self) -> bytes:
        """The partial last line held back so far (what a progress bar is drawing now), left in place."""
        return bytes(self._buf[: self._held]) if self._buf is not None and self._held else b""

    def flush(self) -> bytes:
        """The held-back partial last line, for a reader that knows the file is complete."""
        return self._take_held()

    def _take_held(self) -> bytes:
        rest = bytes(self._buf[: self._held]) if self._buf is not None and self._held else b""
        self._held = 0
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
        fh = os.fdopen(fd, "rb", buffering=0)  # readinto straight into our buffer
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
            self._offset, self._held, self._fingerprint = 0, 0, b""
        if self._buf is None:
            self._buf = bytearray(self.max_line + self.chunk_size)
        buf, view = self._buf, memoryview(self._buf)
        fh.seek(self._offset)
        while n := fh.readinto(view[self._held : self._held + self.chunk_size]):
            held, total = self._held, self._held + n
            if len(self._fingerprint) < FINGERPRINT and self._offset < FINGERPRINT:
                self._fingerprint = (self._fingerprint + bytes(view[held : held + min(n, FINGERPRINT)]))[:FINGERPRINT]
            self._offset += n
            self.bytes_read += n
            cut = buf.rfind(b"\n", held, total) + 1  # the held part has no newline
            if cut:
                chunk = bytes(view[:cut])
                buf[: total - cut] = bytes(view[cut:total])  # the new partial line to the front
                self._held = total - cut
                yield chunk
            else:
                self._held = total
            if self._held > self.max_line:
                yield bytes(view[: self._held]) + b"\n"
                self._held = 0
