"""The README: the two fresh-machine commands stay at the very top, and every block marked runnable (an HTML
comment a reader does not see) runs as shown, from a folder of its own, on a machine without a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MARK = "<!-- readme-test: runnable -->"
BLOCKS = re.findall(re.escape(MARK) + r"\n```bash\n(.*?)```", README, re.S)


def test_the_two_fresh_machine_commands_open_the_readme() -> None:
    first = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first is not None and README.index(first.group(0)) < README.index("\n## ")
    lines = [line.split("#")[0].strip() for line in first.group(1).strip().splitlines()]
    assert lines == ["scripts/demo.sh --once", "scripts/test.sh"]


def test_the_first_screen_is_what_it_does_then_the_hardware_paths_then_the_cpu_demo() -> None:
    """Issue 37: what it does, the three hardware paths (pull, then run), the CPU demo; the rest lives in docs/."""
    spark, rtx, k8s = (README.index(s) for s in ("**Two DGX Sparks", "**One RTX PRO 6000", "**Kubernetes**"))
    assert README.index("## What it does") < spark < rtx < k8s < README.index("## The CPU demo")
    for profile in ("gb10-tp2", "rtx-pro-6000-tp2"):
        assert README.index(f"docker compose --profile {profile} pull") < README.index(f"--profile {profile} up -d")
    assert len(README.splitlines()) <= 120 and "docs/guide.md" in README


def test_every_relative_link_of_the_readme_and_the_guide_names_a_file_that_exists() -> None:
    links = 0
    for doc in (ROOT / "README.md", ROOT / "docs" / "guide.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if target.startswith(("http://", "https://", "#")):
                continue
            links += 1
            assert (doc.parent / target.split("#")[0]).exists(), f"{doc.name}: {target}"
    assert links > 20


def test_the_seed_is_said_where_it_first_appears() -> None:
    first = README.index("the seed")
    assert "pull request #41834" in README[first:first + 200]


def test_runnable_blocks_are_marked() -> None:
    assert len(BLOCKS) == README.count(MARK) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[b.strip().splitlines()[0][:60] for b in BLOCKS])
def test_each_runnable_readme_block_runs_as_shown(block: str, tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the README's .venv: this environment, from another folder
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{block}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}"
