"""The fast scan reads what the reference reader reads, on generated logs of mixed shapes.

A log is written to disk in pieces that cut lines anywhere (a partial line at every chunk edge), sometimes rotated
away mid-line, and read through the tailer in small chunks by the fast engines (Hyperscan, the pure-Python
prefilter) with every shortcut on. The reference reader (every line, every anchor, every candidate line matched in
order) reads the same lines in one piece. The lines follow the table's own examples (each example cites its
engine source in healthchecks/logchecks.yaml), varied where the table's patterns vary: optional tails (the
per-position acceptance rates, one to seven; the guard's manager list; the graph capture's GiB), a number Python
cannot read, CRLF endings, lines longer than the tailer's max_line, bursts of one frequent line past the density
threshold, and engine restarts."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.health.facts import DENSE, Extractor
from appliance.health.table import load_table
from appliance.health.tail import LogTailer
from tests.hypothesis_profiles import budget
from tests.test_health_scan_engines import NOISE, summary

TABLE = load_table()
EXAMPLES = {p.id: p.examples for p in (*TABLE.facts, *TABLE.fatal)}
SPEC = EXAMPLES["spec-decode-positions"][0]
GUARD = EXAMPLES["guard"][0]
GRAPH = EXAMPLES["graph-capture"][0]
RESET = EXAMPLES["api-server-start"][0]
FATAL = [e for p in TABLE.fatal for e in p.examples]
MAX_LINE = 600


def spec_line(rates: list[str]) -> str:
    """The table's SpecDecoding example with its per-position rates replaced (vLLM prints one per draft position)."""
    head, rest = SPEC.split("Per-position acceptance rate: ", 1)
    return f"{head}Per-position acceptance rate: {', '.join(rates)}, Avg {rest.split(', Avg ', 1)[1]}"


def guard_line(active: int, managers: str | None) -> str:
    head = GUARD.split("ghost-block guard:", 1)[0]
    return f"{head}ghost-block guard: {active}/5 managers active" + (f" ({managers})" if managers is not None else "")


def graph_line(seconds: str, gib: str | None) -> str:
    head = GRAPH.split("Graph capturing finished", 1)[0]
    return f"{head}Graph capturing finished in {seconds} secs" + (f", took {gib} GiB" if gib is not None else "")


RATE = st.sampled_from(["0.757", "0.622", "0.1", "0.000", "1.0"])
NUMBER = st.sampled_from(["41", "0.5", "1.2.3"])  # 1.2.3: the regex admits it, float() does not
LINE = st.one_of(
    st.lists(RATE, min_size=1, max_size=7).map(spec_line),
    st.builds(guard_line, st.integers(0, 5), st.sampled_from([None, "SlidingWindowMLAManager", "A, B"])),
    st.builds(graph_line, NUMBER, st.sampled_from([None, "1.12", "-0.5", "1.2.3"])),
    st.sampled_from([*NOISE, RESET, *FATAL, *(e for es in EXAMPLES.values() for e in es)]),
)


@st.composite
def shaped_lines(draw: st.DrawFn) -> list[bytes]:
    """Lines with their endings: mostly LF, some CRLF, some far longer than max_line, bursts of one line."""
    out: list[bytes] = []
    for _ in range(draw(st.integers(1, 120))):
        line = draw(LINE).encode()
        shape = draw(st.sampled_from(["lf"] * 6 + ["crlf", "long", "burst"]))
        if shape == "long":
            line = line * (MAX_LINE // max(1, len(line)) + 2)
        ending = b"\r\n" if shape == "crlf" else b"\n"
        out += [line + ending] * (DENSE + draw(st.integers(0, 8)) if shape == "burst" else 1)
    return out


def reference_reading(stream: bytes) -> dict[str, object]:
    extractor = Extractor(TABLE, "reference")
    extractor.feed(stream)
    return summary(extractor.facts)


def tailed_reading(log: Path, data: bytes, cuts: list[int], rotate_at: set[int], engine: str,
                   chunk_size: int) -> tuple[dict[str, object], bytes]:
    """Write `data` in pieces cut at `cuts` (anywhere, mid-line too), polling the tailer after each; before a piece
    whose index is in `rotate_at`, the file is renamed away and a new one started. Returns the fast engine's
    summary and the stream the tailer handed out."""
    extractor = Extractor(TABLE, engine)  # type: ignore[arg-type]
    tailer = LogTailer(log, chunk_size=chunk_size, max_line=MAX_LINE)
    stream: list[bytes] = []

    def poll() -> None:
        for chunk in tailer.poll():
            stream.append(chunk)
            extractor.feed(chunk)

    bounds = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    rotations = 0
    for index, (a, b) in enumerate(pairwise(bounds)):
        if index in rotate_at and log.exists():
            rotations += 1
            log.rename(log.with_name(f"{log.name}.{rotations}"))
        with log.open("ab") as f:
            f.write(data[a:b])
        poll()
    poll()
    rest = tailer.flush()
    stream.append(rest)
    extractor.feed(rest)
    tailer.close()
    return summary(extractor.facts), b"".join(stream)


@pytest.mark.parametrize("engine", ["hyperscan", "re"])
@settings(max_examples=budget(150), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
@given(lines=shaped_lines(), cuts=st.lists(st.integers(0, 1 << 20), max_size=10),
       rotate_at=st.sets(st.integers(1, 10), max_size=2), chunk_size=st.sampled_from([64, 333, 4096, 1 << 16]))
def test_generated_logs_of_mixed_shapes_read_through_the_tailer_as_the_reference_reads_them(
        tmp_path_factory: pytest.TempPathFactory, engine: str, lines: list[bytes], cuts: list[int],
        rotate_at: set[int], chunk_size: int):
    log = tmp_path_factory.mktemp("shapes") / "vllm.log"
    fast, stream = tailed_reading(log, b"".join(lines), cuts, rotate_at, engine, chunk_size)
    assert fast == reference_reading(stream)


def test_an_optional_tail_is_read_as_the_reference_reads_it_within_one_chunk():
    """Seven rates, then five: the five-rate line is the last, and its record is what both readings keep (the
    earlier line's sixth and seventh rates belong to that line, not to the last one)."""
    data = (spec_line(["0.9"] * 7) + "\n" + spec_line(["0.5"] * 5) + "\n").encode()
    fast = Extractor(TABLE, "hyperscan")
    fast.feed(data)
    assert summary(fast.facts) == reference_reading(data)
    assert fast.facts.get("spec_pos5_rate") == 0.5
    assert re.search("spec_pos[67]", " ".join(fast.facts.values)) is None
