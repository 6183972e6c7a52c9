"""Cross-rank checks after launch, cheap enough for the probe (stdlib only, no pydantic).

- `head_alive`: a headless worker keeps running after its head died and never notices (K22, seen on
  the CPU build), so a worker's liveness must also ask whether the head still holds the master port.
  With the mp launcher the head's rank-0 worker process hosts torch.distributed's TCPStore on that
  port for the whole life of the serve (and it closes when the head dies); with Ray it is the GCS.
- `nccl_agreement`: after launch, the NCCL each rank really loaded (`vLLM is using nccl==X`, parsed
  by the health checker from each rank's log) must be the same on all of them (K15).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


def head_alive(master_addr: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when a TCP connection to the head's master port succeeds (it is closed at once)."""
    try:
        with socket.create_connection((master_addr, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class NcclVerdict:
    status: Literal["pass", "fail", "unknown"]
    message: str


def nccl_agreement(versions: Mapping[int, str | None]) -> NcclVerdict:
    """Compare `vLLM is using nccl==X` across ranks (rank -> version, None = line not seen yet).

    A missing line is `unknown`, never a silent pass: the rank may not have reached pynccl, or its
    log was not read. Any two different versions are `fail`.
    """
    if not versions:
        return NcclVerdict("unknown", "K15 no rank's NCCL version is known")
    unseen = sorted(rank for rank, v in versions.items() if not v)
    seen = {rank: v for rank, v in versions.items() if v}
    distinct = sorted(set(seen.values()))
    listing = ", ".join(f"rank {rank} {v}" for rank, v in sorted(seen.items()))
    if len(distinct) > 1:
        return NcclVerdict("fail", f"K15 ranks loaded different NCCL versions ({listing}): collectives may hang; "
                                   "install the locked nvidia-nccl wheel on every node")
    if unseen:
        return NcclVerdict("unknown", f"K15 no `vLLM is using nccl==` line yet from rank(s) {unseen}"
                                      + (f" ({listing})" if listing else ""))
    return NcclVerdict("pass", f"K15 every rank loaded nccl=={distinct[0]}")


def nccl_pair(head: str | None, worker: str | None, worker_rank: int = 1) -> NcclVerdict:
    """The two-rank case: the head's and one worker's version strings."""
    return nccl_agreement({0: head, worker_rank: worker})
