"""U5: a channel change is one decision for every rank of a multi-node serve.

Before a promote, the head's exporter says which channel (and lock digest) each rank's exporter judges: the head's
own, and each worker's as the head last heard it (`/status` -> `ranks.peers`). A rank on another lock, or one whose
lock is unknown (its exporter did not answer), refuses the promote: switching would leave the serve half-upgraded,
and ranks on different engine lines hang in the NCCL handshake instead of failing (K15).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.errors import ApplianceError
from appliance.rules.upgrade import RULES

if TYPE_CHECKING:
    from appliance.health.monitor import StatusJson


def rank_locks(status: StatusJson) -> dict[int, tuple[str | None, str | None, str | None]]:
    """rank -> (channel, lock digest, why unknown) from the head's /status."""
    out: dict[int, tuple[str | None, str | None, str | None]] = {
        0: (status.get("channel"), status.get("lock_digest"), None)}
    for peer in ((status.get("ranks") or {}).get("peers") or []):
        rank = peer.get("rank")
        if isinstance(rank, int):
            out[rank] = (peer.get("channel"), peer.get("lock_digest"),
                         None if peer.get("lock_digest") else peer.get("error") or "its exporter has not said")
    return out


def check_one_lock(status: StatusJson | None, nodes: int, where: str) -> str:
    """ApplianceError (exit 2) unless every one of `nodes` ranks reports the head's lock; the agreement as text."""
    u5 = RULES["U5"]
    if status is None:
        raise ApplianceError(f"U5 the head's exporter at {where} did not answer: which lock each rank runs is "
                             f"unknown", field="--exporter", value=where,
                             fix="promote while the serve runs (its head's exporter answering)", reason=u5.reason)
    locks = rank_locks(status)
    head_channel, head_lock, _ = locks[0]
    missing = [r for r in range(1, nodes) if r not in locks]
    unknown = {r: why for r, (_, lock, why) in locks.items() if lock is None}
    other = {r: (ch, lock) for r, (ch, lock, _) in locks.items() if lock is not None and lock != head_lock}
    problems = [f"rank {r}: not among the head's peers" for r in missing]
    problems += [f"rank {r}: lock unknown ({why})" for r, why in sorted(unknown.items())]
    problems += [f"rank {r} runs channel {ch} (lock {str(lock)[:12]}), the head {head_channel} (lock "
                 f"{str(head_lock)[:12]})" for r, (ch, lock) in sorted(other.items())]
    if problems:
        raise ApplianceError(f"U5 the ranks do not all run one lock; promote refused: {'; '.join(problems)}",
                             field="engine.channel", value={r: ch for r, (ch, _, _) in locks.items()},
                             fix=u5.fix, reason=u5.reason)
    return f"all {nodes} ranks run channel {head_channel} (lock {str(head_lock)[:12]})"
