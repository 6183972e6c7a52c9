"""The Debian tools some tests run, and how the quick tier runs without them.

`scripts/test.sh` (the full tier) installs the package of each tool that is missing (`python -m tests.debian_tools
missing` prints them). A test that runs one asks for its fixture (tests/conftest.py `TOOL_FIXTURES`); that derives
its `tools` marker, which `scripts/test.sh --quick` leaves out. The quick tier also hides these tools from PATH,
whatever this machine has installed, so a test that runs one without asking (directly, or through the product:
`appliance sync-model` runs rsync) fails in every quick run, as it would on a fresh clone."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

TOOLS: dict[str, tuple[str, str]] = {
    "chromium": ("chromium", "opens the receipt report headless for its screenshot (tests/test_gate_report.py)"),
    "promtool": ("prometheus", "lints the exporter's /metrics and tests the alert rules "
                               "(tests/test_health_metrics_lint.py, tests/test_monitoring_rules.py)"),
    "prometheus": ("prometheus", "runs the monitoring bundle against the CPU serve (tests/test_monitoring_engine.py)"),
    "rsync": ("rsync", "moves weights between ranks (tests/test_weights_sync.py)"),
    "ip": ("iproute2", "makes network namespaces (tests/test_multinode_netident.py, tests/test_bundle_offline.py)"),
    "unshare": ("util-linux", "cuts the network for the offline bundle (tests/test_bundle_offline.py)"),
    "shellcheck": ("shellcheck", "checks the release workflow's `run:` scripts under actionlint "
                                 "(tests/test_release_workflow.py)"),
}
"""Tool -> (its Debian package, which tests run it and why)."""
HIDDEN_TOO = ("docker",)
"""Hidden in the quick tier too, without a fixture: the `docker` tier's own CLI (scripts/dockerd.sh installs it),
which a fresh clone lacks, and which `appliance upgrade` prefers when it finds one."""
HIDE_ENV = "APPLIANCE_TEST_WITHOUT_TOOLS"
"""`1` (scripts/test.sh --quick sets it): the session runs with TOOLS and HIDDEN_TOO hidden from PATH."""
HIDDEN_ENV = "APPLIANCE_TEST_TOOLS_HIDDEN"
"""Set by the process that hid them (the folder of its links), so xdist's workers, which inherit PATH, do not again."""


def missing(env: Mapping[str, str] = os.environ) -> list[str]:
    """The Debian packages of the tools not on PATH, each once, in TOOLS' order."""
    path = env.get("PATH", "")
    return list(dict.fromkeys(package for tool, (package, _) in TOOLS.items() if not shutil.which(tool, path=path)))


def without(tools: Iterable[str], path: str, farm: Path) -> str:
    """`path` (a PATH value) with `tools` gone: each folder that holds one is replaced by a folder under `farm` of
    links to everything else in it. Other folders stay themselves, so a venv's python still finds its pyvenv.cfg."""
    hide = set(tools)
    folders: list[str] = []
    for i, folder in enumerate(path.split(os.pathsep)):
        here = Path(folder)
        if not folder or not any((here / tool).exists() for tool in hide):
            folders.append(folder)
            continue
        copy = farm / str(i)
        copy.mkdir(parents=True)
        for entry in here.iterdir():
            if entry.name not in hide:
                (copy / entry.name).symlink_to(entry)
        folders.append(str(copy))
    return os.pathsep.join(folders)


def hide_when_asked() -> list[str]:
    """In a session where HIDE_ENV is 1, TOOLS and HIDDEN_TOO leave this process's PATH (and its children's) until
    it exits; returns what is hidden."""
    if os.environ.get(HIDE_ENV) != "1":
        return []
    hidden = [*TOOLS, *HIDDEN_TOO]
    if not os.environ.get(HIDDEN_ENV):
        farm = Path(tempfile.mkdtemp(prefix="appliance-test-path-"))
        atexit.register(shutil.rmtree, farm, ignore_errors=True)
        os.environ["PATH"] = without(hidden, os.environ.get("PATH", ""), farm)
        os.environ[HIDDEN_ENV] = str(farm)
    return hidden


if __name__ == "__main__":
    if sys.argv[1:] != ["missing"]:
        sys.exit("usage: python -m tests.debian_tools missing")
    print(" ".join(missing()))
