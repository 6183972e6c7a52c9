"""`appliance drain` without an engine: its bounds, and an engine URL where nothing listens
(tests/test_surge_drain_engine.py runs it against the real CPU engine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import BIN, free_port


def test_drain_of_an_engine_that_does_not_answer_has_nothing_to_wait_for() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = subprocess.run([str(BIN / "appliance"), "drain", "--url", url, "--settle-s", "0", "--max-s", "30"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "does not answer" in done.stdout


@pytest.mark.parametrize("flags,complaint", [
    (["--max-s", "-1"], "--max-s: -1 is outside 0-3600"),
    (["--settle-s", "nan"], "--settle-s: nan is outside 0-3600"),
    (["--max-s", "soon"], "'soon' is not a number of seconds"),
])
def test_drain_refuses_a_bound_it_cannot_keep(flags: list[str], complaint: str) -> None:
    done = subprocess.run([sys.executable, "-m", "appliance", "drain", "--url", "http://127.0.0.1:8000", *flags],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert complaint in done.stderr
