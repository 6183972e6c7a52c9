"""The serve's API key, as every client of the serve sends it (the gate, the canary)."""

from __future__ import annotations

import os


def api_headers() -> dict[str, str]:
    # VLLM_API_KEY passes through to the serve; it is never written into a receipt, a state file or a log.
    key = os.environ.get("VLLM_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}
