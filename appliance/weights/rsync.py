"""The transfer tool: rsync (client and daemon), and what it reports.

rsync does the hard parts well and has for decades: only missing or differing files move (`--checksum` compares
whole-file checksums, so a corrupt file of the right size and date is found and sent again), a file cut mid-transfer
is kept in a partial folder and becomes the basis of the next attempt (only the rest crosses the wire), and every
file that arrives is checked against the sender's whole-file checksum before it is put in place. Its `--stats`
report gives the figures (literal bytes sent vs matched). The daemon (`rsync --daemon`) is the receiving or serving
end on another rank: no ssh between containers is needed, and it binds the fabric address only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError

PARTIAL_DIR = ".appliance-partial"
"""Where rsync keeps a file cut mid-transfer (inside each destination folder), to resume from it."""
MODULE_HUB = "hub"
"""The receiving daemon's module: this node's whole hub cache, writable (`sync-model --receive`)."""
MODULE_MODEL = "model"
"""The serving daemon's module: one checkpoint's cache folder, read-only (the head, `distributed.sync_model`)."""
AUTH_USER = "appliance"
SECRET_ENV = "APPLIANCE_SYNC_SECRET"
"""When set (the same on every rank), the daemon admits only clients that know it (rsync's challenge-response:
the secret never crosses the wire)."""
Report = Callable[[str], None]


def rsync_binary() -> str:
    found = shutil.which("rsync")
    if not found:
        raise ApplianceError("rsync is not installed", field="rsync", value=None,
                             fix="install it (Debian: apt-get install rsync; the appliance images carry it)",
                             reason="sync-model copies weights with rsync: incremental, resumable, verified")
    return found


@dataclass(frozen=True)
class RsyncStats:
    """The figures of one transfer, from rsync's `--stats`."""

    files: int
    """Regular files in the transfer."""
    files_sent: int
    """Regular files transferred (new or differing)."""
    total_bytes: int
    literal_bytes: int
    """Bytes of file data that crossed the wire (the copy's real cost)."""
    matched_bytes: int
    """Bytes the receiver already had (a partial file being resumed, unchanged blocks)."""
    sent_bytes: int
    received_bytes: int
    seconds: float
    itemized: tuple[str, ...] = ()
    """rsync's one line per changed item (`>f+++++++++ blobs/…` = a new file sent)."""

    def render(self) -> str:
        return (f"{self.files_sent} of {self.files} files sent, {self.literal_bytes:,} bytes of data copied, "
                f"{self.matched_bytes:,} already there, of {self.total_bytes:,} ({self.sent_bytes:,} bytes on the "
                f"wire out, {self.received_bytes:,} in, {self.seconds:.1f} s)")


def parse_stats(text: str, seconds: float) -> RsyncStats:
    def number(label: str) -> int:
        m = re.search(rf"^{label}\s*([\d,]+)", text, re.M)
        return int(m[1].replace(",", "")) if m else 0

    files_line = re.search(r"^Number of files:\s*[\d,]+\s*\(reg:\s*([\d,]+)", text, re.M)
    files = int(files_line[1].replace(",", "")) if files_line else number("Number of files:")
    itemized = tuple(line for line in text.splitlines() if re.match(r"^[<>ch.*][fdLDS][.+cstpoguax?]{9} ", line))
    return RsyncStats(files, number("Number of regular files transferred:"), number("Total file size:"),
                      number("Literal data:"), number("Matched data:"), number("Total bytes sent:"),
                      number("Total bytes received:"), seconds, itemized)


def transfer_args(*, checksum: bool, bwlimit_kib: int | None = None) -> list[str]:
    """The flags every copy uses: archive (symlinks, times), checksum compare, resumable partials, delta transfer
    even between local folders (so a partial file is resumed, not sent whole), figures and itemized changes."""
    args = ["--archive", "--no-whole-file", f"--partial-dir={PARTIAL_DIR}", "--stats", "--itemize-changes",
            "--no-human-readable", "--mkpath"]
    if checksum:
        args.append("--checksum")
    if bwlimit_kib:
        args.append(f"--bwlimit={bwlimit_kib}")
    return args


CUT_FILE = re.compile(r"^\.(?P<name>[0-9a-f]{40,64})\.[A-Za-z0-9]{6}$")
"""The receiver's temporary copy of a blob while it arrives (`.<name>.XXXXXX` beside it): rsync renames it into
place when it is verified, or into the partial folder when the link drops; a receiver killed outright (SIGKILL,
the OOM killer, a node that loses power) leaves it in blobs/."""


def adopt_cut_files(repo: Path) -> list[str]:
    """Blobs a killed receiver left as temporary files in `repo`/blobs, moved into the partial folder where the
    next copy resumes from them (a partial one already there, as long, is kept and the leftover removed).
    Their names, for the caller to report; nothing when there is no such folder."""
    blobs = repo / "blobs"
    try:
        names = sorted(os.listdir(blobs))
    except OSError:
        return []
    adopted = []
    for entry in names:
        cut = CUT_FILE.match(entry)
        path = blobs / entry
        if cut is None or path.is_symlink() or not path.is_file():
            continue
        partial = blobs / PARTIAL_DIR / cut["name"]
        partial.parent.mkdir(exist_ok=True)
        if partial.is_file() and not partial.is_symlink() and partial.stat().st_size >= path.stat().st_size:
            path.unlink()
        else:
            os.replace(path, partial)  # one folder, one file system: a rename
        adopted.append(cut["name"])
    return adopted


def run_rsync(args: list[str], *, what: str, secret: str | None = None, timeout_s: float | None = None,
              on_start: Callable[[subprocess.Popen[str]], None] | None = None) -> RsyncStats:
    """rsync with `args`; its figures, or ApplianceError naming rsync's own complaint."""
    env = {k: v for k, v in os.environ.items() if k != "RSYNC_PASSWORD"}
    if secret:
        env["RSYNC_PASSWORD"] = secret  # rsync reads it for daemon auth; never on the command line
    started = time.monotonic()
    proc = subprocess.Popen([rsync_binary(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    if on_start is not None:
        on_start(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise ApplianceError(f"{what}: rsync did not finish within {timeout_s:g} s", field="rsync",
                             fix="run it again: what arrived is kept and the copy resumes") from None
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        said = [line for line in err.strip().splitlines() if line.strip()]
        errors = [line for line in said if line.startswith("@ERROR") or "failed" in line] or said
        tail = "; ".join(errors[:3])[:600] or f"exit {proc.returncode}"
        raise ApplianceError(f"{what}: rsync failed (exit {proc.returncode}): {tail}", field="rsync",
                             value=proc.returncode,
                             fix="check that the peer runs `appliance sync-model --receive` (or the head serves its "
                                 "snapshot) on that address and port, and that both sides use the same "
                                 f"{SECRET_ENV}; run it again to resume",
                             reason="an interrupted copy keeps what arrived; nothing half-copied is ever served")
    return parse_stats(out, seconds)


# --- the daemon -------------------------------------------------------------------------------------------------

def daemon_config(module: str, path: Path, *, writable: bool, allow: list[str] | None, secrets: Path | None,
                  pid_file: Path) -> str:
    """rsyncd.conf for one module at `path`. Read-only unless `writable`; `allow` limits the clients by address;
    with `secrets`, clients must authenticate as `appliance`."""
    # The daemon keeps this process's user (a root daemon would otherwise drop to `nobody` and write nothing).
    lines = [f"pid file = {pid_file}", f"lock file = {pid_file.with_suffix('.lock')}", "use chroot = no",
             f"uid = {os.getuid()}", f"gid = {os.getgid()}", "numeric ids = yes", "max connections = 16",
             f"[{module}]", f"path = {path}", f"read only = {'no' if writable else 'yes'}", "list = no",
             "munge symlinks = no", "timeout = 600",
             # A snapshot's files are relative symlinks into ../../blobs; they stay inside the module.
             "refuse options = delete delete-before delete-during delete-after delete-excluded remove-source-files"]
    if allow:
        lines += [f"hosts allow = {' '.join(allow)}", "hosts deny = *"]
    if secrets is not None:
        lines += [f"auth users = {AUTH_USER}", f"secrets file = {secrets}", "strict modes = yes"]
    return "\n".join(lines) + "\n"


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def daemon(module: str, path: Path, *, address: str, port: int, writable: bool, allow: list[str] | None = None,
           secret: str | None = None, report: Report | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """An rsync daemon serving `path` as `module` on address:port while the block runs; stopped (TERM, then KILL)
    after."""
    binary = rsync_binary()
    with tempfile.TemporaryDirectory(prefix="appliance-rsyncd-") as tmp:
        conf_dir = Path(tmp)
        secrets = None
        if secret:
            secrets = conf_dir / "secrets"
            fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{AUTH_USER}:{secret}\n")
        conf = conf_dir / "rsyncd.conf"
        conf.write_text(daemon_config(module, path, writable=writable, allow=allow, secrets=secrets,
                                      pid_file=conf_dir / "rsyncd.pid"))
        log = conf_dir / "rsyncd.log"
        proc = subprocess.Popen([binary, "--daemon", "--no-detach", f"--config={conf}", f"--address={address}",
                                 f"--port={port}", f"--log-file={log}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + 10
            while not _port_open(address, port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    why = (proc.stderr.read().decode(errors="replace").strip() if proc.stderr else "") or (
                        log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
                    raise ApplianceError(f"the rsync daemon could not listen on {address}:{port}: {why[-300:]}",
                                         field="port", value=port,
                                         fix="choose another port, or stop what listens there")
                time.sleep(0.05)
            if report is not None:
                report(f"sync-model: rsync daemon on {address}:{port} serving {path} "
                       f"({'receiving' if writable else 'read-only'}{', authenticated' if secret else ''})")
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
