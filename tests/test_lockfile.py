"""versions.json's reader raises the one error type (library code never exits), and the lock's command line, run by
path with only the files the Dockerfile copies before anything is installed, says the error and exits 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance import lockfile
from appliance.errors import ApplianceError
from tests.container_tools import ROOT, parse_dockerfile
from tests.in_process import run_main

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


def _finders_agree(monkeypatch: pytest.MonkeyPatch, **env: str) -> Path:
    from appliance.paths import versions_path

    for name in (lockfile.VERSIONS_ENV, lockfile.ROOT_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    found = lockfile.find_versions()
    assert versions_path() == found
    return found


def test_the_cli_and_the_image_build_find_the_lock_by_one_precedence(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """$APPLIANCE_VERSIONS over $APPLIANCE_ROOT over the checkout, for paths.versions_path as for the build's tools."""
    given = tmp_path / "given.json"
    assert _finders_agree(monkeypatch) == ROOT / "versions.json"
    assert _finders_agree(monkeypatch, APPLIANCE_ROOT=str(tmp_path)) == tmp_path / "versions.json"
    assert _finders_agree(monkeypatch, APPLIANCE_ROOT=str(tmp_path), APPLIANCE_VERSIONS=str(given)) == given


def test_the_typed_lock_is_the_document_the_stdlib_reader_reads(tmp_path: Path) -> None:
    """appliance.lock reads through lockfile.load: one document, one digest, one refusal for both."""
    from appliance.lock import load_lock, lock_digest, lock_document

    path = tmp_path / "versions.json"
    shutil.copy(ROOT / "versions.json", path)
    assert lock_document(path) == lockfile.load(path)
    assert lock_digest(path) == lockfile.canonical_digest(lockfile.load(path))
    typed = load_lock(path)
    assert {name: ch.digest for name, ch in typed.channels.items()} == {
        name: lockfile.channel_digest(LOCK, name) for name in lockfile.channel_names(LOCK)}
    assert typed.default_for("cpu") == lockfile.default_channel(LOCK, "cpu")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": 2, "schema": 2}')
    with pytest.raises(ApplianceError) as typed_err:
        load_lock(broken)
    with pytest.raises(ApplianceError) as stdlib_err:
        lockfile.load(broken)
    assert str(typed_err.value) == str(stdlib_err.value) and "given twice" in str(typed_err.value)


@pytest.mark.parametrize("chosen_by", ["APPLIANCE_ROOT", "APPLIANCE_VERSIONS"])
def test_a_broken_lock_in_validate_names_what_chose_it_and_no_flag_validate_lacks(tmp_path: Path,
                                                                                  chosen_by: str) -> None:
    """validate has no --versions; the fix names the variable that chose the broken file (APPLIANCE_VERSIONS is
    honoured by the CLI too: a good lock under APPLIANCE_ROOT does not hide it)."""
    for name in ("profiles", "healthchecks", "channels"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "versions.json", tmp_path / "versions.json")
    broken = tmp_path / ("versions.json" if chosen_by == "APPLIANCE_ROOT" else "other.json")
    broken.write_text("{")
    env = {k: v for k, v in os.environ.items() if k not in ("APPLIANCE_ROOT", "APPLIANCE_VERSIONS")}
    env["APPLIANCE_ROOT"] = str(tmp_path)
    if chosen_by == "APPLIANCE_VERSIONS":
        env[chosen_by] = str(broken)
    r = run_main(["validate", "cpu-smoke"], env=env, replace_env=True, cwd=ROOT, limit_s=60)  # tests/in_process.py
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"the version lock {broken} is not readable JSON" in r.stderr, r.stderr
    assert chosen_by in r.stderr and "--versions" not in r.stderr, r.stderr
