"""The receipt: one JSON document per gate run, rewritten after every check so that an interrupted gate
still leaves what it measured (`complete: false`), plus a Markdown summary for people."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ApplianceError
from appliance.gate.result import OK_STATUSES
from appliance.redact import redact_tree

if TYPE_CHECKING:
    from appliance.gate.receipt_model import Receipt

SCHEMA = "appliance-gate-receipt/1"
MAX_RECEIPT_BYTES = 256 << 20
"""Receipts keep every reply of every check; far beyond this is no receipt."""
REQUIRED = ("schema", "complete", "verdict", "started_at", "provenance", "engagement", "checks")


def verdict(checks: list[dict[str, Any]], complete: bool, engagement: dict[str, Any] | None = None) -> str:
    """pass = every check passed (or does not apply) AND the serve log's own expectations did not fail;
    inconclusive = nothing failed but a check could not decide (recall between its bands: run more serves)."""
    if not complete:
        return "incomplete"
    log_failed = bool(engagement and (engagement.get("verdict") == "fail" or engagement.get("fatal")))
    if log_failed or any(c["status"] not in (*OK_STATUSES, "inconclusive") for c in checks):
        return "fail"
    return "inconclusive" if any(c["status"] == "inconclusive" for c in checks) else "pass"


def finalize(receipt: dict[str, Any], *, complete: bool, finished_at: str, duration_s: float) -> dict[str, Any]:
    receipt.update(complete=complete, finished_at=finished_at, duration_s=round(duration_s, 1),
                   verdict=verdict(receipt["checks"], complete, receipt.get("engagement")))
    if receipt.get("battery"):
        from appliance.gate.battery.definition import BATTERIES
        from appliance.gate.battery.verdict import judge, receipt_verdict

        battery = BATTERIES[receipt["battery"]["name"]]
        receipt["battery"]["result"] = judge(receipt["checks"], battery).to_json()
        receipt["verdict"] = receipt_verdict(receipt["checks"], battery) if complete else "incomplete"
    return receipt


def write(receipt: dict[str, Any], out_dir: Path) -> Path:
    """receipt.json and summary.md, together (the one writer: a reader never sees half a file, and the summary
    always describes the receipt beside it)."""
    from appliance.gate.summary import render
    from appliance.paths import make_dir
    from appliance.safe_write import write_files

    make_dir(out_dir, "--out")
    path = out_dir / "receipt.json"
    # A receipt is shared: no secrets in it. NaN or infinity (a statistic of nothing) is written as null: a receipt
    # is strict JSON, which `gate compare` reads back (appliance/jsonstrict.py).
    receipt = redact_tree(json.loads(json.dumps(receipt, default=str), parse_constant=lambda _: None))
    write_files({path: json.dumps(receipt, indent=2) + "\n", out_dir / "summary.md": render(receipt)}, field="--out")
    return path


def load(path: Path) -> Receipt:
    """A receipt from disk, typed, or ApplianceError saying why it is not one."""
    from appliance.gate.receipt_model import validate_receipt
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
