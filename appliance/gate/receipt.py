"""The receipt: one JSON document per gate run, rewritten after every check so that an interrupted gate
still leaves what it measured (`complete: false`), plus a Markdown summary for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from appliance.errors import ApplianceError
from appliance.gate.receipt_model import AnyCheck, BatteryOutcome, Check, Engagement, Receipt, validate_receipt
from appliance.gate.result import OK_STATUSES, CheckResult
from appliance.jsonstrict import JsonObject
from appliance.redact import redact_tree

SCHEMA = "appliance-gate-receipt/1"
MAX_RECEIPT_BYTES = 256 << 20
"""Receipts keep every reply of every check; far beyond this is no receipt."""
REQUIRED = ("schema", "complete", "verdict", "started_at", "provenance", "engagement", "checks")
_CHECK: TypeAdapter[Check] = TypeAdapter(AnyCheck)


def as_written(data: Any) -> Any:
    """`data` as the receipt file holds it: strict JSON (NaN or infinity, a statistic of nothing, is null; a tuple a
    list; anything else its str) with no secret in it (a receipt is shared)."""
    return redact_tree(json.loads(json.dumps(data, default=str), parse_constant=lambda _: None))


def build(data: JsonObject) -> Receipt:
    """The typed receipt of the gate's first write (gate/prepare.py), validated as it will read back."""
    return validate_receipt(as_written(data), "the receipt being written")


def check_line(result: CheckResult) -> Check:
    """One check's line of the receipt. A line the receipt's schema refuses (a metric out of its bounds) would make
    the receipt unreadable: it is written as an error naming why, its summary kept."""
    written = as_written(result.to_json())
    try:
        return _CHECK.validate_python(written)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        return _CHECK.validate_python({**written, "status": "error", "params": None, "metrics": None,
                                       "summary": f"its result does not fit the receipt ({where}: {problem['msg']}):"
                                                  f" {written['summary']}"})


def with_check(receipt: Receipt, result: CheckResult) -> Receipt:
    """The receipt with one more check line and what that check attaches at the top level (the canary's
    calibration)."""
    return receipt.model_copy(update={"checks": [*receipt.checks, check_line(result)], **as_written(result.attach)})


def verdict(checks: Sequence[Check], complete: bool, engagement: Engagement | None = None) -> str:
    """pass = every check passed (or does not apply), at least one measured something, AND the serve log's own
    expectations did not fail; inconclusive = nothing failed but a check could not decide (recall between its
    bands: run more serves); nothing_measured = no check applied (`--checks reasoning` on a profile without a
    reasoning parser), which must not read as a pass."""
    if not complete:
        return "incomplete"
    log_failed = bool(engagement and (engagement.verdict == "fail" or engagement.fatal))
    if log_failed or any(c.status not in (*OK_STATUSES, "inconclusive") for c in checks):
        return "fail"
    if all(c.status == "not_applicable" for c in checks):
        return "nothing_measured"
    return "inconclusive" if any(c.status == "inconclusive" for c in checks) else "pass"



def finalize(receipt: Receipt, *, complete: bool, finished_at: str, duration_s: float) -> Receipt:
    update: dict[str, object] = {"complete": complete, "finished_at": finished_at,
                                 "duration_s": round(duration_s, 1),
                                 "verdict": verdict(receipt.checks, complete, receipt.engagement)}
    if receipt.battery:
        from appliance.gate.battery.definition import BATTERIES
        from appliance.gate.battery.verdict import judge, receipt_verdict

        battery = BATTERIES[receipt.battery.name]
        result = BatteryOutcome.model_validate(judge(receipt.checks, battery).to_json())
        update["battery"] = receipt.battery.model_copy(update={"result": result})
        update["verdict"] = receipt_verdict(receipt.checks, battery) if complete else "incomplete"
    return receipt.model_copy(update=update)


def write(receipt: Receipt, out_dir: Path) -> Path:
    """receipt.json and summary.md, together (the one writer: a reader never sees half a file, and the summary
    always describes the receipt beside it)."""
    from appliance.gate.summary import render
    from appliance.paths import make_dir
    from appliance.safe_write import write_files

    make_dir(out_dir, "--out")
    path = out_dir / "receipt.json"
    # The fields the gate set, in its order, and what a check attached (exclude_unset: no default it never wrote).
    written = redact_tree(receipt.model_dump(mode="json", by_alias=True, exclude_unset=True))
    write_files({path: json.dumps(written, indent=2) + "\n", out_dir / "summary.md": render(receipt)},
                field="--out")
    return path


def load(path: Path) -> Receipt:
    """A receipt from disk, typed, or ApplianceError saying why it is not one."""
    from appliance.jsonstrict import JsonError, loads
    from appliance.paths import read_capped

    raw = read_capped(path, "receipt", MAX_RECEIPT_BYTES, "receipt")
    try:  # strict: duplicate keys, NaN, 400-digit numbers, deep nesting and lone surrogates are no receipt
        data = loads(raw, str(path))
    except JsonError as exc:
        raise ApplianceError(f"{path} is not JSON this reader takes: {exc.problem}", field="receipt", value=str(path),
                             fix="give the receipt.json written by `appliance gate`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ApplianceError(f"{path} is not a gate receipt (schema {SCHEMA!r} expected)", value=str(path),
                             fix="give the receipt.json written by `appliance gate`")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ApplianceError(f"{path}: malformed receipt, missing {', '.join(missing)}", value=str(path))
    return validate_receipt(redact_tree(data), str(path))  # a receipt from elsewhere may carry a secret
