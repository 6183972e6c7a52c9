"""Per-model expectations recorded on a known-good serve.

A calibration holds, for one served model, which known-answer prompts it answered right and the
greedy text of each deterministic probe. A later round then also requires those answers and that
each greedy reply still agrees with the recorded one. Recorded, never hand-written: a file from
`appliance canary --record-calibration FILE`, or the same object under `canary_calibration` in a
gate receipt (its `canary` check records it on a healthy round).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.safe_write import write_json

RECEIPT_KEY = "canary_calibration"
MAX_PROBES = 256
"""A calibration holds a few dozen probes (healthchecks/canary.yaml)."""
MAX_REPLY_CHARS = 1 << 20
"""A greedy reply is a few hundred tokens."""
MAX_CALIBRATION_BYTES = 256 << 20
"""A calibration is a few KiB; a gate receipt carrying one is capped like any receipt (gate/receipt.py)."""


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(1, alias="schema")
    model: Annotated[str, Field(max_length=1024)]
    """The served model name the calibration was recorded against."""
    recorded_at: Annotated[str, Field(max_length=64)]
    serve_url: Annotated[str, Field(max_length=8192)] | None = None
    known_answers_right: list[Annotated[str, Field(max_length=256)]] = Field(max_length=MAX_PROBES)
    """Ids of the known-answer prompts (healthchecks/canary.yaml) the model answered right."""
    greedy: dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=MAX_REPLY_CHARS)]] = Field(
        max_length=MAX_PROBES)
    """Probe id -> the greedy reply on the known-good serve."""

    def to_json(self) -> JsonObject:
        return self.model_dump(by_alias=True)


def new_calibration(model: str, url: str, right: list[str], greedy: dict[str, str]) -> Calibration:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Calibration(model=model, recorded_at=now, serve_url=url, known_answers_right=right, greedy=greedy)


def load_calibration(path: Path) -> Calibration:
    """A calibration file, or a gate receipt carrying one under `canary_calibration`."""
    from appliance.jsonstrict import load_file

    if not path.exists() and not path.is_symlink():
        raise ApplianceError(f"calibration file {path} does not exist", field="--calibration", value=str(path),
                             fix="record one with `appliance canary --url URL --record-calibration FILE` on a "
                                 "known-good serve")
    # A FIFO or /dev/zero is refused unread; a receipt carrying a calibration may be big, never unbounded.
    data = load_file(path, "--calibration", MAX_CALIBRATION_BYTES, "calibration file")
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
    from appliance.redact import redact_tree

    # Replies are text from outside: a serve that echoes a header would put `Bearer ...` on disk. Masked here, and
    # a round masks its replies the same way before comparing them with these (checks.py).
    write_json(path, redact_tree(calibration.to_json()), field="--record-calibration")
    return "calibration file"
