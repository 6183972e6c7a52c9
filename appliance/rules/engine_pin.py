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

DECLINED_50843: frozenset[str] = frozenset({
    # The seed, Update 2026-08-04: "Not taking #50843 (V2-tree only, inert on our default)"; no later head of the
    # seed says it was taken, and the 20260809 tag made V2 the default.
    "sm120-pr-41834-stable-preview-20260809", "aa0d513027", "d44e224ab9",
    "sm120-pr-41834-stable-preview-20260804", "0f59188db1",
})
"""Fork refs/commits without upstream #50843 (bound the V2 samplers' tile-local argmax to vocab_size), by the
seed's own account. Elsewhere it is unknown, and K38 says nothing."""


@dataclass(frozen=True)
class EnginePin:
    repo: str
    ref: str
    commit: str
    packages: tuple[tuple[str, str], ...] = ()
    """(name, version) of the lock's GPU packages: facts some rules judge the stack by (K37)."""

    def package(self, name: str) -> str | None:
        return dict(self.packages).get(name)

    @property
    def label(self) -> str:
        return f"{self.repo}@{self.ref} ({self.commit})"

    @property
    def refuses_v1_piecewise(self) -> bool:
        """True when this engine rejects DSv4 + V1 + PIECEWISE at config time (#51768)."""
        return not ({self.ref, self.commit[:10]} & PRE_51768)

    @property
    def lacks_50843(self) -> bool:
        """True where the seed says this engine did not take #50843 (K38)."""
        return bool({self.ref, self.commit[:10]} & DECLINED_50843)


def pinned_engine() -> EnginePin:
    """The engine versions.json pins (engine_source)."""
    from appliance.lock import load_lock

    lock = load_lock()
    src = lock.engine_source
    gpu = tuple((p.name, p.version) for p in lock.packages if "gpu" in p.targets)
    return EnginePin(str(src.get("repo", "")), str(src.get("ref", "")), str(src.get("commit", "")), gpu)
