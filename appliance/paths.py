"""Where the appliance's data lives: $APPLIANCE_ROOT (the images), else the checkout the package sits in, else the
copy an installed wheel carries (appliance/_data/, mapped from the checkout's root at build time by pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import sys
from functools import cache
from pathlib import Path

DATA = ("versions.json", "profiles", "channels", "healthchecks", "monitoring")
"""What the CLI reads from the data root; the wheel carries each (pyproject.toml's package-data for appliance._data,
held to this list by tooling/tests/test_packaging.py)."""

PACKAGE = Path(__file__).resolve().parent
PACKAGED_DATA = PACKAGE / "_data"


@cache
def data_root() -> Path:
    """The folder holding versions.json, profiles/, channels/, healthchecks/ and monitoring/: $APPLIANCE_ROOT, else
    the checkout (versions.json beside the package: a clone, an editable install), else the installed wheel's copy.
    A checkout wins over the packaged copy so that an edit to a profile is what the tool reads."""
    env = os.environ.get("APPLIANCE_ROOT")
    if env:
        return Path(env)
    for root in (PACKAGE.parent, PACKAGED_DATA):
        if (root / "versions.json").is_file():
            return root
    # Neither: readers name the missing file and the APPLIANCE_ROOT fix (e.g. a wheel built from a tree without
    # the data, as the image's wheel stage builds it; the image sets APPLIANCE_ROOT).
    return PACKAGE.parent


def versions_path() -> Path:
    """The version lock, by lockfile.find_versions' one precedence ($APPLIANCE_VERSIONS, $APPLIANCE_ROOT, the checkout,
    the wheel's copy: the image build's tools find it the same way); none anywhere: data_root's, which its reader
    names as missing."""
    from appliance.errors import ApplianceError
    from appliance.lockfile import find_versions

    try:
        return find_versions(PACKAGE)
    except ApplianceError:
        return data_root() / "versions.json"


def profiles_dir() -> Path:
    return data_root() / "profiles"


def healthchecks_dir() -> Path:
    return data_root() / "healthchecks"


def appliance_home() -> Path:
    """Root of the appliance's own state: models it prepared, keyed caches, receipts."""
    return Path(os.environ.get("APPLIANCE_HOME") or Path.home() / ".cache" / "appliance").expanduser()


def venv_executable(name: str) -> str | None:
    """A console script of this environment (beside the interpreter) first, then PATH: a supervisord or a
    `vllm` elsewhere on PATH would be another install than the one the lock checked."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def make_dir(path: Path, field: str) -> Path:
    """A folder the appliance writes into, created when missing; ApplianceError naming `field` (the flag or
    variable it came from) and the path when it cannot be (a file in the way, no permission, a read-only mount)."""
    from appliance.bounds import check_text, show
    from appliance.errors import ApplianceError

    check_text(field, str(path), max_bytes=4096)
    shown = show(str(path), 512)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ApplianceError(f"{field}: {shown} is not a directory", field=field, value=shown,
                             fix=f"point {field} at a folder (or remove the file in its place)") from None
    except OSError as exc:
        raise ApplianceError(f"{field}: cannot create {shown}: {exc.strerror}", field=field, value=shown,
                             fix=f"point {field} at a folder this user may create and write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ApplianceError(f"{field}: {shown} is not writable by this user", field=field, value=shown,
                             fix=f"point {field} at a writable folder, or fix its owner")
    return path


def read_capped(path: Path, field: str, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`; ApplianceError otherwise. Checked on the open handle
    (O_NONBLOCK) before anything is read, so a FIFO put where a file was expected is refused rather than blocking
    the reader, and a folder or a device is refused rather than read."""
    from appliance.bounds import show
    from appliance.errors import ApplianceError
    from appliance.safe_write import kind_of

    shown = show(str(path), 512)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        missing = isinstance(exc, FileNotFoundError)
        raise ApplianceError(f"{what} {shown} " + ("does not exist" if missing else
                             f"cannot be read: {exc.strerror}"), field=field, value=shown,
                             fix=f"give the path of the {what}") from None
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise ApplianceError(f"{what} {shown} is {kind}, not a regular file", field=field, value=shown,
                                 fix=f"give the path of the {what}",
                                 reason="a FIFO or a device would block the reader or never end; a folder is no file")
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ApplianceError(f"{what} {shown} cannot be read: {exc.strerror}", field=field, value=shown,
                             fix=f"give the path of the {what}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:
        raise ApplianceError(f"{what} {shown} is over the {max_bytes:,}-byte limit", field=field,
                             value=shown, fix=f"give the right {what}",
                             reason="the reader caps its input so a huge file cannot exhaust memory")
    return data


def write_json_atomic(path: Path, data: object, *, indent: int = 1) -> None:
    """The old name of `appliance.safe_write.write_json`, kept only so code written before the one writer landed
    still runs through it (the same refusals, nothing left behind). New code calls `write_json` with its `field`."""
    from appliance.safe_write import write_json

    write_json(path, data, field=str(path), indent=indent)


def write_text_atomic(path: Path, text: str) -> None:
    """The old name of `appliance.safe_write.write_file` (see write_json_atomic)."""
    from appliance.safe_write import write_file

    write_file(path, text, field=str(path))
