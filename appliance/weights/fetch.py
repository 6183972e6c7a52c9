"""Download a pinned checkpoint with huggingface_hub, check it complete (W3), and fetch again what is damaged.

`snapshot_download` skips a file that exists, whatever its content: a truncated or corrupt blob stays. So after the
download every file is checked against the hub's listing (size, and sha256 / git sha1), and each damaged one is
downloaded again on its own (`hf_hub_download(force_download=True)`) before a second check decides.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.weights.snapshot import SnapshotCheck, check_hub_snapshot, resume_hint

Report = Callable[[str], None]
DAMAGED = ("size", "hash", "unreadable")


def _download_errors() -> tuple[type[BaseException], ...]:
    """What a download raises when the hub or the network fails: huggingface_hub's errors and its HTTP client's."""
    import importlib

    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    errors: list[type[BaseException]] = [HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError]
    for client in ("httpx2", "httpx"):  # huggingface_hub 2.x uses httpx2
        try:
            errors.append(importlib.import_module(client).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def fetch(checkpoint: str, revision: str, *, profile_name: str | None = None, cache: Path | None = None,
          endpoint: str | None = None, max_workers: int = 8, stamp_root: Path | None = None,
          report: Report = print) -> SnapshotCheck:
    """The complete, verified snapshot of `checkpoint` at `revision`, downloaded into the hub cache (`cache`; None =
    huggingface_hub's own default, from HF_HOME / HF_HUB_CACHE). `endpoint` None = the library's (HF_ENDPOINT).
    ApplianceError (exit 2) when the download fails or what arrived is still incomplete, naming what is missing."""
    from huggingface_hub import hf_hub_download, snapshot_download

    errors = _download_errors()
    try:
        snapshot_download(checkpoint, revision=revision, cache_dir=cache, endpoint=endpoint, max_workers=max_workers)
    except errors as exc:
        state = check_hub_snapshot(checkpoint, revision, cache, deep=False)
        so_far = f"; on disk now: {state.summary()}" if state.folder is not None else ""
        raise ApplianceError(
            f"download of {checkpoint}@{revision} failed: {type(exc).__name__}: {exc}{so_far}",
            field="model.checkpoint", value=f"{checkpoint}@{revision}",
            fix="check the network, HF_TOKEN (gated repositories) and model.revision; run the same command again to "
                "fetch what is still missing (files already complete are kept)") from None
    check = check_hub_snapshot(checkpoint, revision, cache, deep=True, stamp_root=stamp_root)
    damaged = [p for p in check.problems if p.kind in DAMAGED]
    if damaged:
        report(f"fetch-model: {len(damaged)} file(s) on disk are damaged; fetching them again: "
               + ", ".join(p.render() for p in damaged))
        for problem in damaged:
            try:
                hf_hub_download(checkpoint, problem.path, revision=revision, cache_dir=cache, endpoint=endpoint,
                                force_download=True)
            except errors as exc:
                raise ApplianceError(f"fetching {problem.path} of {checkpoint}@{revision} again failed: "
                                     f"{type(exc).__name__}: {exc}", field="model.checkpoint",
                                     value=f"{checkpoint}@{revision}",
                                     fix="check the network and run the same command again") from None
        check = check_hub_snapshot(checkpoint, revision, cache, deep=True, stamp_root=stamp_root)
    if not check.complete:
        raise check.refusal(resume_hint(profile_name), consequence="the download is not complete")
    return check
