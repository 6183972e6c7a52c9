"""One download, every rank: a verified snapshot copied to other ranks with rsync (W4).

What moves is one revision of one checkpoint in huggingface_hub's own cache layout, so a rank that receives it
serves it exactly as if it had downloaded it: the blobs the snapshot's links point at, the links
(`snapshots/<commit>/…`, relative, so they resolve on arrival) and the listing huggingface_hub recorded
(`trees/<commit>.json`), which is what the receiving rank verifies against. Nothing else of either cache is read
or written. The sender checks its copy complete before anything is sent (W3), and the receiver's copy is checked
again on arrival: rsync compares every file by whole-file checksum and verifies each one it sends, and the
appliance hashes the arrived files against the listing before they are served.

Two directions, one tool:
- push (`appliance sync-model --to PEER…`): the peer runs `appliance sync-model --receive` (an rsync daemon over
  its hub cache, writable, limited to the senders it allows), or PEER is a folder (another rank's volume);
- pull (the multi-node launch step, `distributed.sync_model`): the head serves its snapshot read-only while the
  ranks meet, and each worker whose copy is not complete fetches what it lacks before it joins.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.bounds import check_host, check_port
from appliance.errors import ApplianceError
from appliance.paths import make_dir
from appliance.weights.hub import repo_folder
from appliance.weights.rsync import (
    AUTH_USER,
    MODULE_HUB,
    MODULE_MODEL,
    RsyncStats,
    adopt_cut_files,
    run_rsync,
    transfer_args,
)
from appliance.weights.snapshot import SnapshotCheck, check_hub_snapshot

Report = Callable[[str], None]


@dataclass(frozen=True)
class Peer:
    """Where a snapshot goes (push) or comes from (pull): an rsync daemon, or a folder."""

    spec: str
    """As the user gave it."""
    url: str
    """rsync's form: `rsync://host:port/module/` or an absolute folder path ending in `/`."""

    @property
    def is_daemon(self) -> bool:
        return self.url.startswith("rsync://")


def _host_port(spec: str, default_port: int, field: str) -> tuple[str, int]:
    host, port = spec, default_port
    if spec.startswith("["):  # [v6]:port
        end = spec.find("]")
        host, rest = spec[1:end], spec[end + 1:]
        if rest.startswith(":"):
            port = int(rest[1:]) if rest[1:].isdigit() else -1
    elif spec.count(":") == 1:
        host, _, raw = spec.partition(":")
        port = int(raw) if raw.isdigit() else -1
    check_host(field, host)
    check_port(field, port)
    return host, port


def parse_peer(spec: str, default_port: int, module: str, field: str = "--to") -> Peer:
    """PEER: HOST[:PORT] (a daemon of `appliance sync-model`, port default `default_port`), or an absolute folder
    (a hub cache, e.g. another rank's volume mounted here)."""
    if spec.startswith("/"):
        return Peer(spec, spec.rstrip("/") + "/")
    if spec.startswith("rsync://") or "/" in spec:
        raise ApplianceError(f"{field} {spec!r} is neither HOST[:PORT] nor an absolute folder", field=field,
                             value=spec, fix="give the peer's fabric address (HOST or HOST:PORT) or a folder path")
    host, port = _host_port(spec, default_port, field)
    return daemon_peer(host, port, module, spec)


def daemon_peer(host: str, port: int, module: str, spec: str | None = None) -> Peer:
    """The rsync daemon of `appliance sync-model` at host:port (the user is used only when a secret is set)."""
    shown = f"[{host}]" if ":" in host else host
    return Peer(spec or f"{shown}:{port}", f"rsync://{AUTH_USER}@{shown}:{port}/{module}/")


def transfer_list(check: SnapshotCheck, storage: Path) -> list[str]:
    """The paths under the repository's cache folder that make up the snapshot `check` found complete."""
    rev = check.revision
    assert rev is not None and check.folder is not None
    root = storage.resolve()
    out = {f"trees/{rev}.json"} if (storage / "trees" / f"{rev}.json").is_file() else set()
    for item in check.expected:
        link = check.folder / item.path
        out.add(f"snapshots/{rev}/{item.path}")
        if link.is_symlink():
            out.add(link.resolve().relative_to(root).as_posix())
    return sorted(out)


def _list_file(paths: list[str], tmp: Path) -> Path:
    listing = tmp / "files"
    listing.write_text("".join(f"{p}\n" for p in paths))
    return listing


def push(checkpoint: str, revision: str, peers: list[Peer], *, cache: Path | None = None,
         stamp_root: Path | None = None, checksum: bool = True, bwlimit_kib: int | None = None,
         secret: str | None = None, report: Report = print,
         on_start: Callable[[subprocess.Popen[str]], None] | None = None) -> dict[str, RsyncStats]:
    """Send this node's snapshot of `checkpoint`@`revision` to each peer; its figures per peer. Refused before
    anything is sent when this node's own copy is not complete (W3)."""
    check = check_hub_snapshot(checkpoint, revision, cache, stamp_root=stamp_root)
    if not check.complete:
        raise check.refusal("complete this node's copy first (`appliance fetch-model`), then sync it",
                            consequence="nothing sent")
    storage = repo_folder(checkpoint, cache)
    out: dict[str, RsyncStats] = {}
    with tempfile.TemporaryDirectory(prefix="appliance-sync-") as tmp:
        listing = _list_file(transfer_list(check, storage), Path(tmp))
        for peer in peers:
            if not peer.is_daemon:  # another rank's volume: this process is its receiver
                adopt_killed_copies(Path(peer.url) / storage.name, report)
            dest = f"{peer.url}{storage.name}/"
            stats = run_rsync([*transfer_args(checksum=checksum, bwlimit_kib=bwlimit_kib), f"--files-from={listing}",
                               f"{storage}/", dest], what=f"sync of {checkpoint}@{revision} to {peer.spec}",
                              secret=secret, on_start=on_start)
            report(f"sync-model: {peer.spec}: {stats.render()}")
            out[peer.spec] = stats
    return out


def adopt_killed_copies(repo: Path, report: Report) -> None:
    """What a receiver killed in an earlier copy left in `repo`, made the basis of this one (rsync.adopt_cut_files)."""
    for name in adopt_cut_files(repo):
        report(f"sync-model: {repo.name}: blob {name[:12]} was cut by a killed copy; it resumes from what arrived")


def wait_for_daemon(host: str, port: int, timeout_s: float) -> None:
    """Until the head's daemon accepts connections (a worker may start first); ApplianceError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=2):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ApplianceError(
                    f"no snapshot is served at {host}:{port} after {timeout_s:g} s: {exc.strerror or exc}",
                    field="distributed.sync_model", value=True,
                    fix="start `appliance run` on the head with the same profile (distributed.sync_model: true), "
                        "its copy complete; check that the port (master port + 3) is reachable on the fabric",
                    reason="W4: a worker takes the head's verified snapshot before it joins the rendezvous") from None
            time.sleep(1)


def pull(checkpoint: str, revision: str, source: Peer, *, cache: Path | None = None, checksum: bool = True,
         secret: str | None = None, report: Report = print) -> RsyncStats:
    """Fetch `checkpoint`@`revision` from a peer serving its repository folder (module `model`) into this node's
    hub cache: first the listing and the snapshot's links, then the blobs those links name. Returns the figures of
    both steps together; the caller verifies the result (the arrival check)."""
    storage = make_dir(repo_folder(checkpoint, cache), "HF_HOME")
    adopt_killed_copies(storage, report)
    what = f"sync of {checkpoint}@{revision} from {source.spec}"
    args = transfer_args(checksum=checksum)
    with tempfile.TemporaryDirectory(prefix="appliance-sync-") as tmp:
        links = _list_file([f"trees/{revision}.json", f"snapshots/{revision}"], Path(tmp))
        first = run_rsync([*args, "--recursive", f"--files-from={links}", source.url, f"{storage}/"], what=what,
                          secret=secret)
        snapshot = storage / "snapshots" / revision
        blobs = sorted({(Path(dirpath) / name).resolve().relative_to(storage.resolve()).as_posix()
                        for dirpath, _, names in os.walk(snapshot) for name in names
                        if (Path(dirpath) / name).is_symlink()})
        second = run_rsync([*args, f"--files-from={_list_file(blobs, Path(tmp))}", source.url, f"{storage}/"],
                           what=what, secret=secret)
    total = RsyncStats(first.files + second.files, first.files_sent + second.files_sent,
                       first.total_bytes + second.total_bytes, first.literal_bytes + second.literal_bytes,
                       first.matched_bytes + second.matched_bytes, first.sent_bytes + second.sent_bytes,
                       first.received_bytes + second.received_bytes, first.seconds + second.seconds,
                       first.itemized + second.itemized)
    report(f"sync-model: from {source.spec}: {total.render()}")
    return total


__all__ = ["MODULE_HUB", "MODULE_MODEL", "Peer", "adopt_killed_copies", "daemon_peer", "parse_peer", "pull", "push",
           "transfer_list", "wait_for_daemon"]
