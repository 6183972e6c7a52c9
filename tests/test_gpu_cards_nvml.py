"""appliance/hostmem/cards.py against a real NVML and CUDA: a card that runs a compute process is taken, a free
card is picked, and the pin the pick gives (`CUDA_VISIBLE_DEVICES` in NVML's order) puts a CUDA process on that very
card (its UUID).

It needs a GPU with NVML and torch with CUDA; elsewhere (CI's machine has no GPU) it is skipped, and a skip is not a
pass: the closing note says where it ran. It runs with pytest, or as a script on a machine without pytest:
`python tests/test_gpu_cards_nvml.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.hostmem.cards import Card, pick_free, read_cards

HOLD = """import sys, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
print("holding", flush=True)
sys.stdin.read()
"""
UUID = "import torch; print(torch.cuda.get_device_properties(0).uuid)"
MISSING = "needs an NVIDIA GPU with its driver (NVML) and torch with CUDA; this machine has no GPU"


def _cards() -> tuple[Card, ...]:
    cards, source = read_cards()
    if cards is None:
        try:
            import pytest
        except ImportError:
            raise SystemExit(f"not run: {MISSING} ({source})") from None
        pytest.skip(f"{MISSING} ({source})")
    return cards


def _until(card: int, processes: int, within_s: float = 20.0) -> Card:
    deadline = time.monotonic() + within_s
    while True:
        now = _cards()[card]
        if now.processes == processes or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def test_a_card_running_a_process_is_taken_and_the_pick_pins_a_process_to_the_free_card() -> None:
    cards = _cards()
    target = cards[-1]
    assert target.processes == 0, f"the card must start idle: {target.describe()}"
    pin = {"CUDA_VISIBLE_DEVICES": str(target.index), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    holder = subprocess.Popen([sys.executable, "-c", HOLD], env=os.environ | pin, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        busy = _until(target.index, 1)
        assert busy.processes == 1, busy.describe()
        assert busy.free_gib < target.free_gib - 0.9, (busy.describe(), target.describe())  # its 1 GiB
        pick, found = pick_free((busy,), 1, 1.0)
        assert pick is None and f"GPU {target.index}: " in found and "1 compute process(es)" in found, found
    finally:
        holder.kill()
        holder.wait()
    idle = _until(target.index, 0)
    pick, found = pick_free((idle,), 1, 1.0)
    assert pick is not None and pick.indices == str(target.index), found
    said = subprocess.run([sys.executable, "-c", UUID], env=os.environ | pick.env(), capture_output=True, text=True,
                          check=True).stdout.strip()
    assert target.uuid in (said, f"GPU-{said}"), (said, target.uuid)
    print(f"ok: {len(cards)} card(s); {busy.describe()} while held; picked {pick.indices} ({found}); "
          f"CUDA under the pin reports {said}, NVML {target.uuid}")


if __name__ == "__main__":
    test_a_card_running_a_process_is_taken_and_the_pick_pins_a_process_to_the_free_card()
