"""The one writer: every file the appliance writes (receipts, calibrations, launch.json and supervisord.conf, the
canary's state, fabric reports, build inputs) goes through this module.

What it guarantees, whoever gave the path (a flag, a variable, a run folder):
- **Nothing at the path is destroyed.** A target that exists must be a regular file. A device (`/dev/null` as
  root), a FIFO (it would be opened and block), a folder, a socket, or a symlink (`/dev/stdout`; replacing the
  file would replace the link) is refused by name, before anything is written.
- **A missing or wrong parent is an error naming the path**, never a traceback.
- **Readers never see half a file, and a failure leaves nothing behind.** The content goes to a temporary file
  beside the target (same folder, so the rename is atomic), is flushed to disk, and is renamed over the target;
  on any failure the temporary file is removed.
- **Files that belong together are written together or not at all** (`write_files`: launch.json with its
  supervisord.conf, receipt.json with its summary): all are staged and may be verified first; a failure while
  putting them in place puts back what was there before.

Every refusal is an ApplianceError naming the field (the flag or variable the path came from), the path, the fix
and the reason: exit 2 at the CLI. Stdlib only (with the error type), so any command can use it for free.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from appliance.errors import ApplianceError

DEFAULT_MODE = 0o644
"""A new file's permissions (an existing file keeps its own): everything the appliance writes is shareable;
secrets never reach a file (appliance/redact.py)."""

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"))
_WHY = ("writing replaces what is at the path: a device, FIFO, folder or socket would be destroyed or block the "
        "writer, and a symlink would be replaced by a plain file")


def _shown(path: Path) -> str:
    from appliance.bounds import show

    return show(str(path), 512)


def _error(path: Path, field: str, what: str, fix: str, reason: str | None = None) -> ApplianceError:
    return ApplianceError(f"{field}: {_shown(path)} {what}", field=field, value=_shown(path), fix=fix, reason=reason)


def kind_of(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO", "a symlink", ...); None for a regular file."""
    return None if stat.S_ISREG(mode) else next((name for test, name in _KINDS if test(mode)), "no regular file")


def check_target(path: Path, field: str) -> os.stat_result | None:
    """The target's lstat when it is a regular file, None when nothing is there; ApplianceError when it is anything
    else, or when its folder is missing, is no folder, or cannot be read."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # the folder's own checks below say which
        st = None
    except OSError as exc:
        raise _error(path, field, f"cannot be written: {exc.strerror}", f"give {field} a path this user may write"
                     ) from None
    if st is not None:
        kind = kind_of(st.st_mode)
        if kind is not None:
            target = ""
            if stat.S_ISLNK(st.st_mode):
                with contextlib.suppress(OSError):
                    target = f" (to {_shown(Path(os.readlink(path)))})"
            raise _error(path, field, f"is {kind}{target}, not a regular file",
                         f"give {field} the path of a regular file (or of one to create)", _WHY)
    parent = path.parent
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise _error(path, field, f"cannot be written: its folder {_shown(parent)} does not exist",
                     f"create {_shown(parent)} first, or give {field} a path in an existing folder") from None
    except OSError as exc:
        raise _error(path, field, f"cannot be written: its folder: {exc.strerror}",
                     f"give {field} a path in a folder this user may write") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise _error(path, field, f"cannot be written: {_shown(parent)} is not a folder",
                     f"give {field} a path inside a folder")
    return st


def _stage(path: Path, data: bytes, field: str, mode: int) -> Path:
    """`data` in a new temporary file beside `path`, flushed to disk; its path. Nothing is left on failure."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name[:80]}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _error(path, field, f"cannot be written: {exc.strerror}",
                     f"give {field} a path in a folder this user may write") from None
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _error(path, field, f"cannot be written: {exc.strerror}",
                         "free space on that file system, or give another path") from None
        raise
    return tmp


def _encoded(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def _mode_for(existing: os.stat_result | None, mode: int | None) -> int:
    if mode is not None:
        return mode
    return stat.S_IMODE(existing.st_mode) if existing is not None else DEFAULT_MODE


def _put(tmp: Path, path: Path, field: str) -> None:
    """Rename the staged file over the target, checking once more that the target is still no device, folder or
    link (something may have been put there since the first look)."""
    check_target(path, field)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        raise _error(path, field, f"cannot be written: {exc.strerror}", f"give {field} a path this user may write"
                     ) from None


def write_file(path: Path, content: str | bytes, *, field: str, mode: int | None = None) -> Path:
    """Write `content` (text as UTF-8) to `path` atomically; refuse a target that is no regular file. `field` names
    where the path came from (`--record-calibration`, `--run-dir`, ...). Returns `path`."""
    path = Path(path)
    existing = check_target(path, field)
    tmp = _stage(path, _encoded(content), field, _mode_for(existing, mode))
    try:
        _put(tmp, path, field)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: Path, data: Any, *, field: str, indent: int | None = 1, mode: int | None = None) -> Path:
    """`data` as JSON (and a final newline) through write_file. NaN and infinity are refused: they are no JSON."""
    try:
        text = json.dumps(data, indent=indent, allow_nan=False) + "\n"
    except ValueError as exc:
        raise ApplianceError(f"{field}: cannot write {_shown(path)}: {exc}", field=field, value=_shown(path),
                             fix="report this: the appliance wrote a value JSON cannot hold") from None
    return write_file(path, text, field=field, mode=mode)


def write_files(files: Mapping[Path, str | bytes], *, field: str,
                verify: Callable[[Mapping[Path, Path]], None] | None = None, mode: int | None = None) -> None:
    """Write several files as one: every target is checked and every file staged first; `verify` (given target ->
    staged path) may read the staged files and raise to write none of them; then they are renamed into place in
    order. Should a rename fail part way, the files already replaced get their previous content back (or are
    removed when they were new), so the set is written as a whole or not at all."""
    targets = [Path(p) for p in files]
    existing = {p: check_target(p, field) for p in targets}
    staged: dict[Path, Path] = {}
    backups: dict[Path, Path] = {}
    replaced: list[Path] = []
    try:
        for path, content in zip(targets, files.values(), strict=True):
            staged[path] = _stage(path, _encoded(content), field, _mode_for(existing[path], mode))
        if verify is not None:
            verify(staged)
        for path in targets:
            if existing[path] is not None:
                backups[path] = _backup(path, field)
            _put(staged[path], path, field)
            replaced.append(path)
    except BaseException:
        for path in replaced:  # put back what was there before
            with contextlib.suppress(OSError):
                if path in backups:
                    os.replace(backups.pop(path), path)
                else:
                    path.unlink(missing_ok=True)
        raise
    finally:
        for leftover in (*staged.values(), *backups.values()):
            leftover.unlink(missing_ok=True)


def _backup(path: Path, field: str) -> Path:
    """A second name for the target's current content (a hard link beside it), to put back on a failure."""
    for attempt in range(100):
        backup = path.with_name(f".{path.name[:80]}.{os.getpid()}.{attempt}.bak")
        try:
            os.link(path, backup, follow_symlinks=False)
            return backup
        except FileExistsError:
            continue
        except OSError as exc:
            raise _error(path, field, f"cannot be written safely: {exc.strerror}",
                         f"give {field} a folder on a file system with hard links") from None
    raise _error(path, field, "cannot be written safely: no free backup name beside it", "remove the stale .bak files")


def open_for_writing(path: Path, *, field: str, binary: bool = False) -> IO[Any]:
    """A regular file opened for writing from its start (created when missing), for output written as it comes
    (a tool's log). The same refusals as write_file; a FIFO raced into place is refused on the open handle."""
    path = Path(path)
    check_target(path, field)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, DEFAULT_MODE)
    except OSError as exc:
        raise _error(path, field, f"cannot be written: {exc.strerror}", f"give {field} a path this user may write"
                     ) from None
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise _error(path, field, f"is {kind}, not a regular file", f"give {field} the path of a regular file",
                         _WHY)
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb" if binary else "w")


def copy_file(src: Path, dst: Path, *, field: str, sha256: str | None = None, mode: int | None = None) -> int:
    """Copy the regular file `src` to `dst` the way write_file writes: `src` opened without following a link or
    blocking on a FIFO, `dst` refused unless a regular file or nothing, the copy staged beside it and renamed over
    it. With `sha256`, the bytes are hashed on the way and a copy with another digest is refused (what was checked
    is what lands). On any failure the temporary file is removed and the error names the file that failed (the
    source that could not be read, or the target that could not be written). Returns the bytes copied."""
    import hashlib

    src, dst = Path(src), Path(dst)
    existing = check_target(dst, field)
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _error(src, field, f"cannot be read: {exc.strerror}", "give the bundle (or the source) again, whole"
                     ) from None
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise _error(src, field, f"is {kind}, not a regular file", "give a folder of regular files", _WHY)
        os.set_blocking(fd, True)
        reader = os.fdopen(fd, "rb")
        fd = -1
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        tfd, name = tempfile.mkstemp(prefix=f".{dst.name[:80]}.", suffix=".tmp", dir=dst.parent)
    except OSError as exc:
        reader.close()
        raise _error(dst, field, f"cannot be written: {exc.strerror}",
                     f"give {field} a path in a folder this user may write") from None
    tmp = Path(name)
    digest = hashlib.sha256()
    copied = 0
    try:
        with reader:
            try:
                while True:
                    try:
                        chunk = reader.read(1 << 20)
                    except OSError as exc:
                        raise _error(src, field, f"cannot be read: {exc.strerror}", "give the source again, whole"
                                     ) from None
                    if not chunk:
                        break
                    digest.update(chunk)
                    view = memoryview(chunk)
                    while view:  # unbuffered: a failed write is seen here, not lost in a later close
                        try:
                            view = view[os.write(tfd, view):]
                        except OSError as exc:
                            raise _error(dst, field, f"cannot be written: {exc.strerror}",
                                         "free space on that file system, or give another path") from None
                    copied += len(chunk)
                try:
                    os.fsync(tfd)
                except OSError as exc:
                    raise _error(dst, field, f"cannot be written: {exc.strerror}",
                                 "free space on that file system, or give another path") from None
            finally:
                os.close(tfd)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise _error(src, field, f"changed while it was copied (sha256 {digest.hexdigest()[:12]}, "
                         f"{sha256[:12]} expected)", "verify the source again and copy it whole")
        os.chmod(tmp, _mode_for(existing, mode))
        _put(tmp, dst, field)
    finally:
        tmp.unlink(missing_ok=True)
    return copied
