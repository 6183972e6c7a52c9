"""Which engine the lock pins, and what that engine does: some rules' severity depends on it (K5).

The seed's fork moved under the appliance: upstream vLLM #51768 added a config-time check that refuses
DeepSeek-V4 under Model Runner V1 with PIECEWISE cudagraphs, and it reached the fork only in a merge
after the accepted tag. On the accepted SHA the seed measured `VLLM_USE_V2_MODEL_RUNNER=0` alone:
"VLLM_USE_V2_MODEL_RUNNER=0 → V1, guard still 5/5, c=1 2/2" (a pass).
"""

from __future__ import annotations

from dataclasses import dataclass

PRE_51768: frozenset[str] = frozenset({
    # Tags of the fork up to the accepted one, and the heads the seed names for them.
    "sm120-pr-41834-stable-preview-20260809", "aa0d513027", "d44e224ab9",
    "sm120-pr-41834-stable-preview-20260804", "0f59188db1",
    "sm120-pr-41834-stable-preview-20260802", "9a94c54292",
})
"""Fork refs/commits known to predate #51768 (the seed's "Fixed preview tags" table and its acceptance
section). Anything else — a later head, another fork, an unknown ref — is assumed to carry the check."""


@dataclass(frozen=True)
class EnginePin:
    repo: str
    ref: str
    commit: str

    @property
    def label(self) -> str:
        return f"{self.repo}@{self.ref} ({self.commit})"

    @property
    def refuses_v1_piecewise(self) -> bool:
        """True when this engine rejects DSv4 + V1 + PIECEWISE at config time (#51768)."""
        return not ({self.ref, self.commit[:10]} & PRE_51768)


def pinned_engine() -> EnginePin:
    """The engine versions.json pins (engine_source)."""
    from appliance.lock import load_lock

    src = load_lock().engine_source
    return EnginePin(str(src.get("repo", "")), str(src.get("ref", "")), str(src.get("commit", "")))
