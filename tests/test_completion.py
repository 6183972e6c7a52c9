"""`appliance completion SHELL`: the script shtab generates from every command's real parser, exercised in a real
bash (its completion function called as bash calls it on TAB), and zsh/tcsh scripts that name the commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli import COMMANDS, main
from appliance.lock import load_lock
from appliance.profile import list_profiles
from tests.in_process import run_main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = run_main(["completion", "bash"], limit_s=120)  # in-process (tests/in_process.py)
    assert made.returncode == 0, made.stderr
    out = made.stdout
    path = tmp_path_factory.mktemp("completion") / "appliance.bash"
    path.write_text(out)
    return path


def _complete(script: Path, tmp_path: Path, *words: str) -> list[str]:
    """COMPREPLY for the command line `words` (the last one being completed), as bash's TAB computes it."""
    # `appliance` on PATH is this interpreter's (the profile names are asked of it at TAB time)
    shim = tmp_path / "bin" / "appliance"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m appliance \"$@\"\n")
    shim.chmod(0o755)
    line = " ".join(words)
    probe = (f"source {script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
             f"COMP_POINT={len(line)}; _shtab_appliance; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=120, env=env, check=True)
    return [w for w in done.stdout.splitlines() if w]


def test_bash_completes_commands_flags_profiles_and_channels(bash_script: Path, tmp_path: Path) -> None:
    assert shutil.which("bash")
    assert _complete(bash_script, tmp_path, "appliance", "ren") == ["render"]
    assert _complete(bash_script, tmp_path, "appliance", "render", "--master-a") == ["--master-addr"]
    assert "--json" in _complete(bash_script, tmp_path, "appliance", "render", "--")
    wanted = [n for n in list_profiles() if n.startswith("gb10-tp2-n")]
    assert wanted and _complete(bash_script, tmp_path, "appliance", "validate", "gb10-tp2-n") == wanted
    cpu = [n for n in sorted(load_lock().channels) if n.startswith("vllm-cpu")]
    assert cpu and _complete(bash_script, tmp_path, "appliance", "versions", "--channel", "vllm-cpu") == cpu


@pytest.mark.parametrize("shell", ["zsh", "tcsh"])
def test_zsh_and_tcsh_scripts_name_every_command(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in COMMANDS)


def test_profiles_names_is_one_name_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "--names"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == list_profiles()


PROBE_IMPORTS = """
import sys
from appliance.cli import main
main(["profiles", "--names"])
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_settings", "yaml", "rich")
             or m in ("appliance.profile.loader", "appliance.profile.model")))
"""


def test_what_tab_asks_imports_no_model_no_yaml_and_no_settings() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE_IMPORTS], capture_output=True, text=True, timeout=60,
                          check=True)
    *names, imported = done.stdout.splitlines()
    assert names == list_profiles() and imported == "[]"  # the names, and none of the heavy modules behind them


def test_the_profile_package_still_hands_out_its_names_on_first_use() -> None:
    import appliance.profile as profile

    assert profile.load_profile("cpu-smoke").profile.name == "cpu-smoke"
    assert profile.Profile.__name__ == "Profile" and "cpu-smoke" in profile.list_profiles()
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        profile.nothing  # noqa: B018


def test_an_unknown_shell_is_refused_with_exit_2() -> None:
    done = run_main(["completion", "fish-and-chips"], limit_s=60)
    assert done.returncode == 2 and "choose from 'bash', 'zsh', 'tcsh'" in done.stderr
