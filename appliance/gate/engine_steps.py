"""What the engine did during the bench, apart from what the prompt let the draft do.

Published DSpark tok/s on one server differ 2x with the prompt (repetitive text is drafted at high acceptance,
prose at low), so decode tok/s alone cannot compare engines. At concurrency 1 each decode step verifies one
draft: tok/s = verify steps/s x mean acceptance length. The bench reads vLLM's spec-decode counters from
/metrics before and after llama-benchy; `gate compare` then says whether a tg difference comes from the engine
(verify steps/s) or from acceptance.
"""

from __future__ import annotations

from appliance.jsonstrict import JsonObject

DRAFTS = "vllm:spec_decode_num_drafts"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"


def spec_counters(text: str) -> dict[str, float]:
    """Spec-decode counter totals (summed over engines and labels) from a /metrics page."""
    from prometheus_client.parser import text_string_to_metric_families  # `gate compare` does not need it

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in (DRAFTS, ACCEPTED, DRAFT_TOKENS):
            out[family.name] = sum(s.value for s in family.samples if s.name.endswith("_total"))
    return out


def scrape(url: str, timeout: float = 5.0) -> dict[str, float] | None:
    """The counters now, or None when /metrics does not answer (within `timeout` in all) as a metrics page."""
    import httpx

    from appliance.http_bounded import ReplyError, get

    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            reply = get(client, f"{url}/metrics", deadline=timeout)
        return spec_counters(reply.text) if reply.status == 200 else None
    except (httpx.HTTPError, ReplyError, ValueError):  # ValueError: no Prometheus text
        return None


def acceptance(before: dict[str, float] | None, after: dict[str, float] | None) -> JsonObject | None:
    """Mean acceptance length over the bench (1 + accepted / drafts); None without speculative decoding."""
    if before is None or after is None or DRAFTS not in after:
        return None
    drafts = after[DRAFTS] - before.get(DRAFTS, 0.0)
    accepted = after.get(ACCEPTED, 0.0) - before.get(ACCEPTED, 0.0)
    if drafts <= 0:
        return None
    return {"drafts": int(drafts), "accepted_tokens": int(accepted),
            "mean_acceptance_length": round(1 + accepted / drafts, 3)}


def with_verify_steps(rows: list[JsonObject], mean_length: float | None) -> list[JsonObject]:
    """Each decode row gains verify_steps_s = t/s / mean acceptance length (1 without a draft)."""
    length = mean_length or 1.0
    return [{**r, "verify_steps_s": round(r["t_s"] / length, 2)} if r["kind"] in ("tg", "ctx_tg") and r.get("t_s")
            else r for r in rows]


def attribution(tg_a: float, tg_b: float, len_a: float, len_b: float) -> str:
    """Where a decode difference comes from: verify steps/s (the engine) or acceptance (the prompt, the draft)."""
    steps_a, steps_b = tg_a / len_a, tg_b / len_b
    d_steps, d_len = (steps_b - steps_a) / steps_a, (len_b - len_a) / len_a
    source = "acceptance (prompt or draft), not the engine" if abs(d_len) > abs(d_steps) else "the engine"
    return (f"verify steps/s {steps_a:.1f} -> {steps_b:.1f} ({d_steps * 100:+.1f} %), mean acceptance length "
            f"{len_a:.2f} -> {len_b:.2f} ({d_len * 100:+.1f} %): the difference comes from {source}")
