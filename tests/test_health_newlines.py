"""The scanner's newline count (appliance/health/newlines.py) says what `bytes.count(b"\\n")` says, on spans short
(bytes.count itself) and long (numpy's compare), with numpy and without it; numpy is imported at the first long span
only; and a scan whose chunks are long puts each fact on its true line and counts every line."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.health.newlines import LONG_SPAN, count_newlines
from appliance.health.scan import scan_file
from tests.hypothesis_profiles import budget
from tests.test_health_scan_engines import NOISE
from tests.test_health_scan_shapes import GUARD, RESET

ROOT = Path(__file__).resolve().parent.parent


def _chunk(seed: int, size: int, density: float) -> bytes:
    """`size` bytes in which about `density` of them are newlines, beside CR, NUL and high bytes."""
    rng = random.Random(seed)
    return bytes(10 if rng.random() < density else rng.choice((13, 0, 97, 255, 11)) for _ in range(size))


@settings(max_examples=budget(60), deadline=None)
@given(seed=st.integers(0, 2**32), size=st.integers(0, 3 * LONG_SPAN), density=st.sampled_from([0.0, 0.01, 0.3, 1.0]),
       cut=st.tuples(st.floats(0, 1), st.floats(0, 1.2)), whole=st.booleans())
def test_the_count_equals_bytes_count_on_short_and_long_spans(seed: int, size: int, density: float,
                                                             cut: tuple[float, float], whole: bool) -> None:
    chunk = _chunk(seed, size, density)
    start = int(cut[0] * size)
    end = None if whole else start + int(cut[1] * size)  # past the chunk's end too, as slicing allows
    assert count_newlines(chunk, start, end) == chunk.count(b"\n", start, end)


def test_the_edges_of_a_long_span() -> None:
    """The spans just below and at LONG_SPAN (the two counters' border), a newline first and last in each."""
    chunk = b"\n" + b"x" * (LONG_SPAN - 2) + b"\n" + b"y\n" * 8
    for start, end in ((0, LONG_SPAN - 1), (0, LONG_SPAN), (1, LONG_SPAN + 1), (0, None), (LONG_SPAN, None)):
        assert count_newlines(chunk, start, end) == chunk.count(b"\n", start, end), (start, end)
    assert count_newlines(b"") == 0 and count_newlines(b"\n" * (3 * LONG_SPAN)) == 3 * LONG_SPAN


PROBE = """
import os, sys
from appliance.health import newlines
short = newlines.count_newlines(b"a\\n" * 1000)
imported_after_short = sys.modules.get("numpy") is not None
big = b"a\\n" * newlines.LONG_SPAN
print(short, imported_after_short, newlines.count_newlines(big), sys.modules.get("numpy") is not None,
      newlines._vectorised() is not None, os.environ.get("OPENBLAS_NUM_THREADS", "unset"))  # cached: no new import
"""


def _probe(block_numpy: bool, blas_threads: str | None = None) -> list[str]:
    code = ("import sys; sys.modules['numpy'] = None\n" if block_numpy else "") + PROBE
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update({"OPENBLAS_NUM_THREADS": blas_threads} if blas_threads else {})
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_numpy_is_imported_at_the_first_long_span_only_and_the_environment_is_put_back() -> None:
    """An exporter tailing a fresh log reads short spans: they never import numpy (~0.1 s of CPU). The import's
    OPENBLAS_NUM_THREADS=1 is this process's alone: the environment its children get is as it was."""
    assert _probe(block_numpy=False) == ["1000", "False", str(LONG_SPAN), "True", "True", "unset"]
    assert _probe(block_numpy=False, blas_threads="7")[-1] == "7"


def test_without_numpy_every_span_is_counted_by_bytes_count() -> None:
    """A CLI installed without an engine may lack numpy: the same counts, from bytes.count."""
    assert _probe(block_numpy=True) == ["1000", "False", str(LONG_SPAN), "False", "False", "unset"]


def test_a_scan_in_long_chunks_puts_each_fact_on_its_line(tmp_path: Path) -> None:
    """Megabytes of noise between the facts, read in 1 MiB chunks (the long spans numpy counts): each fact's line
    number and the line total are the file's own, as enumerate() over its lines says."""
    rng = random.Random(7)
    lines = [RESET] + [rng.choice(NOISE) for _ in range(40_000)] + [GUARD] + \
        [rng.choice(NOISE) for _ in range(30_000)] + [RESET] + [rng.choice(NOISE) for _ in range(20_000)] + [GUARD]
    log = tmp_path / "engine.log"
    log.write_text("\n".join(lines) + "\n")
    assert log.stat().st_size > 3 * (1 << 20)
    facts = scan_file(log, chunk_size=1 << 20)
    last_guard = max(i for i, line in enumerate(lines, 1) if line == GUARD)
    last_reset = max(i for i, line in enumerate(lines, 1) if line == RESET)
    assert facts.lines_read == len(lines)
    assert facts.runs == 2 and facts.run_started_line == last_reset
    guard_facts = [k for k, line in facts.lines.items() if line == last_guard]
    assert guard_facts, facts.lines  # the guard's fact sits on the last guard line, not a chunk's edge off it
