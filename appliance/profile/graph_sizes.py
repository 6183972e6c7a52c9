"""CUDA-graph capture sizes from the profile (K32).

A uniform decode step verifies `1 + K` tokens per request with K speculative tokens, so the widest one a serve
runs is `max_num_seqs x (K + 1)` tokens. vLLM's own default caps the largest captured graph at
`min(max_num_seqs x (K + 1) x 2, 512)` and at max_num_batched_tokens (vllm/config/vllm.py of 0.27.1 and 0.32.0,
`_set_cudagraph_sizes`); a decode batch above the largest captured size runs without a graph ("If batch size >
largest `cudagraph_capture_sizes`, cudagraph will not be used", the same docstring). `profile` mode lists every
uniform decode width n x (K + 1) for n up to max_num_seqs, plus vLLM's own ladder (1, 2, 4, then steps of 8 to 256
and of 16 above) up to the widest one, as the community launcher local-inference-lab/lil computes its capture list
(internal/launcher/builder.go, cudagraphCaptureSizes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.profile.model import Profile

ENGINE_CAP = 512
"""The ceiling vLLM's default applies to its largest captured size."""


def decode_query_len(profile: Profile) -> int:
    """Tokens a request contributes to one uniform decode step: 1 + its speculative tokens."""
    return 1 + (profile.speculative.num_tokens if profile.speculative else 0)


def widest_decode_batch(profile: Profile) -> int | None:
    """max_num_seqs x (K + 1), capped by max_num_batched_tokens; None where the profile leaves either to the
    engine (whose defaults depend on the device, so they cannot be known here)."""
    seqs, tokens = profile.limits.max_num_seqs, profile.limits.max_num_batched_tokens
    if seqs is None or tokens is None:
        return None
    return min(seqs * decode_query_len(profile), tokens)


def engine_largest_capture(profile: Profile) -> int | None:
    """The largest size vLLM's default list captures for this profile (the 0.27.1 / 0.32.0 rule)."""
    seqs, tokens = profile.limits.max_num_seqs, profile.limits.max_num_batched_tokens
    if seqs is None or tokens is None:
        return None
    cap = min(seqs * decode_query_len(profile) * 2, ENGINE_CAP, tokens)
    ladder = [s for s in (1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)) if s <= cap]
    # The list holds max_num_batched_tokens too when it fits the cap, so the ladder's last step is the largest.
    return max([*ladder, *([tokens] if tokens <= cap else [])])


def profile_capture_sizes(profile: Profile) -> list[int]:
    """Every uniform decode width and vLLM's ladder up to the widest one, ascending."""
    widest = widest_decode_batch(profile)
    if widest is None:
        return []
    q = decode_query_len(profile)
    seqs = profile.limits.max_num_seqs or 0
    sizes = {n * q for n in range(1, seqs + 1) if n * q <= widest}
    sizes |= {s for s in (1, 2, 4, *range(8, 256, 8), *range(256, widest + 1, 16)) if s <= widest}
    sizes.add(widest)
    return sorted(sizes)
