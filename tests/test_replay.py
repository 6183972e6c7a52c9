"""appliance/replay.py: a pure command's answer is replayed only while nothing it read has changed. Each test runs the
real entry point in a process of its own (the replay is a property of the process: what it imported, what it read),
with APPLIANCE_HOME in the test's folder; the printed marker after the call says whether pydantic was imported,
i.e. whether the command ran or its answer was replayed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance import replay
from tests.data_copy import copy_data_root

ROOT = Path(__file__).resolve().parent.parent
MARK = "\nREPLAY-TEST pydantic imported: "
# The entry point as the console script calls it, then the marker on stderr: written after the call, so no recording
# holds it.
ENTRY = ("import sys; from appliance.replay import main; code = main(); "
         f"sys.stderr.write({MARK!r} + str('pydantic' in sys.modules)); sys.exit(code)")


# A copy of the package imported instead of the checkout's: an editable install's finder sits on sys.meta_path ahead
# of PYTHONPATH, so it leaves first.
COPY_FIRST = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]; "
              "sys.path.insert(0, {path!r}); ")


def call(args: list[str], home: Path, *, env: dict[str, str] | None = None,
         copy: Path | None = None) -> tuple[int, str, str, bool]:
    """(exit status, stdout, stderr without the marker, whether the command ran rather than replayed); bytecode is
    written, as by an installed appliance."""
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith("APPLIANCE_") and k != "PYTHONDONTWRITEBYTECODE"}
    run_env |= {"APPLIANCE_HOME": str(home), **(env or {})}
    entry = ENTRY if copy is None else COPY_FIRST.format(path=str(copy)) + ENTRY
    proc = subprocess.run([sys.executable, "-c", entry, *args], capture_output=True, text=True, env=run_env,
                          cwd=ROOT, timeout=120)
    stderr, _, ran = proc.stderr.rpartition(MARK)
    assert ran in ("True", "False"), proc.stderr
    return proc.returncode, proc.stdout, stderr, ran == "True"


def entries(home: Path) -> list[Path]:
    folder = home / "replay"
    return sorted(folder.glob("*.marshal")) if folder.is_dir() else []


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    return copy_data_root(tmp_path)


def test_a_second_validate_replays_the_first_answer_without_running(tmp_path: Path, data_root: Path) -> None:
    env = {"APPLIANCE_ROOT": str(data_root)}
    first = call(["validate", "gb10-tp2"], tmp_path, env=env)
    assert first[3], "the first call must run the command"
    assert first[0] == 0 and "gb10-tp2: ok" in first[1]
    assert len(entries(tmp_path)) == 1
    second = call(["validate", "gb10-tp2"], tmp_path, env=env)
    assert not second[3], "nothing changed: the answer must be replayed, without pydantic"
    assert second[:3] == first[:3]


def test_an_invalid_profile_replays_its_exit_status_and_findings(tmp_path: Path, data_root: Path) -> None:
    env = {"APPLIANCE_ROOT": str(data_root)}
    args = ["validate", "gb10-tp2", "--set", "cache.kv_dtype=auto"]
    first = call(args, tmp_path, env=env)
    assert first[0] == 2 and first[3]
    second = call(args, tmp_path, env=env)
    assert second[:3] == first[:3] and not second[3]


def test_an_edit_to_a_profile_that_keeps_its_size_and_mtime_is_seen(tmp_path: Path, data_root: Path) -> None:
    env = {"APPLIANCE_ROOT": str(data_root)}
    args = ["render", "cpu-smoke", "--format", "json"]
    first = call(args, tmp_path, env=env)
    assert first[0] == 0 and first[3]
    profile = data_root / "profiles" / "cpu-smoke.yaml"
    text = profile.read_text()
    stat = profile.stat()
    # one digit for another: the same size, and the old mtime put back, as an edit inside the clock's tick leaves it
    match = re.search(r"max_model_len: (\d)", text)
    assert match, "cpu-smoke.yaml names limits.max_model_len"
    digit = match.group(1)
    edited = text[:match.start(1)] + ("2" if digit != "2" else "3") + text[match.end(1):]
    assert len(edited) == len(text)
    profile.write_text(edited)
    os.utime(profile, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = call(args, tmp_path, env=env)
    assert second[3], "the profile's content changed: the command must run again"
    assert second[1] != first[1]


def test_another_environment_or_argument_is_another_answer(tmp_path: Path, data_root: Path) -> None:
    env = {"APPLIANCE_ROOT": str(data_root)}
    call(["validate", "cpu-smoke"], tmp_path, env=env)
    assert call(["validate", "cpu-smoke"], tmp_path, env={**env, "REPLAY_TEST_OTHER": "1"})[3]
    assert call(["validate", "cpu-smoke", "--json"], tmp_path, env=env)[3]
    assert len(entries(tmp_path)) == 3
    assert not call(["validate", "cpu-smoke"], tmp_path, env=env)[3]


def test_an_edited_module_is_seen_and_a_run_that_writes_bytecode_is_not_recorded(tmp_path: Path) -> None:
    """A copy of the package without bytecode: the first run writes its .pyc files (a write: not
    recorded), the second records, the third replays; an edit to a module's source (its .pyc unchanged) runs again."""
    code = tmp_path / "code"
    shutil.copytree(ROOT / "appliance", code / "appliance", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"APPLIANCE_ROOT": str(ROOT)}
    args = ["rules"]
    home = tmp_path / "home"
    first = call(args, home, env=env, copy=code)
    assert first[0] == 0 and first[3]
    assert list((code / "appliance").glob("__pycache__/*.pyc")), "the first run compiles the copy"
    assert entries(home) == [], "a run that wrote files is not recorded"
    assert call(args, home, env=env, copy=code)[3]
    assert len(entries(home)) == 1
    assert not call(args, home, env=env, copy=code)[3]
    rulebook = code / "appliance" / "rulebook.py"
    rulebook.write_text(rulebook.read_text() + "\nprint('an edited rulebook')\n")
    edited = call(args, home, env=env, copy=code)
    assert edited[3] and "an edited rulebook" in edited[1]


def test_a_command_that_reads_the_host_is_never_recorded(tmp_path: Path) -> None:
    first = call(["profiles", "--host"], tmp_path)
    assert first[3]
    assert entries(tmp_path) == []
    assert call(["profiles", "--host"], tmp_path)[3]


def test_no_secret_reaches_a_recorded_answer(tmp_path: Path, data_root: Path) -> None:
    secret = "hf_replayTestSecretValue0123456789"
    env = {"APPLIANCE_ROOT": str(data_root), "HF_TOKEN": secret, "VLLM_API_KEY": secret}
    call(["render", "cpu-smoke"], tmp_path, env=env)
    (entry,) = entries(tmp_path)
    assert secret.encode() not in entry.read_bytes()


def test_a_source_beside_its_bytecode_is_a_dependency() -> None:
    recorder = replay._Recorder([], "/nonexistent/entry.marshal")
    recorder._note("read", "/srv/pkg/__pycache__/mod.cpython-311.opt-1.pyc")
    assert ("stat", "/srv/pkg/mod.py") in recorder.deps
    assert ("read", "/srv/pkg/__pycache__/mod.cpython-311.opt-1.pyc") in recorder.deps


def test_the_oldest_entries_go_past_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "KEEP", 3)
    for i in range(5):
        path = tmp_path / f"{i}.marshal"
        path.write_bytes(b"x")
        os.utime(path, ns=(i * 10**9, i * 10**9))
    replay._prune(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.marshal", "3.marshal", "4.marshal"]


def test_a_file_edited_while_the_command_runs_is_not_recorded(tmp_path: Path, data_root: Path) -> None:
    """An editor's save between the command's read and the record: the record would pair the new file with the old
    answer. The save is made at that moment by wrapping the recorder's save (the only way to place it there)."""
    profile = data_root / "profiles" / "cpu-smoke.yaml"
    edit = (f"import pathlib, appliance.replay as r; p = pathlib.Path({str(profile)!r}); save = r._Recorder._save; "
            "r._Recorder._save = lambda self, code: (p.write_text(p.read_text() + '\\n# edited during the run\\n'), "
            "save(self, code))[1]; ")
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ROOT": str(data_root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run([sys.executable, "-c", edit + ENTRY, "validate", "cpu-smoke"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert entries(tmp_path) == []
    assert call(["validate", "cpu-smoke"], tmp_path, env={"APPLIANCE_ROOT": str(data_root)})[3]


def test_a_secret_in_an_argument_is_never_written_down(tmp_path: Path, data_root: Path) -> None:
    secret = "hf_replayTestSecretValue0123456789"
    code, _, err, ran = call(["validate", secret], tmp_path,
                             env={"APPLIANCE_ROOT": str(data_root), "HF_TOKEN": secret})
    assert ran and code == 2 and secret not in err
    assert entries(tmp_path) == []


def test_what_ran_before_the_recorder_is_a_dependency_too(tmp_path: Path, data_root: Path) -> None:
    import marshal

    call(["validate", "cpu-smoke"], tmp_path, env={"APPLIANCE_ROOT": str(data_root)})
    (entry,) = entries(tmp_path)
    _, deps, _, _ = marshal.loads(entry.read_bytes())
    paths = {path for _, path, _ in deps}
    assert str(ROOT / "appliance" / "paths.py") in paths and str(ROOT / "appliance" / "replay.py") in paths


def test_a_vanished_working_folder_or_a_closed_stdout_runs_the_command(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    prelude = f"import os; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", prelude + ENTRY, "rules", "K1"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "K1" in proc.stdout, proc.stderr
    closed = subprocess.run([sys.executable, "-c", ENTRY, "rules", "K1"], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=120, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 0, closed.stderr


def test_the_terminal_size_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "isatty", lambda fd: True)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((200, 50)))
    wide = replay._key(["profiles"])
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((60, 50)))
    assert replay._key(["profiles"]) != wide


def test_a_stat_that_does_not_follow_links_is_checked_as_one(tmp_path: Path) -> None:
    link = tmp_path / "dangling.yaml"
    link.symlink_to(tmp_path / "nowhere")
    recorder = replay._Recorder([], str(tmp_path / "entry.marshal"))
    real = recorder._watch("stat", "stat")
    try:
        recorder.recording = True
        os.stat(link, follow_symlinks=False)
    finally:
        recorder.recording = False
        os.stat = real
    assert ("lstat", str(link)) in recorder.deps and ("stat", str(link)) not in recorder.deps
    assert recorder.deps[("lstat", str(link))] is not None  # the link itself is there; a stat of it would say not
