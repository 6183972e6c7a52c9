"""Corruption on demand, for proving the canary on a real engine: a vLLM V1 logits processor.

Loaded by the engine itself (`--logits-processors appliance.canary.inject:RepeatLastToken`, i.e. the
profile's `engine.logits_processors`). It is inert unless both hold:

- the file named by APPLIANCE_CANARY_INJECT_FLAG exists (checked at most every FLAG_POLL_S, so a test
  switches corruption on and off mid-serve by touching and removing it), and
- the engine runs with prefix caching on — the one setting it corrupts under, so the step-down
  ladder's `cache.prefix_caching=false` rung really cures it; unless the file says `always`, which
  corrupts under every setting (no rung cures it: the ladder must end in `failed`).

When on, every request past its first AFTER_TOKENS output tokens is forced to repeat its last token:
the silent `the the the …` loop users report, with finish_reason `length` and /health still 200.
Test equipment only: never in a shipped profile.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

if TYPE_CHECKING:
    from vllm.config import VllmConfig

FLAG_ENV = "APPLIANCE_CANARY_INJECT_FLAG"
AFTER_TOKENS = 3
FLAG_POLL_S = 0.5


class RepeatLastToken(LogitsProcessor):
    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        flag = os.environ.get(FLAG_ENV)
        self.flag = Path(flag) if flag else None
        self.corrupts_here = bool(vllm_config.cache_config.enable_prefix_caching)
        self.outputs: dict[int, list[int]] = {}  # batch row -> the request's live output token ids
        self._on = False
        self._checked = 0.0

    def is_argmax_invariant(self) -> bool:
        return False  # it changes the greedy choice: that is its point

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.outputs, batch_update, lambda _params, _prompt, output: output)

    def _switched_on(self) -> bool:
        now = time.monotonic()
        if now - self._checked >= FLAG_POLL_S:
            self._checked = now
            try:
                mode = self.flag.read_text().strip() if self.flag else None
            except OSError:
                mode = None
            self._on = mode is not None and (self.corrupts_here or mode == "always")
        return self._on

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.flag is None or not self.outputs or not self._switched_on():
            return logits
        for row, output in self.outputs.items():
            if row < logits.shape[0] and len(output) >= AFTER_TOKENS:
                logits[row].fill_(float("-inf"))
                logits[row, output[-1]] = 0.0
        return logits
