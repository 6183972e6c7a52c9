"""The command's contract: exit codes, messages on stderr, no tracebacks."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from appliance.cli import main
from tests.in_process import CliRun, run_main


def run(*args: str) -> CliRun:
    """`appliance ARGS` in-process (tests/in_process.py); the exit status of a real `python -m appliance` is the
    first test's."""
    return run_main(args, limit_s=120)


def test_validate_invalid_profile_exits_2_listing_every_finding_with_rule_ids() -> None:
    r = subprocess.run([sys.executable, "-m", "appliance", "validate", "gb10-tp2", "--set", "cache.kv_dtype=auto",
                        "--set", "speculative.num_tokens=3"], capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert "K1 cache.kv_dtype='auto'" in r.stderr and "K2 speculative.num_tokens=3" in r.stderr
    assert "Traceback" not in r.stderr


def test_validate_with_warnings_only_exits_0() -> None:
    r = run("validate", "gb10-tp2", "--set", "cache.guard=0")
    assert r.returncode == 0 and "WARNING K4" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (("validate", "no-such-profile"), "unknown profile 'no-such-profile'"),
    (("render", "gb10-tp2", "--set", "cache.gaurd=0"), "did you mean 'guard'"),
    (("render", "gb10-tp2"), "APPLIANCE_MASTER_ADDR"),
    (("config", "gb10-tp2", "--set", "limits.max_model_len=ten"), "limits.max_model_len='ten'"),
])
def test_bad_input_exits_2_with_a_clear_message_and_no_traceback(args: tuple[str, ...], needle: str) -> None:
    r = run(*args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_render_refuses_an_invalid_profile_and_prints_nothing_on_stdout() -> None:
    r = run("render", "rtx-pro-6000-tp2", "--set", "cache.kv_dtype=auto")
    assert r.returncode == 2 and r.stdout == "" and "K1" in r.stderr


def test_config_shows_origins_and_redacts_secrets(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret_value")
    monkeypatch.setenv("APPLIANCE_SET", "limits.max_num_seqs=16")
    assert main(["config", "gb10-tp2", "--json", "--set", "cache.guard=2"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data["values"]["limits.max_num_seqs"] == {"value": 16, "origin": "env:APPLIANCE_SET"}
    assert data["values"]["cache.guard"] == {"value": 2, "origin": "cli:--set"}
    assert data["secrets"]["HF_TOKEN"] == "set (redacted)"
    assert "hf_supersecret_value" not in out


def test_profile_comes_from_the_environment_when_not_named(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("APPLIANCE_PROFILE", "cpu-smoke")
    assert main(["render", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["role"] == "single"


def test_profiles_table_lists_provenance() -> None:
    r = run("profiles")
    assert r.returncode == 0
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("gb10-tp2 "))
    assert "2x1" in line and "dspark:5" in line and "partial" in line


def test_cli_start_does_not_import_pydantic_for_help() -> None:
    code = "import sys; from appliance import cli; print('pydantic' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_a_bad_environment_variable_is_named_with_exit_2() -> None:
    r = run_main(["render", "cpu-smoke"], env={"APPLIANCE_NODE_RANK": "abc"})
    assert r.returncode == 2 and "APPLIANCE_NODE_RANK='abc'" in r.stderr and "Traceback" not in r.stderr


def test_fetch_model_offline_says_how_to_get_the_checkpoint_instead_of_a_traceback() -> None:
    r = run_main(["fetch-model", "gb10-tp2"], env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2 and "HF_HUB_OFFLINE=1" in r.stderr and "APPLIANCE_MODEL_DIR" in r.stderr
    assert "Traceback" not in r.stderr


def test_help_says_what_the_tool_does_in_whole_sentences(capsys) -> None:
    from appliance.cli import main

    assert main([]) == 2
    out = capsys.readouterr().out
    assert "Serve DeepSeek-V4-Flash on NVIDIA SM12x" in out and "and gate it." in out
    assert "Each subcommand lives" not in out  # the module's docstring is for developers


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_canary_takes_the_openai_base_url_with_or_without_v1(suffix: str, capsys) -> None:
    """Every OpenAI client is given `http://host:8000/v1`: the canary asks `/v1/models` of the serve either way."""
    from appliance.bounds import api_base_url
    from appliance.cli import main
    from tests.conftest import free_port

    port = free_port()  # nothing listens there: the refusal names the URL the canary asked
    assert main(["canary", "--url", f"http://127.0.0.1:{port}{suffix}"]) == 2
    err = capsys.readouterr().err
    assert f"http://127.0.0.1:{port}/v1/models:" in err and "/v1/v1" not in err
    assert api_base_url(f"http://h:1{suffix}") == "http://h:1"


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    """Each command's parser, registered for real, and every sub-command's under it."""
    import importlib

    from appliance.cli import COMMANDS

    out: list[tuple[str, argparse.ArgumentParser]] = []
    for name, (module, _) in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=name)
        importlib.import_module(module).register(parser)
        todo = [(name, parser)]
        while todo:
            label, p = todo.pop()
            out.append((label, p))
            for action in p._actions:
                if isinstance(action, argparse._SubParsersAction):
                    todo += [(f"{label} {sub}", sp) for sub, sp in action.choices.items()]
    return out


def test_one_flag_name_per_meaning_across_commands() -> None:
    """Machine-readable output is --json on every command (render's and k8s's `--format json` is its old spelling,
    kept as an alias), and a folder a command writes is --out (smoke-model's --dest is its old spelling)."""
    format_json, dest = [], []
    for label, parser in _every_parser():
        flags = {o: a for a in parser._actions for o in a.option_strings}
        if "--format" in flags and "json" in (flags["--format"].choices or ()):
            format_json.append(label)
            assert "--json" in flags and flags["--json"].dest == flags["--format"].dest, label
            # argparse takes a shared dest's default from the first action that has it: --json's, unless both agree
            defaults = {a.default for a in parser._actions if a.dest == flags["--format"].dest}
            assert len(defaults) == 1 and defaults <= set(flags["--format"].choices) - {"json"}, (label, defaults)
        if "--dest" in flags:
            dest.append(label)
            assert flags["--dest"] is flags.get("--out"), label
    # The old spellings are still there (render, k8s; smoke-model): else the walk checked nothing.
    assert len(format_json) >= 2 and dest, (format_json, dest)


@pytest.mark.parametrize("argv", [["render", "gb10-tp2", "--master-addr", "10.1.0.1"],
                                  ["k8s", "gb10-tp2", "--image", "appliance:gpu"]])
def test_json_is_the_old_format_json_spelling(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--json"]) == 0
    new = capsys.readouterr().out
    assert main([*argv, "--format", "json"]) == 0
    assert json.loads(new) == json.loads(capsys.readouterr().out)


def test_smoke_model_takes_out_and_its_old_spelling_dest() -> None:
    from pathlib import Path

    from appliance.commands import smoke_model

    parser = argparse.ArgumentParser()
    smoke_model.register(parser)
    assert parser.parse_args(["--out", "a"]).dest == Path("a") == parser.parse_args(["--dest", "a"]).dest


@pytest.mark.parametrize(("args", "fix"), [
    (("render",), "appliance profiles lists them"),
    (("upgrade", "plan"), "as `appliance run` got it"),
])
def test_the_profile_is_named_once_the_same_way_by_every_profile_taking_command(args: tuple[str, ...],
                                                                               fix: str) -> None:
    from tests.in_process import run_main

    twice = run_main([*args, "cpu-smoke", "--profile", "gb10-tp2"], env={"APPLIANCE_PROFILE": ""})
    assert twice.returncode == 2 and "two profiles given: cpu-smoke and --profile gb10-tp2" in twice.stderr
    none = run_main(list(args), env={"APPLIANCE_PROFILE": ""})
    assert none.returncode == 2 and "no profile given" in none.stderr and fix in none.stderr, none.stderr
    assert "Traceback" not in twice.stderr + none.stderr


def test_gate_help_is_the_groups_short_help_and_gate_run_help_lists_every_flag_per_check() -> None:
    """`gate` is a group whose default action is a run (issue 37: an 80-line help mixed both)."""
    group = subprocess.run([sys.executable, "-m", "appliance", "gate", "--help"], capture_output=True, text=True,
                           check=True, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"}).stdout.splitlines()
    assert len(group) <= 30 and max(len(line) for line in group) <= 80, "\n".join(group)
    actions = [line.split()[0] for line in group if line.startswith("    ") and not line.startswith("     ")]
    assert actions == ["run", "compare", "paired", "serves", "battery", "report"]
    assert not any("--recall-runs" in line or "--gsm8k" in line for line in group)  # tuning: gate run's help
    every = subprocess.run([sys.executable, "-m", "appliance", "gate", "run", "--help"], capture_output=True,
                           text=True, check=True).stdout
    for title in ("the serve:", "an acceptance battery:", "recall:", "GSM8K (lm-eval):"):
        assert f"\n{title}\n" in every
    for flag in ("--url", "--battery", "--bench-runs", "--recall-runs", "--gsm8k-runs", "--tokenizer"):
        assert f"  {flag} " in every


def test_gate_run_is_the_bare_gate_and_keeps_what_was_given_before_it() -> None:
    from appliance.cli import _parser

    parser = _parser("gate")
    bare = parser.parse_args(["gate", "--url", "http://127.0.0.1:9", "--recall-runs", "3", "--set", "a.b=1"])
    named = parser.parse_args(["gate", "run", "--url", "http://127.0.0.1:9", "--recall-runs", "3", "--set", "a.b=1"])
    assert (bare.gate_action, named.gate_action) == (None, "run")
    assert {k: v for k, v in vars(bare).items() if k != "gate_action"} == \
        {k: v for k, v in vars(named).items() if k != "gate_action"}
    before = parser.parse_args(["gate", "--arm", "v1", "--set", "a.b=1", "run", "--checks", "bench"])
    assert (before.arm, before.overrides, before.checks, before.url) == ("v1", ["a.b=1"], "bench", None)


def test_the_guide_lists_every_gate_action() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    for action in ("battery", "compare", "serves", "paired", "report"):
        assert f"appliance gate {action} " in readme, action


@pytest.mark.parametrize("command", ["validate", "render", "config", "k8s"])
def test_every_command_that_judges_a_profile_says_its_warnings_on_stderr_only(command: str) -> None:
    r = run(command, "gb10-tp2", "--set", "cache.guard=0", *(["--master-addr", "192.0.2.1"] if command == "render"
                                                             else []))
    assert r.returncode == 0, r.stderr
    assert "WARNING K4 cache.guard=0" in r.stderr and "WARNING" not in r.stdout  # stdout: the result alone
