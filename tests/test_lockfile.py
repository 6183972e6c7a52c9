"""versions.json's reader raises the one error type (library code never exits), and the lock's command line, run by
path with only the files the Dockerfile copies before anything is installed, says the error and exits 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance import lockfile
from appliance.errors import ApplianceError
from tests.container_tools import ROOT, parse_dockerfile

LOCK = lockfile.load(ROOT / "versions.json")


def test_a_missing_pin_or_lock_is_an_appliance_error_naming_the_field(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    channel = lockfile.channel(LOCK, lockfile.default_channel(LOCK))
    with pytest.raises(ApplianceError, match=r"no-such-package is not pinned by this channel of versions\.json") as err:
        lockfile.pin(channel, "no-such-package")
    assert err.value.field == "packages" and err.value.fix
    monkeypatch.delenv("APPLIANCE_VERSIONS", raising=False)
    monkeypatch.delenv("APPLIANCE_ROOT", raising=False)
    with pytest.raises(ApplianceError, match=r"versions\.json not found") as err:
        lockfile.find_versions(tmp_path)
    assert err.value.field == "APPLIANCE_VERSIONS"


@pytest.mark.parametrize("stage", ["gpu-base", "cpu-stack"])
def test_the_lock_command_runs_from_what_the_dockerfile_copies_and_exits_2_on_an_unknown_pin(
        tmp_path: Path, stage: str) -> None:
    """Before pip ran in the image: `python -S` (no site-packages), from the files that stage COPYs."""
    copied = [rest.split() for op, rest in parse_dockerfile().stage(stage).instructions
              if op == "COPY" and "/opt/appliance/lock/appliance" in rest]
    for *sources, dest in copied:
        target = tmp_path / dest.removeprefix("/")
        target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            shutil.copy(ROOT / source, target)
    lockcli = tmp_path / "opt/appliance/lock/appliance/container/lockcli.py"
    run = [sys.executable, "-S", str(lockcli), "--versions", str(ROOT / "versions.json"), "version"]
    missing = subprocess.run([sys.executable, "-S", str(lockcli), "--versions", str(tmp_path / "none.json"), "version",
                              "torch"], capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    ok = subprocess.run([*run, "torch"], capture_output=True, text=True, timeout=60, check=False)
    torch = lockfile.pin(lockfile.channel(LOCK, lockfile.default_channel(LOCK)), "torch")["version"]
    assert (ok.returncode, ok.stdout.strip()) == (0, torch), ok.stderr
    bad = subprocess.run([*run, "no-such-package"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "pins no no-such-package" in bad.stderr
    assert "Traceback" not in bad.stderr
