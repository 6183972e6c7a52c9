"""The scanner's fast paths read exactly what the plain reading reads.

The `reference` engine tests every line for every anchor and matches every candidate line in order, with none
of the shortcuts (Hyperscan or the pure-Python prefilter, last-line-only facts, dense anchors found from the
chunk's end, runs a later reset replaces). Every other engine must give the same facts, line numbers, fatal
hits and runs: on the fixture logs, on the benchmark's two mixes, and on logs generated from the table's own
examples with near misses, restarts, undecodable bytes and lines repeated past the density threshold."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.errors import ApplianceError
from appliance.health.facts import DENSE, Extractor, Facts
from appliance.health.prefilter import hyperscan_problem
from appliance.health.table import LogTable, load_table
from appliance.health.tail import LogTailer
from benchmarks.scan_throughput import build_log
from tests.hypothesis_profiles import budget

TABLE = load_table()
LOGS = Path(__file__).parent / "fixtures" / "logs"
FIXTURES = sorted(LOGS.rglob("*.log"))
FAST = ["hyperscan", "re"]


def summary(facts: Facts) -> dict[str, object]:
    """Everything a scan tells: facts with their lines, fatal and shutdown hits with line, count and text."""
    hits = lambda found: {k: (h.line, h.count, h.text) for k, h in found.items()}  # noqa: E731
    return {"values": facts.values, "lines": facts.lines, "fatal": hits(facts.fatal), "quiet": hits(facts.quiet),
            "runs": facts.runs, "run_started_line": facts.run_started_line, "lines_read": facts.lines_read}


def scan(data: bytes, engine: str, cuts: list[int] | None = None, table: LogTable = TABLE) -> dict[str, object]:
    """Feed `data` in pieces of whole lines: cut after the line numbers in `cuts` (None: one chunk)."""
    extractor = Extractor(table, engine)  # type: ignore[arg-type]
    lines = data.splitlines(keepends=True)
    bounds = [0, *sorted(set(c for c in cuts or [] if 0 < c < len(lines))), len(lines)]
    for a, b in pairwise(bounds):
        extractor.feed(b"".join(lines[a:b]))
    return summary(extractor.facts)


def test_auto_takes_hyperscan_where_it_is_installed_so_the_suite_tests_the_fast_path():
    assert hyperscan_problem() is None  # a dependency of the appliance on x86_64 and aarch64 (pyproject.toml)
    assert Extractor(TABLE).engine == "hyperscan"


@pytest.mark.parametrize("engine", FAST)
@pytest.mark.parametrize("log", FIXTURES, ids=[p.name for p in FIXTURES])
def test_every_fixture_log_reads_as_the_reference_reads_it_whole_and_in_pieces(log: Path, engine: str):
    data = log.read_bytes()
    reference = scan(data, "reference")
    assert scan(data, engine) == reference
    assert scan(data, engine, list(range(0, 5000, 7))) == reference
    assert scan(data, "reference", list(range(0, 5000, 7))) == reference


@pytest.mark.parametrize("engine", FAST)
@pytest.mark.parametrize("mix", ["serving", "dense"])
def test_the_benchmark_mixes_read_as_the_reference_reads_them(tmp_path: Path, mix: str, engine: str):
    """Through the tailer in 256 KiB chunks: dense anchors switch to the chunk-end path and, in the dense
    mix, every chunk holds restarts that replace the runs before them."""
    log = tmp_path / f"{mix}.log"
    build_log(log, 3 << 20, mix)

    def tail(engine: str) -> tuple[dict[str, object], Extractor]:
        extractor, tailer = Extractor(TABLE, engine), LogTailer(log, chunk_size=256 << 10)  # type: ignore[arg-type]
        for chunk in tailer.poll():
            extractor.feed(chunk)
        extractor.feed(tailer.flush())
        return summary(extractor.facts), extractor

    reference, _ = tail("reference")
    fast, extractor = tail(engine)
    assert fast == reference
    assert extractor._dense  # the shortcut under test was taken
    if mix == "dense":
        assert reference["runs"] > 100


NOISE = [
    'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid=7) INFO 11-29 16:41:00 [loggers.py:123] Engine 000: Avg prompt throughput: 12.3 tokens/s",
    "",
    "   ",
    "Traceback (most recent call last):",
]


def _near_misses(table: LogTable) -> list[str]:
    """Lines that hold an anchor but not what its regex wants, or two anchors of different patterns."""
    out = []
    for p in (*table.facts, *table.fatal):
        for anchor in p.anchors:
            out += [f"INFO {anchor}", f"{anchor} {anchor}", f"x{anchor}y", anchor[: len(anchor) // 2]]
    examples = [e for p in table.facts for e in p.examples]
    out += [f"{a} | {b}" for a, b in zip(examples, examples[3:], strict=False)]
    return out


EXAMPLES = [e for p in (*TABLE.facts, *TABLE.fatal) for e in p.examples]
RESETS = [e for p in TABLE.facts if p.reset for e in p.examples]
MISSES = _near_misses(TABLE)
SPEC = next(e for p in TABLE.facts if p.id == "spec-decode-length" for e in p.examples)


def generated_log(seed: int, n: int) -> bytes:
    """n lines: examples, near misses, noise, restarts, a burst of one frequent line (past DENSE in a chunk),
    undecodable bytes and over-long lines."""
    rng = random.Random(seed)
    kinds = [(EXAMPLES, 30), (MISSES, 15), (NOISE, 30), (RESETS, 3), ([SPEC], 20)]
    pools, weights = zip(*kinds, strict=True)
    lines: list[bytes] = []
    while len(lines) < n:
        pool = rng.choices(pools, weights)[0]
        line = rng.choice(pool).encode()
        roll = rng.random()
        if roll < 0.03:
            line = b"\xff\xfe" + line + b"\xc3"
        elif roll < 0.05:
            line = line * rng.randint(2, 40)
        elif roll < 0.07:
            lines += [SPEC.encode()] * (DENSE + rng.randint(0, 40))
        lines.append(line)
    return b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize("engine", FAST)
def test_a_pattern_whose_alternatives_fill_different_groups_keeps_each_from_its_own_last_line(engine: str):
    """Found by the generated-log test (seed 732802, n 188): 'Starting to load model' names a hub id or a folder
    (load_from_hub | load_model_path); the last-only shortcut applied only the last line and lost the hub id."""
    data = (b"(Worker_TP0 pid=520) INFO 08-09 09:58:44 [model_runner.py:398] Starting to load model "
            b"deepseek-ai/DeepSeek-V4-Flash-0731...\n(Worker pid=32763) INFO 11-29 16:42:44 [cpu_model_runner.py:68] "
            b"Starting to load model /models/SmolLM2-135M-Instruct...\n")
    got = scan(data, engine)
    assert got == scan(data, "reference")
    assert got["values"]["load_from_hub"] == "deepseek-ai/DeepSeek-V4-Flash-0731"  # type: ignore[index]


def test_optional_groups_are_those_a_match_can_leave_unset_and_alternatives_those_a_branch_sets():
    from appliance.health.table import optional_groups

    assert optional_groups(r"a (?P<x>\d+) b (?P<y>\w+)") == (set(), set())
    assert optional_groups(r"(?:(?P<x>\d+)|(?P<y>\w+))!") == ({"x", "y"}, {"x", "y"})
    assert optional_groups(r"v(?P<x>\d+)(?: rc(?P<y>\d+))?") == ({"y"}, set())
    assert optional_groups(r"(?P<x>a)+ (?P<y>b)*") == ({"y"}, set())
    forms = {p.id: p.one_form() for p in TABLE.facts}
    assert not forms["load-start"] and not forms["torch-compile"]  # hub id | folder; seconds or none
    assert forms["spec-decode-positions"] and forms["guard"]  # a required group and an optional tail


@settings(max_examples=budget(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), n=st.integers(1, 900), cuts=st.lists(st.integers(1, 900), max_size=12),
       engine=st.sampled_from(FAST))
def test_generated_logs_read_as_the_reference_reads_them(seed: int, n: int, cuts: list[int], engine: str):
    data = generated_log(seed, n)
    assert scan(data, engine, cuts) == scan(data, "reference", cuts)


@pytest.mark.parametrize("engine", FAST)
def test_a_last_line_without_its_newline_reads_as_the_reference_reads_it(engine: str):
    data = b"".join(e.encode() + b"\n" for e in EXAMPLES) + EXAMPLES[0].encode()
    assert scan(data, engine) == scan(data, "reference")


def test_without_hyperscan_auto_falls_back_to_the_pure_python_engine_with_the_same_answer():
    """`sys.modules['hyperscan'] = None` makes its import fail, as on a platform with no wheel."""
    code = ("import sys, json; sys.modules['hyperscan'] = None; "
            "from appliance.health.prefilter import hyperscan_problem; from appliance.health.facts import Extractor; "
            "from appliance.health.table import load_table; from appliance.health.scan import scan_file; "
            "from pathlib import Path; f = scan_file(Path(sys.argv[1]), load_table()); "
            "print(json.dumps([Extractor(load_table()).engine, hyperscan_problem(), f.to_json(), f.lines]))")
    log = LOGS / "cpu-smoke-serve.log"
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, check=True).stdout
    engine, problem, values, lines = json.loads(out)
    assert engine == "re" and "hyperscan is not installed" in problem
    reference = Extractor(TABLE, "reference")
    reference.feed(log.read_bytes())
    assert (values, lines) == (json.loads(json.dumps(reference.facts.to_json())), reference.facts.lines)


def test_asking_for_hyperscan_where_it_cannot_load_names_the_fix():
    code = ("import sys; sys.modules['hyperscan'] = None; from appliance.health.facts import Extractor; "
            "from appliance.health.table import load_table; from appliance.errors import ApplianceError\n"
            "try:\n    Extractor(load_table(), 'hyperscan')\nexcept ApplianceError as e:\n    print(e.fix)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install hyperscan" in out
    assert ApplianceError  # the type the library raises (caught in the child)


def test_an_anchor_with_a_newline_is_refused_when_the_table_loads(tmp_path: Path):
    raw = (Path(__file__).parent.parent / "healthchecks" / "logchecks.yaml").read_text()
    bad = tmp_path / "logchecks.yaml"
    bad.write_text(raw.replace('anchors: ["ghost-block guard"]', 'anchors: ["ghost-block\\nguard"]', 1))
    with pytest.raises(ApplianceError, match="must not hold a newline"):
        load_table(bad)


def test_the_tailers_reused_read_buffer_never_changes_a_chunk_it_handed_out(tmp_path: Path):
    """Chunks are copies out of one buffer the tailer keeps: reading on must not rewrite earlier ones."""
    rng = random.Random(7)
    lines = [bytes(rng.choice(b"abcdefgh") for _ in range(rng.randint(0, 300))) + b"\n" for _ in range(3000)]
    lines[1234] = b"L" * 20_000 + b"\n"  # longer than max_line: handed out in a piece
    log = tmp_path / "vllm.log"
    log.write_bytes(b"".join(lines[:2000]))
    tailer = LogTailer(log, chunk_size=4096, max_line=8192)
    chunks = list(tailer.poll())
    snapshot = [bytes(c) for c in chunks]
    with log.open("ab") as f:
        f.write(b"".join(lines[2000:]) + b"partial")
    chunks += list(tailer.poll())
    assert chunks[: len(snapshot)] == snapshot
    assert all(c.endswith(b"\n") for c in chunks)
    assert max(map(len, chunks)) <= 4096 + 8192 + 1
    assert b"".join(chunks).replace(b"\n", b"") + tailer.flush() == b"".join(lines).replace(b"\n", b"") + b"partial"
