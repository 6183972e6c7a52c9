"""Calibration files: recorded, carried by a gate receipt, and refused with a clear error when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.canary.calibration import RECEIPT_KEY, load_calibration, new_calibration, save_calibration
from appliance.canary.golden import load_golden
from appliance.errors import ApplianceError
from appliance.gate.canary import record_calibration
from appliance.gate.receipt import SCHEMA


def test_a_calibration_file_round_trips(tmp_path: Path) -> None:
    cal = new_calibration("smollm2", "http://127.0.0.1:8000", ["capital-france"], {"long:chat": "The sun"})
    assert save_calibration(cal, tmp_path / "c.json") == "calibration file"
    assert record_calibration(cal, tmp_path / "d.json") == "calibration file"  # not a receipt: a file of its own
    assert load_calibration(tmp_path / "c.json") == cal


def test_a_gate_receipt_carries_the_calibration_and_keeps_its_own_keys(tmp_path: Path) -> None:
    receipt = tmp_path / "receipt.json"
    receipt.write_text(json.dumps({"schema": SCHEMA, "complete": True, "verdict": "pass", "checks": []}))
    cal = new_calibration("smollm2", "http://127.0.0.1:8000", [], {"ka:x": "Paris"})
    assert record_calibration(cal, receipt) == "gate receipt (canary_calibration)"
    data = json.loads(receipt.read_text())
    assert data["verdict"] == "pass" and data[RECEIPT_KEY]["model"] == "smollm2"
    assert load_calibration(receipt) == cal


@pytest.mark.parametrize(("content", "message"), [(None, "does not exist"), ("{", "not readable JSON"),
                                                  ('{"model": 1}', "calibration file")])
def test_a_missing_or_malformed_calibration_is_bad_input(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "c.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ApplianceError, match=message) as err:
        load_calibration(path)
    assert err.value.field == "--calibration" and err.value.fix


def test_the_golden_table_loads_and_draws_word_codes() -> None:
    import random

    golden = load_golden()
    code = golden.code(random.Random(1))
    first, second, number = code.split("-")
    assert first in golden.code_words and second in golden.code_words and 10 <= int(number) <= 99
    assert len({ka.id for ka in golden.known_answers}) == len(golden.known_answers)


def test_a_reasoning_profile_asks_its_chat_probes_to_answer_without_thinking() -> None:
    from appliance.canary.client import greedy_body
    from appliance.canary.session import plan_for
    from appliance.profile.loader import load_profile

    deepseek = load_profile("rtx-pro-6000-tp2").profile
    plan = plan_for(deepseek.canary, deepseek.server.reasoning_parser)
    assert deepseek.server.reasoning_parser and plan.reasoning_effort == "none"
    chat = greedy_body("m", "chat", "Repeat the code.", 24, False, plan.reasoning_effort)
    assert chat["reasoning_effort"] == "none" and chat["temperature"] == 0
    assert "reasoning_effort" not in greedy_body("m", "completions", "Repeat", 24, False, plan.reasoning_effort)
    smoke = load_profile("cpu-smoke-canary").profile
    small = plan_for(smoke.canary, smoke.server.reasoning_parser)
    assert small.reasoning_effort is None and "reasoning_effort" not in greedy_body("m", "chat", "x", 8, False)
    assert small.long_decode_tokens == smoke.canary.long_decode_tokens
