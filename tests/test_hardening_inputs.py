"""Issue 11, classes 1-3 and 8: every value from outside keeps the same bounds wherever it enters (profile, --set,
APPLIANCE_* env, a flag); the YAML loader never raises past its boundary; paths fail with exit 2 naming them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.bounds import MAX_MASTER_PORT
from appliance.cli import main
from tests.in_process import run_main

ROOT = Path(__file__).resolve().parent.parent


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def write_profile(tmp_path: Path, body: str | bytes, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return str(path)


CPU_SMOKE = (ROOT / "profiles" / "cpu-smoke.yaml").read_text()

# --- class 1: control characters, wherever they enter -------------------------------------------------------------


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x1b", "\t", "\x7f", "\x85", "\u2028"])
def test_a_control_character_in_a_set_value_is_refused_naming_field_value_and_reason(
        capsys: pytest.CaptureFixture[str], char: str) -> None:
    code, out, err = cli(capsys, "validate", "cpu-smoke", "--set", f"server.served_model_name=a{char}[program:x]")
    assert code == 2 and out == ""
    assert "cli:--set" in err and "control character" in err and repr(char) in err
    assert "fix:" in err and "why:" in err and "Traceback" not in err


def test_a_newline_inside_a_quoted_profile_string_is_refused_with_its_path(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = CPU_SMOKE.replace('description: "SmolLM2', 'description: "one\\n[program:evil]\\ncommand=/bin/sh SmolLM2')
    path = write_profile(tmp_path, body)
    code, _, err = cli(capsys, "render", path)
    assert code == 2 and "description" in err and "'\\n'" in err


def test_a_newline_in_appliance_set_is_refused_naming_the_variable(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_SET", "description=x\n[program:evil]")
    code, _, err = cli(capsys, "config", "cpu-smoke")
    assert code == 2 and "APPLIANCE_SET" in err and "control character" in err


@pytest.mark.parametrize("var", ["APPLIANCE_PROFILE", "APPLIANCE_MASTER_ADDR", "APPLIANCE_FABRIC_IFNAME",
                                 "APPLIANCE_LOG_DIR", "APPLIANCE_MODEL_DIR"])
def test_an_escape_sequence_in_any_placement_variable_is_refused(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    monkeypatch.setenv(var, "x\x1b[2Jy")
    code, _, err = cli(capsys, "render", "cpu-smoke")
    assert code == 2 and var in err and "\x1b" not in err  # shown escaped, never sent to the terminal


def test_an_over_long_value_is_refused_before_it_reaches_an_argv(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "render", "cpu-smoke", "--set", "server.tokenizer_mode=" + "a" * (128 * 1024))
    assert code == 2 and "128 KiB" in err and len(err) < 2000  # the value is truncated in the message


# --- class 2: the YAML loader --------------------------------------------------------------------------------------

BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9 if i else ['x'] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("body,needle", [
    (b"\xff\xfen\x00a\x00m\x00e\x00", "not UTF-8 (UTF-16)"),
    (b"name: caf\xe9\n", "not UTF-8"),
    ("provenance: {status: test, source: x, date: 2026-13-45}\n", "YAML cannot represent"),
    ("limits: {max_model_len: " + "9" * 5000 + "}\n", "YAML cannot represent"),
    ("? [a, b]\n: 1\n", "YAML cannot represent"),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    (BOMB, "aliases are expanded"),
    ("a: &a [1, *a]\n", "refers to the node that holds it"),
    ("a: !!binary aGVsbG8=\n", "no profile value"),
    ("a: \x01\n", "not valid YAML"),
])
def test_the_yaml_loader_turns_every_hostile_document_into_exit_2(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str | bytes, needle: str) -> None:
    code, _, err = cli(capsys, "validate", write_profile(tmp_path, body))
    assert code == 2 and needle in err and "Traceback" not in err
    assert len(err) < 3000


def test_an_oversized_profile_is_refused_without_being_read_whole(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "validate", write_profile(tmp_path, "# " + "x" * (2 << 20)))
    assert code == 2 and "limit" in err


@pytest.mark.parametrize("extends", ["/etc/passwd", "../profiles/cpu-smoke", "bases/../../x", "[1, 2]", "{a: b}"])
def test_extends_names_only_files_inside_profiles(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, extends: str) -> None:
    code, _, err = cli(capsys, "validate", write_profile(tmp_path, f"extends: {extends}\n" + CPU_SMOKE))
    assert code == 2 and "extends" in err and "Traceback" not in err


def test_a_broken_profile_is_listed_as_invalid_and_the_others_still_are(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOT / "profiles", root / "profiles")
    shutil.copytree(ROOT / "channels", root / "channels")
    shutil.copy(ROOT / "versions.json", root / "versions.json")
    (root / "profiles" / "broken.yaml").write_text("name: broken\nhardware: [\n")
    r = run_main(["profiles", "--all"], env={"APPLIANCE_ROOT": str(root)})  # in-process (tests/in_process.py)
    assert r.returncode == 0, r.stderr
    assert "broken  INVALID" in r.stdout and "cpu-smoke" in r.stdout and "gb10-tp2" in r.stdout


# --- class 3: placement and network bounds, one per source ---------------------------------------------------------

@pytest.mark.parametrize("source", ["flag", "env", "profile"])
def test_a_master_port_whose_rendezvous_port_would_be_65536_is_refused_from_every_source(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    argv = ["render", "cpu-smoke-2node", "--master-addr", "10.0.0.1"]
    if source == "flag":
        argv += ["--master-port", "65535"]
    elif source == "env":
        monkeypatch.setenv("APPLIANCE_MASTER_PORT", "65535")
    else:
        argv += ["--set", "distributed.master_port=65535"]
    code, _, err = cli(capsys, *argv)
    # The highest master port whose derived ports (master + 1 rendezvous, master + 2 fabric qualification) fit.
    assert code == 2 and "65535" in err and str(MAX_MASTER_PORT) in err


@pytest.mark.parametrize("source", ["flag", "env"])
@pytest.mark.parametrize("addr", ["not an address", "10.0.0.300", "-x", "a..b", "[::1"])
def test_a_master_address_must_parse_as_an_ip_or_host_name(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, source: str, addr: str) -> None:
    argv = ["render", "cpu-smoke-2node"]
    if source == "flag":
        argv.append(f"--master-addr={addr}")
    else:
        monkeypatch.setenv("APPLIANCE_MASTER_ADDR", addr)
    code, _, err = cli(capsys, *argv)
    assert code == 2 and "neither an IP address nor a host name" in err


@pytest.mark.parametrize("addr", ["10.0.0.1", "fd00::1", "[fd00::1]", "head-0.lws.default.svc"])
def test_good_addresses_are_accepted(capsys: pytest.CaptureFixture[str], addr: str) -> None:
    code, _, err = cli(capsys, "render", "cpu-smoke-2node", "--master-addr", addr)
    assert code == 0, err


@pytest.mark.parametrize("source", ["flag", "env"])
@pytest.mark.parametrize("name", ["eth0/x", "a" * 16, "..", "en p1"])
def test_an_interface_name_must_be_a_linux_interface_name(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, source: str, name: str) -> None:
    argv = ["render", "cpu-smoke-2node", "--master-addr", "10.0.0.1"]
    if source == "flag":
        argv.append(f"--fabric-ifname={name}")
    else:
        monkeypatch.setenv("APPLIANCE_FABRIC_IFNAME", name)
    code, _, err = cli(capsys, *argv)
    assert code == 2 and "interface name" in err


@pytest.mark.parametrize("rank", ["-1", "2", "16"])
def test_a_node_rank_outside_the_profile_is_refused(capsys: pytest.CaptureFixture[str], rank: str) -> None:
    code, _, err = cli(capsys, "render", "cpu-smoke-2node", "--master-addr", "10.0.0.1", f"--node-rank={rank}")
    assert code == 2 and "rank" in err


@pytest.mark.parametrize("override,needle", [
    ("server.health_port=8000", "is the API port too"),
    ('server.served_model_name=" "', "served_model_name"),
    ("server.served_model_name=--api-key", "served_model_name"),
    ("server.host=not a host", "neither an IP address nor a host name"),
    ("server.port=0", "server.port"),
    ("server.port=65536", "server.port"),
])
def test_server_fields_keep_their_bounds(capsys: pytest.CaptureFixture[str], override: str, needle: str) -> None:
    code, _, err = cli(capsys, "render", "cpu-smoke", "--set", override)
    assert code == 2 and needle in err


# --- class 8: paths ------------------------------------------------------------------------------------------------

def test_logscan_says_a_fifo_is_not_a_regular_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    code, _, err = cli(capsys, "logscan", str(fifo), "--profile", "cpu-smoke")
    assert code == 2 and "is not a regular file" in err


def test_a_profile_path_that_is_a_folder_is_not_a_regular_file(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    code, _, err = cli(capsys, "validate", f"{tmp_path}/")
    assert code == 2 and "is not a regular file" in err


def test_make_dir_names_the_variable_and_the_path(tmp_path: Path) -> None:
    from appliance.errors import ApplianceError
    from appliance.paths import make_dir

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ApplianceError, match=r"APPLIANCE_HOME: cannot create .*file/sub.*Not a directory"):
        make_dir(blocker / "sub", "APPLIANCE_HOME")
    with pytest.raises(ApplianceError, match=r"--run-dir: .* is not a directory"):
        make_dir(blocker, "--run-dir")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_run_with_a_run_dir_that_cannot_be_created_exits_2_naming_it(tmp_path: Path, smoke_model_dir: Path,
                                                                     how: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path / "home")}
    argv = [sys.executable, "-m", "appliance", "run", "cpu-smoke", "--dry-run", "--skip-doctor",
            "--model-dir", str(smoke_model_dir)]
    if how == "flag":
        argv += ["--run-dir", str(blocker / "run")]
    else:
        env["APPLIANCE_LOG_DIR"] = str(blocker / "run")
    r = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=120)
    assert r.returncode == 2, r.stderr
    assert ("--run-dir" if how == "flag" else "APPLIANCE_LOG_DIR") in r.stderr and str(blocker) in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("argv,needle", [
    (["--url", "ftp://127.0.0.1:8000"], "--url"),
    (["--exporter", "http://user:pw@127.0.0.1:8470"], "--exporter"),
    (["--tokenizer", "tok\n--rm"], "--tokenizer"),
    (["--bench-corpus", "\x1b[2J"], "--bench-corpus"),
])
def test_gate_flags_keep_the_same_bounds_before_anything_is_asked(capsys: pytest.CaptureFixture[str],
                                                                  argv: list[str], needle: str) -> None:
    code, _, err = cli(capsys, "gate", "--profile", "cpu-smoke", *argv)
    assert code == 2 and needle in err and "Traceback" not in err


def test_run_refuses_a_health_port_from_the_environment_that_is_the_api_port(tmp_path: Path,
                                                                            smoke_model_dir: Path) -> None:
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path / "home"), "APPLIANCE_HEALTH_PORT": "8000"}
    r = subprocess.run([sys.executable, "-m", "appliance", "run", "cpu-smoke", "--dry-run", "--skip-doctor",
                        "--model-dir", str(smoke_model_dir), "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, check=False, timeout=120)
    assert r.returncode == 2 and "APPLIANCE_HEALTH_PORT=8000: the API port too" in r.stderr
    assert not (tmp_path / "run" / "supervisord.conf").exists()


@pytest.mark.parametrize(("rank", "said"), [("-1", "--node-rank=-1: outside 0-15"),  # every placement flag's bound
                                           ("2", "outside the 2-node profile")])
def test_logscan_refuses_a_rank_outside_the_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    rank: str, said: str) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    code, _, err = cli(capsys, "logscan", str(log), "--profile", "cpu-smoke-2node", f"--node-rank={rank}")
    assert code == 2 and said in err
