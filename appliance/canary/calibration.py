"""Per-model expectations recorded on a known-good serve.

A calibration holds, for one served model, which known-answer prompts it answered right and the
greedy text of each deterministic probe. A later round then also requires those answers and that
each greedy reply still agrees with the recorded one. Recorded, never hand-written: a file from
`appliance canary --record-calibration FILE`, or the same object under `canary_calibration` in a
gate receipt (its `canary` check records it on a healthy round).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.errors import ApplianceError
from appliance.paths import write_json_atomic

RECEIPT_KEY = "canary_calibration"


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(1, alias="schema")
    model: str
    """The served model name the calibration was recorded against."""
    recorded_at: str
    serve_url: str | None = None
    known_answers_right: list[str]
    """Ids of the known-answer prompts (healthchecks/canary.yaml) the model answered right."""
    greedy: dict[str, str]
    """Probe id -> the greedy reply on the known-good serve."""

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def new_calibration(model: str, url: str, right: list[str], greedy: dict[str, str]) -> Calibration:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Calibration(model=model, recorded_at=now, serve_url=url, known_answers_right=right, greedy=greedy)


def load_calibration(path: Path) -> Calibration:
    """A calibration file, or a gate receipt carrying one under `canary_calibration`."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ApplianceError(f"calibration file {path} does not exist", field="--calibration", value=str(path),
                             fix="record one with `appliance canary --url URL --record-calibration FILE` on a "
                                 "known-good serve") from None
    except (OSError, ValueError) as exc:
        raise ApplianceError(f"calibration file {path} is not readable JSON: {exc}", field="--calibration",
                             value=str(path), fix="re-record it with --record-calibration") from None
    if isinstance(data, dict) and RECEIPT_KEY in data:
        data = data[RECEIPT_KEY]
    try:
        return Calibration.model_validate(data)
    except ValidationError as exc:
        raise ApplianceError(f"calibration file {path}: {exc.errors()[0]['msg']} at "
                             f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}", field="--calibration",
                             value=str(path), fix="re-record it with --record-calibration") from None


def save_calibration(calibration: Calibration, path: Path) -> str:
    """Write the calibration file PATH (a gate receipt gets one through appliance/gate/canary.py)."""
    write_json_atomic(path, calibration.to_json())
    return "calibration file"
