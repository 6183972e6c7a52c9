"""Each `appliance run` starts its programs' logs empty and keeps the last run's beside them (run/fresh_logs.py).
The real engine's side (the log tail prints this run only) is in tests/test_run_engine.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.render.supervisord import LOG_BACKUPS, RunFiles
from appliance.run.fresh_logs import start_fresh_logs
from tests.conftest import start_serve
from tests.hubdouble import safetensors_bytes


def write(folder: Path, **logs: str) -> None:
    for name, text in logs.items():
        (folder / name.replace("_", ".")).write_text(text)


def test_each_log_moves_aside_and_the_oldest_goes(tmp_path: Path) -> None:
    write(tmp_path, vllm_log="run 3\n", vllm_log_1="run 2\n", vllm_log_2="run 1\n",
          exporter_log="exporter 2\n", exporter_log_1="exporter 1\n")
    (tmp_path / "launch.json").write_text("{}")  # not a log: it stays
    moved = start_fresh_logs(RunFiles.at(tmp_path))
    assert moved == [tmp_path / "vllm.log", tmp_path / "exporter.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exporter.log.1", "launch.json", "vllm.log.1", "vllm.log.2"]
    assert (tmp_path / "vllm.log.1").read_text() == "run 3\n" and (tmp_path / "vllm.log.2").read_text() == "run 2\n"
    assert (tmp_path / "exporter.log.1").read_text() == "exporter 2\n"
    # as many as supervisord's own rotation keeps for each program
    assert LOG_BACKUPS["vllm"] == 2 and LOG_BACKUPS["exporter"] == 1


def test_a_first_run_moves_nothing_and_writes_nothing(tmp_path: Path) -> None:
    assert start_fresh_logs(RunFiles.at(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_a_gap_in_the_backups_is_no_error(tmp_path: Path) -> None:
    write(tmp_path, vllm_log="run 3\n", vllm_log_2="run 1\n")  # .1 removed by hand
    start_fresh_logs(RunFiles.at(tmp_path))
    assert (tmp_path / "vllm.log.1").read_text() == "run 3\n" and (tmp_path / "vllm.log.2").read_text() == "run 1\n"


def test_a_log_that_cannot_move_names_the_field_and_the_path(tmp_path: Path) -> None:
    write(tmp_path, vllm_log="run 2\n", vllm_log_1="run 1\n")
    (tmp_path / "vllm.log.2").mkdir()
    (tmp_path / "vllm.log.2" / "x").write_text("")  # a non-empty folder where the oldest goes: rename refuses
    with pytest.raises(ApplianceError) as err:
        start_fresh_logs(RunFiles.at(tmp_path), "APPLIANCE_LOG_DIR")
    assert err.value.field == "APPLIANCE_LOG_DIR" and err.value.value == str(tmp_path / "vllm.log")
    assert "cannot move the last run's log" in str(err.value) and "fix:" in str(err.value)


def test_appliance_run_refuses_before_writing_its_config(vllm_engine: Path, tmp_path: Path) -> None:
    """Through the CLI: exit 2 with the message, no traceback, and neither launch.json nor supervisord.conf written
    (the logs move before them)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    (model / "model.safetensors").write_bytes(safetensors_bytes(16))
    run = tmp_path / "run"
    run.mkdir()
    write(run, vllm_log="run 2\n", vllm_log_1="run 1\n")
    (run / "vllm.log.2").mkdir()
    (run / "vllm.log.2" / "x").write_text("")
    serve = start_serve(run, model)
    try:
        code = serve.proc.wait(120)
    finally:
        serve.stop()
    out = serve.output.read_text()
    assert code == 2, out[-3000:]
    assert "--run-dir: cannot move the last run's log" in out and "Traceback" not in out, out[-3000:]
    assert not (run / "supervisord.conf").exists() and not (run / "launch.json").exists()
