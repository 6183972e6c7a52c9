"""Which files were hashed already, so that a start does not re-read 160 GB of weights.

A stamp records a file's identity on disk (device, inode, size, mtime in ns) with the digest it was found to have.
While the identity holds, the file has not been rewritten and its digest stands; anything that touches the file
(a re-download, a copy, a truncation, rsync replacing it) changes the identity and the file is hashed again. Stamps
live per host under APPLIANCE_HOME/cache/verified/ and are never copied with the weights: on another rank every file is
a new file and is hashed on arrival.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonError, loads
from appliance.paths import read_capped
from appliance.safe_write import write_json

MAX_STAMPS_BYTES = 16 * 1024 * 1024
"""A book holds one short line per file of a checkpoint (tens to a few thousand files)."""


def _identity(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


class StampBook:
    """Stamps of one snapshot folder, in one JSON file; `save()` writes it atomically."""

    def __init__(self, root: Path, folder: Path) -> None:
        key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]
        self.path = root / f"{key}.json"
        self.folder = folder
        self._stamps: dict[str, list[object]] = {}
        self._dirty = False
        try:  # without blocking on a FIFO, bounded, strict: a stamp book of any bytes only costs a re-hash
            data = loads(read_capped(self.path, "APPLIANCE_HOME", MAX_STAMPS_BYTES, "stamp book"), str(self.path))
            if isinstance(data, dict) and isinstance(data.get("stamps"), dict):
                self._stamps = data["stamps"]
        except (ApplianceError, JsonError):
            pass  # no stamps yet (or unreadable ones): every file is hashed

    def vouches(self, name: str, digest: str) -> bool:
        """True when `name` (relative to the folder) was hashed to `digest` and has not changed since."""
        stamp = self._stamps.get(name)
        ident = _identity(self.folder / name)
        return bool(stamp) and ident is not None and stamp == [*ident, digest]

    def record(self, name: str, digest: str) -> None:
        ident = _identity(self.folder / name)
        if ident is not None:
            self._stamps[name] = [*ident, digest]
            self._dirty = True

    def forget(self, name: str) -> None:
        if self._stamps.pop(name, None) is not None:
            self._dirty = True

    def save(self) -> bool:
        """Write the stamps; False when they cannot be written (a read-only home): the next check hashes again,
        which costs time, never correctness."""
        if not self._dirty:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, {"folder": str(self.folder), "stamps": self._stamps}, field="APPLIANCE_HOME")
        except (OSError, ApplianceError):  # a read-only home, or a link or FIFO where the book goes
            return False
        self._dirty = False
        return True


def stamp_root(home: Path) -> Path:
    """Under the cache folder, the one the images keep on a volume (compose's compile-cache, Kubernetes' appliance
    home): a re-created container does not read the weights again."""
    return home / "cache" / "verified"

