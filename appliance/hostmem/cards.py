"""This node's discrete GPUs as NVML reports them, and the cards a second engine may take beside a running serve (a
side-by-side candidate of `qualify`, the bridge of `upgrade promote --beside`).

A card is taken while a compute process runs on it, or while more than IDLE_USED_GIB of its memory is in use: inside
a container NVML lists only the processes of its own PID namespace, so another container's engine shows as memory
alone. A free card also needs the engine's K23 need in free memory.

The second engine is pinned by `CUDA_VISIBLE_DEVICES` with NVML's indices under `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
CUDA's default order (fastest first) need not be NVML's, and vLLM maps a numeric entry to an NVML index as it
stands (`device_control_id_to_physical_device_id`, vllm/platforms/cuda.py; its `log_warnings` asks for PCI_BUS_ID
where the cards differ). The running serve keeps the cards it has: it is found by its processes, not by its order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.errors import ApplianceError
from appliance.hostmem.sources import GIB

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
ORDER_ENV = "CUDA_DEVICE_ORDER"
PCI_ORDER = "PCI_BUS_ID"
IDLE_USED_GIB = 2.0
"""Memory in use on a card that runs nothing of ours to see: the driver's reserve and a display's desktop stay under
it (estimate); an engine (weights and KV) is far above it."""


@dataclass(frozen=True)
class Card:
    index: int
    """NVML's index (PCI bus order)."""
    uuid: str
    free_gib: float
    total_gib: float
    processes: int | None
    """Compute processes running on it; None where NVML would not list them (the card counts as taken)."""

    @property
    def taken(self) -> bool:
        return self.processes != 0 or self.total_gib - self.free_gib > IDLE_USED_GIB

    def describe(self) -> str:
        running = "compute processes unknown" if self.processes is None else f"{self.processes} compute process(es)"
        return f"GPU {self.index}: {self.free_gib:.1f} of {self.total_gib:.1f} GiB free, {running}"


@dataclass(frozen=True)
class CardPick:
    """The cards a second engine takes: none of them taken, each with its need free."""

    cards: tuple[Card, ...]

    @property
    def indices(self) -> str:
        return ",".join(str(c.index) for c in self.cards)

    @property
    def least_free_gib(self) -> float:
        return min(c.free_gib for c in self.cards)

    def env(self) -> dict[str, str]:
        return {VISIBLE_ENV: self.indices, ORDER_ENV: PCI_ORDER}


def read_cards() -> tuple[tuple[Card, ...] | None, str]:
    """Every GPU NVML sees on this node, or None with the reason (no driver, no GPU)."""
    try:
        import pynvml  # from nvidia-ml-py

        pynvml.nvmlInit()
    except Exception as exc:  # NVML raises its own error types, and a missing library is an OSError
        return None, f"NVML: {exc}"
    try:
        cards = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            cards.append(Card(i, uuid.decode() if isinstance(uuid, bytes) else str(uuid), memory.free / GIB,
                              memory.total / GIB, _processes(pynvml, handle)))
    except Exception as exc:
        return None, f"NVML: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return (tuple(cards), f"NVML, {len(cards)} GPU(s)") if cards else (None, "NVML: no GPU")


def _processes(pynvml: Any, handle: Any) -> int | None:
    try:
        return len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except pynvml.NVMLError:  # not supported on this card or driver: its memory is still read
        return None


def visible(cards: Sequence[Card], environ: Mapping[str, str]) -> tuple[Card, ...]:
    """The cards this process's `CUDA_VISIBLE_DEVICES` lets it use (all where unset), as CUDA reads the list: a
    number is NVML's index (as vLLM maps it, `device_control_id_to_physical_device_id`), a UUID may be shortened to a
    unique prefix, `-1` hides itself and what follows, a card named twice counts once. Exit 2 where an entry names
    no whole card NVML has (a MIG instance, an unknown card)."""
    value = environ.get(VISIBLE_ENV)
    if value is None:
        return tuple(cards)
    chosen: list[Card] = []
    for entry in (e.strip() for e in value.split(",") if e.strip()):
        if entry == "-1":
            break
        if entry.isdigit():
            found = [c for c in cards if c.index == int(entry)]
        else:
            found = [c for c in cards if c.uuid.startswith(entry)] if entry.startswith("GPU-") else []
        if len(found) != 1:
            raise ApplianceError(f"{VISIBLE_ENV}={value}: entry {entry!r} names no single GPU that NVML has",
                                 field=VISIBLE_ENV, value=value,
                                 fix="name whole cards, by NVML's index or UUID (nvidia-smi -L), or unset it",
                                 reason="a second engine is given cards the running serve does not hold, among those "
                                        "this process may use: an entry that is not one whole card cannot be matched")
        if found[0] not in chosen:
            chosen.append(found[0])
    return tuple(chosen)


def pick_free(cards: Sequence[Card], count: int, need_gib: float) -> tuple[CardPick | None, str]:
    """The `count` lowest-numbered cards that are not taken and have `need_gib` free, and what was found; None when
    there are fewer."""
    fit = [c for c in cards if not c.taken and c.free_gib >= need_gib]
    if len(fit) >= count:
        pick = CardPick(tuple(fit[:count]))
        return pick, f"NVML: GPU(s) {pick.indices} run nothing, {pick.least_free_gib:.1f} GiB free"
    return None, (f"NVML: {len(fit)} of {len(cards)} GPU(s) run nothing and have {need_gib:.1f} GiB free, "
                  f"and a second engine needs {count} of its own ({'; '.join(c.describe() for c in cards)})")
