"""What the exporter says in the container's output: each state change with its reasons and their rule ids, the
start's progress every so often and at each phase, `ready after ...` once; text or JSON lines. The exporter is
built as `appliance exporter` builds it and reads the real CPU start from the fixtures, with the test's clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.health.events import EventLog, rule_of
from appliance.health.exporter import ExporterConfig, build_exporter
from appliance.profile.loader import load_profile
from appliance.render.plan import build_plan
from appliance.render.supervisord import RunFiles, render_conf

LOGS = Path(__file__).parent / "fixtures" / "logs"
SERVE = (LOGS / "cpu-smoke-serve.log").read_text().splitlines(keepends=True)
FATAL = "(Worker_TP1 pid=914) ERROR 08-09 11:20:03 [multiproc_executor.py:959] torch.AcceleratorError: CUDA " \
        "error: an illegal memory access was encountered\n"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def replay(tmp_path: Path, fmt: str, step_s: float = 4.0, extra: str = "") -> list[str]:
    """The fixture's start fed to the log a line per poll, `step_s` apart; the exporter's lines."""
    log, clock, said = tmp_path / "vllm.log", Clock(), []
    log.write_text("")
    exporter = build_exporter(ExporterConfig(load_profile("cpu-smoke"), log, "single"), clock=clock,
                              report=EventLog(said.append, fmt, every=30.0, wall=clock))  # type: ignore[arg-type]
    try:
        end = next(i for i, line in enumerate(SERVE) if "Application startup complete" in line) + 1
        for line in [*SERVE[:end], *([extra] if extra else [])]:
            with log.open("a") as out:
                out.write(line)
            clock.now += step_s
            exporter.monitor.poll()
        for _ in range(20):  # a quiet minute after the end: ready (or failed) says nothing more
            clock.now += step_s
            exporter.monitor.poll()
    finally:
        exporter.close()
    return said


def test_a_start_says_each_state_its_progress_every_30_s_and_ready_after_once(tmp_path: Path) -> None:
    said = replay(tmp_path, "text")
    assert all(line.startswith("appliance: ") for line in said)
    states = [line for line in said if line.startswith("appliance: state ")]
    assert states == ["appliance: state loading: the log has not said ready yet", "appliance: state loading -> ready"]
    progress = [line for line in said if line.startswith("appliance: loading ")]
    phases = [line.split("(", 1)[1].split(",", 1)[0] for line in progress]
    assert {"engine", "weights", "warmup"} <= set(phases), progress
    # The weights' count is worth a line when it first shows (vLLM's bar starts at 0 of the shards).
    assert any("(weights, phase 3/8" in line and "0/1 shards (0%)" in line for line in progress), progress
    ready = [line for line in said if line.startswith("appliance: ready after ")]
    assert len(ready) == 1 and "(engine " in ready[0], said
    assert said.index(ready[0]) > said.index(states[-1]) or said.index(ready[0]) == len(said) - 1


def test_progress_is_repeated_while_a_phase_lasts_and_not_once_ready(tmp_path: Path) -> None:
    said = replay(tmp_path, "text", step_s=12.0)
    progress = [line for line in said if line.startswith("appliance: loading ")]
    assert len(progress) > len({line.split("(", 1)[1].split(",", 1)[0] for line in progress})  # some phase repeated
    after = said[said.index(next(line for line in said if line.startswith("appliance: ready after "))):]
    assert not any(line.startswith("appliance: loading ") for line in after)


def test_json_lines_carry_each_reason_with_its_rule_id(tmp_path: Path) -> None:
    said = [json.loads(line) for line in replay(tmp_path, "json", extra=FATAL)]
    assert all(e["source"] == "appliance-exporter" and isinstance(e["ts"], float) for e in said)
    failed = next(e for e in said if e["event"] == "state" and e["state"] == "failed")
    assert failed["from"] == "ready"
    assert failed["reasons"][0]["rule"] == "K17" and "illegal-memory-access" in failed["reasons"][0]["text"]
    startup = [e for e in said if e["event"] == "startup"]
    assert startup[0]["phase"] == "engine" and startup[-1]["phase"] == "ready"
    weights = [e for e in startup if e["phase"] == "weights"]
    assert weights[0]["done"] is None  # `Starting to load model`, then the first shard line is worth a line of its own
    assert (weights[-1]["done"], weights[-1]["total"], weights[-1]["unit"]) == (0, 1, "shards")


def test_a_reason_whose_figures_change_is_not_a_new_reason() -> None:
    from appliance.health.events import _key

    assert _key(["K18 no engine progress for 61 s while 1 request(s) run (window 60 s)"]) == \
        _key(["K18 no engine progress for 95 s while 2 request(s) run (window 60 s)"])
    assert _key(["K18 no engine progress for 61 s"]) != _key(["K4 guard-every-manager: 2/5"])


@pytest.mark.parametrize(("reason", "rule"), [
    ("K17 fatal illegal-memory-access at line 9: a kernel read ...", "K17"),
    ("K24 engine stopped by the memory watchdog", "K24"),
    ("canary: corruption confirmed (repetition-loop) after 2 failing rounds", "canary"),
    ("the log has not said ready yet", None), ("engine: /health answered 503", None),
])
def test_the_rule_id_is_the_reasons_first_word(reason: str, rule: str | None) -> None:
    assert rule_of(reason) == rule


def test_the_container_output_tails_the_exporters_lines_beside_the_engines(tmp_path: Path) -> None:
    loaded = load_profile("cpu-smoke")
    files = RunFiles(tmp_path, tmp_path / "supervisor.sock")
    conf = render_conf(build_plan(loaded.profile), files, {}, ["appliance", "exporter"])
    tail = next(line for line in conf.splitlines() if line.startswith("command=tail"))
    assert tail == f"command=tail -q -n +1 -F {files.engine_log} {files.exporter_log}"
    assert f"stdout_logfile={files.exporter_log}" in conf
