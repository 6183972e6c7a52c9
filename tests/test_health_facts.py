"""The fact extractor: vLLM wording drift, merge policies, engine restarts, shutdown noise, chunking."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.health.facts import Extractor
from appliance.health.table import load_table

TABLE = load_table()
LOGS = Path(__file__).parent / "fixtures" / "logs"


def facts_of(*lines: str):
    extractor = Extractor(TABLE)
    extractor.feed_text("".join(f"{line}\n" for line in lines))
    return extractor.facts


@pytest.mark.parametrize("line", [
    "(EngineCore pid=1) INFO 11-29 16:40:49 [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 22.75x",
    "(EngineCore_DP0 pid=1) INFO 10-06 12:00:31 [kv_cache_utils.py:1087] GPU KV cache size: 46,592 tokens",
])
def test_kv_tokens_are_read_from_gpu_or_cpu_wording_with_thousands_separators(line):
    facts = facts_of(line)
    assert facts.get("kv_tokens") == 46592


def test_a_merged_kv_line_gives_tokens_and_concurrency_and_the_split_lines_give_the_same():
    merged = facts_of("CPU KV cache size: 46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x")
    split = facts_of("GPU KV cache size: 46,592 tokens", "Maximum concurrency for 2,048 tokens per request: 22.75x")
    for facts in (merged, split):
        assert (facts.get("kv_tokens"), facts.get("kv_concurrency_len"), facts.get("kv_max_concurrency")) == (
            46592, 2048, 22.75)


@pytest.mark.parametrize("line", [
    "INFO [gpu_model_runner.py:5150] Model loading took 74.52 GiB memory and 143.218772 seconds",  # V1
    "INFO [model_runner.py:407] Model loading took 74.52 GiB and 143.218772 seconds",  # V2 of 0.27
])
def test_model_load_is_read_from_v1_and_v2_runner_wording(line):
    facts = facts_of(line)
    assert (facts.get("model_load_gib"), facts.get("model_load_seconds")) == (74.52, 143.218772)


def test_the_cpu_builds_runner_fallback_and_kv_memory_wording_are_facts():
    facts = facts_of(
        "(APIServer pid=1) WARNING 11-29 16:40:30 [vllm.py:725] Model Runner V2 requires Triton; using the V1 "
        "model runner instead.",
        "(Worker pid=2) INFO 11-29 16:40:49 [cpu_worker.py:260] Auto set (3.59/9.71) GiB for KV cache on node 0, "
        "with 4.67 GiB requested memory for the worker. 1.08 GiB memory was consumed by non-kv usages.")
    assert facts.get("runner_fallback_reason") == "Triton"
    assert "runner_v2" not in facts
    assert facts.get("kv_memory_gib") == 3.59


def test_guard_line_gives_active_total_and_the_managers():
    facts = facts_of("INFO [kv_cache_coordinator.py:212] Same-step ghost-block guard: 2/5 managers active "
                     "(SlidingWindowMLAManager)")
    assert (facts.get("guard_active"), facts.get("guard_total")) == (2, 5)
    assert facts.get("guard_managers") == "SlidingWindowMLAManager"


def test_nccl_versions_of_every_rank_are_kept_distinct_in_order():
    facts = facts_of("vLLM is using nccl==2.30.7", "h:1:1 [0] NCCL INFO NCCL version 2.30.7+cuda13.0",
                     "vLLM is using nccl==2.27.3", "vLLM is using nccl==2.30.7")
    assert facts.get("nccl_version") == ["2.30.7", "2.27.3"]
    assert facts.get("nccl_lib_version") == ["2.30.7"]


def test_spec_decode_metrics_keep_the_latest_interval():
    line = ("SpecDecoding metrics: Mean acceptance length: {m}, Accepted throughput: 1.00 tokens/s, Drafted "
            "throughput: 2.00 tokens/s, Accepted: {a} tokens, Drafted: {d} tokens, Per-position acceptance rate: "
            "0.800, 0.600, 0.400, 0.200, 0.100, Avg Draft acceptance rate: {r}%")
    facts = facts_of(line.format(m=3.5, a=100, d=200, r=50.0), line.format(m=3.0, a=50, d=150, r=33.3))
    assert facts.get("spec_mean_acceptance_length") == 3.0
    assert facts.get("spec_acceptance_rate") == 33.3
    assert (facts.get("spec_accepted_tokens"), facts.get("spec_drafted_tokens")) == (50, 150)


def test_a_cudagraph_mode_fallback_is_recorded_with_the_mode_the_engine_chose():
    facts = facts_of("WARNING [compilation.py:1390] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with "
                     "spec-decode for attention backend FlashInferBackend; setting cudagraph_mode=PIECEWISE")
    assert facts.get("cudagraph_mode_fallback") == "PIECEWISE"


def test_a_new_engine_run_drops_the_facts_and_fatal_lines_of_the_previous_run():
    facts = facts_of(
        "(APIServer pid=1) INFO [api_utils.py:286] non-default args: {'port': 8000}",
        "GPU KV cache size: 1,000 tokens",
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "(APIServer pid=2) INFO [api_utils.py:286] non-default args: {'port': 8000}",
        "GPU KV cache size: 2,000 tokens",
    )
    assert facts.runs == 2
    assert facts.get("kv_tokens") == 2000
    assert not facts.fatal
    assert facts.run_started_line == 4


def test_fatal_lines_during_a_requested_shutdown_are_kept_apart_and_fail_nothing():
    dead = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
    facts = facts_of("INFO:     Application startup complete.",
                     "(APIServer pid=1) INFO [launcher.py:254] [shutdown] API server: shutdown triggered", dead)
    assert not facts.fatal
    assert facts.quiet["engine-dead"].line == 3


def test_an_engine_core_that_dies_on_its_own_is_fatal():
    facts = facts_of("WARNING [core_client.py:817] [shutdown] MPClient: engine core exited unexpectedly; "
                     "starting cleanup",
                     "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    assert set(facts.fatal) == {"engine-core-exited", "engine-dead"}


def test_a_fatal_signature_counts_repeats_and_keeps_the_first_line():
    line = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    facts = facts_of("x", line, "y", line)
    hit = facts.fatal["illegal-memory-access"]
    assert (hit.line, hit.count, hit.rule) == (2, 2, "K17")


def test_benign_lines_that_mention_errors_are_not_fatal():
    facts = facts_of(
        "WARNING [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error "
        "current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many "
        "open files`.",
        "ModuleNotFoundError: No module named 'some_optional_plugin'",
        "[W1129 ProcessGroupNCCL.cpp:1538] Warning: destroy_process_group() was not called before program exit",
    )
    assert not facts.fatal


def test_line_numbers_and_facts_do_not_depend_on_how_the_log_is_chunked():
    text = (LOGS / "deepseek" / "illegal-memory-access.log").read_bytes()
    whole = Extractor(TABLE)
    whole.feed(text)
    lines = text.splitlines(keepends=True)
    pieces = Extractor(TABLE)
    for i in range(0, len(lines), 3):
        pieces.feed(b"".join(lines[i:i + 3]))
    assert whole.facts.values == pieces.facts.values
    assert whole.facts.lines == pieces.facts.lines
    assert {k: (h.line, h.count) for k, h in whole.facts.fatal.items()} == {
        k: (h.line, h.count) for k, h in pieces.facts.fatal.items()}
    assert whole.facts.lines_read == pieces.facts.lines_read == len(lines)


def test_matching_does_not_depend_on_the_sample_that_tuned_the_prefilter():
    tuned_on_noise = Extractor(TABLE)
    tuned_on_noise.feed(b"Q" * 4096 + b"\n")  # every anchor byte looks equally rare
    tuned_on_noise.feed(b"GPU KV cache size: 7 tokens\nvLLM is using nccl==2.30.7\n")
    assert tuned_on_noise.facts.get("kv_tokens") == 7
    assert tuned_on_noise.facts.get("nccl_version") == ["2.30.7"]


def test_an_undecodable_byte_does_not_stop_the_scan():
    extractor = Extractor(TABLE)
    extractor.feed(b"\xff\xfe garbage GPU KV cache size: 9 tokens\n")
    assert extractor.facts.get("kv_tokens") == 9



SPEC = ("(APIServer pid=1) INFO 08-09 10:03:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
        "3.61, Accepted throughput: 28.14 tokens/s, Drafted throughput: 53.90 tokens/s, Accepted: {n} tokens, "
        "Drafted: 539 tokens, Per-position acceptance rate: 0.842, 0.683, Avg Draft acceptance rate: {n}.0%\n")
ACCESS = 'INFO:     10.0.0.5:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
RESTART = "(APIServer pid=9) INFO [api_utils.py:286] non-default args: {'port': 8000}\n"


def serving_log(*parts: tuple[int, int]) -> str:
    """(first, count) blocks of access + DSpark lines; a restart line between blocks."""
    return RESTART.join("".join(ACCESS + SPEC.format(n=n) for n in range(first, first + count))
                        for first, count in parts)


@pytest.mark.parametrize("parts", [((0, 500),), ((0, 500), (1000, 300)), ((0, 500), (1000, 0))],
                         ids=["one-run", "restart-then-more", "restart-then-none"])
def test_frequent_lines_found_from_the_chunk_end_give_what_line_by_line_reading_gives(parts):
    lines = serving_log(*parts).encode().splitlines(keepends=True)
    fast, slow = Extractor(TABLE), Extractor(TABLE)
    for i in range(0, len(lines), 700):  # chunks far above the density threshold
        fast.feed(b"".join(lines[i:i + 700]))
    for line in lines:
        slow.feed(line)
    assert fast._dense  # the DSpark anchor went dense
    assert (fast.facts.values, fast.facts.lines, fast.facts.runs) == (slow.facts.values, slow.facts.lines,
                                                                       slow.facts.runs)
