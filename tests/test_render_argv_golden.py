"""`appliance render NAME --format json` of every shipped profile (each rank of a multi-node one) is byte-identical
to its capture in tests/fixtures/render/argv/, taken before the flags became one declaration each (render/flags.py,
issue 31 item 5): a refactor of the renderer must not change one byte of what it renders.

    .venv/bin/python tests/test_render_argv_golden.py      (re-captures, after a change that means to render anew)
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "tests" / "fixtures" / "render" / "argv"
MASTER = "10.1.0.1"  # a string in the rendered command only; nothing connects to it
FABRIC = "enp1s0f1np1"
"""A multi-node rank's fabric interface as the user names it (K39: a worker that cannot resolve its own refuses)."""


def _cases() -> list[tuple[str, int]]:
    from appliance.profile import list_profiles
    from appliance.profile.loader import load_profile

    return [(name, rank) for name in list_profiles() for rank in range(load_profile(name).profile.hardware.nodes)]


@contextlib.contextmanager
def _clean_env(home: Path) -> Iterator[None]:
    """No APPLIANCE_* setting of the caller's: the capture and the test render the profile alone."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("APPLIANCE_")]:
        del os.environ[key]
    os.environ["APPLIANCE_HOME"] = str(home)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def render(name: str, rank: int, home: Path) -> str:
    from appliance.cli import main

    out = io.StringIO()
    with _clean_env(home), contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["render", name, "--format", "json", "--master-addr", MASTER, "--node-rank", str(rank),
                     "--fabric-ifname", FABRIC])
    assert code == 0, (name, rank)
    return out.getvalue()


def capture_path(name: str, rank: int) -> Path:
    return CAPTURES / f"{name}-rank{rank}.json"


def test_every_shipped_profile_has_its_capture() -> None:
    cases = _cases()
    assert len(cases) >= 18
    assert sorted(p.name for p in CAPTURES.glob("*.json")) == sorted(capture_path(n, r).name for n, r in cases)


@pytest.mark.parametrize(("name", "rank"), _cases())
def test_render_json_is_byte_identical_to_its_capture(name: str, rank: int, tmp_path: Path) -> None:
    assert render(name, rank, tmp_path) == capture_path(name, rank).read_text()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    CAPTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in _cases():
            capture_path(*case).write_text(render(*case, Path(tmp)))
            print(capture_path(*case).relative_to(ROOT))
