"""The one writer (appliance/safe_write.py): nothing at the path is destroyed, a missing parent is exit 2 with the
path, nothing is left behind, and files that belong together are written together or not at all (issue 22 item 1).

Each kind of target is made for real here (a FIFO, a symlink, a folder, a socket, /dev/null as root)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.safe_write import open_for_writing, write_file, write_files, write_json
from tests.in_process import CliRun, run_main

ROOT = Path(__file__).resolve().parent.parent


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _symlink(path: Path) -> Path:
    target = path.with_name("elsewhere.txt")
    target.write_text("the link's target\n")
    path.symlink_to(target)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    (path / "inside.txt").write_text("kept\n")
    return path


def _socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    return path


KINDS = {"a FIFO": _fifo, "a symlink": _symlink, "a folder": _folder, "a socket": _socket}


def _listing(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    out = {}
    for p in sorted(folder.rglob("*")):
        st = os.lstat(p)
        content = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), content)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_target_that_is_no_regular_file_is_refused_by_name_and_left_as_it_was(tmp_path: Path, kind: str) -> None:
    target = KINDS[kind](tmp_path / "out.json")
    before = _listing(tmp_path)
    began = time.monotonic()
    with pytest.raises(ApplianceError) as err:
        write_json(target, {"a": 1}, field="--record-calibration")
    assert time.monotonic() - began < 5  # a FIFO is never opened: nothing blocks
    assert f"is {kind}" in str(err.value) and "--record-calibration" in str(err.value) and str(target) in str(err.value)
    assert _listing(tmp_path) == before  # the target untouched, no .out.json.*.tmp left


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_old_write_json_atomic_name_goes_through_the_one_writer(tmp_path: Path, kind: str) -> None:
    from appliance.paths import write_json_atomic  # branches written before the one writer landed still call it

    target = KINDS[kind](tmp_path / "out.json")
    before = _listing(tmp_path)
    with pytest.raises(ApplianceError, match=f"is {kind}"):
        write_json_atomic(target, {"a": 1})
    assert _listing(tmp_path) == before
    write_json_atomic(tmp_path / "plain.json", {"a": 1}, indent=2)
    assert json.loads((tmp_path / "plain.json").read_text()) == {"a": 1}


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may replace /dev/null; the refusal is what is tested")
def test_dev_null_as_root_stays_a_device() -> None:
    with pytest.raises(ApplianceError, match="is a character device"):
        write_file(Path("/dev/null"), "x", field="--out")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_missing_parent_names_the_path_and_nothing_is_created(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match="does not exist") as err:
        write_file(tmp_path / "no" / "such" / "file.json", "x", field="--out")
    assert str(tmp_path / "no" / "such") in str(err.value) and err.value.field == "--out"
    assert list(tmp_path.iterdir()) == []


def test_a_parent_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ApplianceError, match="is not a folder"):
        write_file(tmp_path / "plain" / "f.json", "y", field="--out")


def test_a_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("old")
    target.chmod(0o600)
    write_json(target, {"new": True}, field="--out")
    assert json.loads(target.read_text()) == {"new": True} and stat.S_IMODE(target.stat().st_mode) == 0o600
    write_file(tmp_path / "fresh.txt", "x", field="--out")
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json", "fresh.txt"]


def test_a_failure_while_writing_leaves_the_old_file_and_no_temporary(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.json"
    target.write_text("old")

    def full(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ApplianceError, match="No space left on device"):
        write_file(target, "new", field="--out")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_nan_is_refused_rather_than_written_as_no_json(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match="JSON"):
        write_json(tmp_path / "f.json", {"x": float("nan")}, field="--out")
    assert list(tmp_path.iterdir()) == []


def test_a_pair_is_refused_whole_when_one_target_is_a_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "launch.json", tmp_path / "supervisord.conf"
    first.write_text("old launch")
    second.mkdir()
    with pytest.raises(ApplianceError, match="is a folder"):
        write_files({first: "new launch", second: "new conf"}, field="--run-dir")
    assert first.read_text() == "old launch" and sorted(p.name for p in tmp_path.iterdir()) == [
        "launch.json", "supervisord.conf"]


def test_a_failed_verification_writes_neither(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"

    def refuse(staged: dict[Path, Path]) -> None:
        assert staged[second].read_text() == "B"  # the staged file is there to be read
        raise ApplianceError("no", field="x")

    with pytest.raises(ApplianceError):
        write_files({first: "A", second: "B"}, field="--run-dir", verify=refuse)
    assert list(tmp_path.iterdir()) == []


def test_a_pair_whose_second_rename_fails_gets_the_first_file_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, third = tmp_path / "launch.json", tmp_path / "supervisord.conf", tmp_path / "fabric.json"
    first.write_text("old launch")
    real_replace = os.replace
    calls: list[str] = []

    def failing(src: str | Path, dst: str | Path) -> None:
        calls.append(str(dst))
        if Path(dst) == second:
            raise OSError(13, "Permission denied")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(ApplianceError, match="Permission denied"):
        write_files({first: "new launch", third: "new fabric", second: "new conf"}, field="--run-dir")
    assert first.read_text() == "old launch"  # put back from its backup
    assert not third.exists()  # new, so removed again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch.json"]  # no staged file, no backup left


def test_a_log_opened_for_writing_refuses_a_fifo_with_a_reader(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "lm-eval.log")
    reader = threading.Thread(target=lambda: open(fifo, "rb").close(), daemon=True)
    reader.start()
    with pytest.raises(ApplianceError, match="is a FIFO"):
        open_for_writing(fifo, field="--out")
    with open(fifo, "wb"):  # release the reader thread
        pass
    reader.join(5)
    with open_for_writing(tmp_path / "plain.log", field="--out") as fh:
        fh.write("line\n")
    assert (tmp_path / "plain.log").read_text() == "line\n"


def _appliance(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CliRun:
    """`appliance ARGS` in-process (tests/in_process.py)."""
    return run_main(args, env=env, cwd=ROOT, limit_s=timeout)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_canary_refuses_a_record_target_that_is_no_file_before_asking_the_serve(tmp_path: Path, kind: str) -> None:
    target = KINDS[kind](tmp_path / "cal.json")
    before = _listing(tmp_path)
    # Port 1 on loopback answers nothing: the refusal must come first, naming the path, not the serve.
    r = _appliance("canary", "--url", "http://127.0.0.1:1", "--record-calibration", str(target))
    assert r.returncode == 2, r.stderr
    assert f"is {kind}" in r.stderr and str(target) in r.stderr and "Traceback" not in r.stderr
    assert _listing(tmp_path) == before


def test_canary_refuses_a_record_target_in_a_missing_folder_naming_it(tmp_path: Path) -> None:
    r = _appliance("canary", "--url", "http://127.0.0.1:1", "--record-calibration", str(tmp_path / "no" / "c.json"))
    assert r.returncode == 2 and "does not exist" in r.stderr and str(tmp_path / "no") in r.stderr, r.stderr


def test_run_writes_launch_json_and_supervisord_conf_as_a_pair_or_not_at_all(tmp_path: Path,
                                                                             smoke_model_dir: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "supervisord.conf").mkdir()  # in the way of the second file of the pair
    env = {"APPLIANCE_HOME": str(tmp_path / "home")}
    r = _appliance("run", "cpu-smoke", "--dry-run", "--skip-doctor", "--model-dir", str(smoke_model_dir),
                   "--run-dir", str(run_dir), env=env)
    assert r.returncode == 2 and "supervisord.conf" in r.stderr and "is a folder" in r.stderr, r.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["supervisord.conf"]  # no launch.json, no temporary
    (run_dir / "supervisord.conf").rmdir()
    r = _appliance("run", "cpu-smoke", "--dry-run", "--skip-doctor", "--model-dir", str(smoke_model_dir),
                   "--run-dir", str(run_dir), env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["launch.json", "supervisord.conf"]


def test_gate_receipt_and_summary_are_one_write(tmp_path: Path) -> None:
    from appliance.gate.receipt import write
    from tests.test_gate_receipt import _receipt

    (tmp_path / "summary.md").mkdir()
    with pytest.raises(ApplianceError, match="is a folder"):
        write(_receipt(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.md"]
