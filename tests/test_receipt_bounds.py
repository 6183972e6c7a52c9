"""Issue 22 item 6: receipts that pass a lax reading but break the reader are exit 2 naming why (or read as they
mean), for `gate compare`, `gate serves` and `gate paired`: a null pass line, a count of 10^400, 900-deep extra
keys, a lone surrogate, a rate of 5e-324, duplicate keys, a guard that is no N/M, a folder as the receipt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.cli import main
from tests.test_gate_compare import receipt

COMMANDS = {"compare": lambda a, b: ["gate", "compare", a, b], "serves": lambda a, b: ["gate", "serves", a, b],
            "paired": lambda a, b: ["gate", "paired", f"{a}:{b}", f"{b}:{a}"]}


def _run(tmp_path: Path, command: str, a: str, b: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(a)
    pb.write_text(b if isinstance(b, str) else json.dumps(b))
    code = main(COMMANDS[command](str(pa), str(pb)))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.err


def _edit(change: Any) -> str:
    r = receipt()
    change(r)
    return json.dumps(r)


def _deep(r: dict[str, Any]) -> None:
    node = r["provenance"]
    for _ in range(900):
        node["x"] = {}
        node = node["x"]


BROKEN = {
    "a count of 10^400": _edit(lambda r: r["checks"][1]["metrics"].update(found=10**400, total=10**400)),
    "900-deep extra keys": _edit(_deep),
    "a lone surrogate": json.dumps(receipt()).replace('"gb10-tp2"', '"gb10\\ud800"'),
    "a rate of 5e-324": _edit(lambda r: r["checks"][0]["metrics"]["rows"][0].update(t_s=5e-324, values=[5e-324] * 3)),
    "a rate of 1e308": _edit(lambda r: r["checks"][0]["metrics"]["rows"][1].update(t_s=1e308)),
    "duplicate keys": json.dumps(receipt()).replace('"complete": true', '"complete": true, "complete": false'),
    "a guard that is no N/M": _edit(lambda r: r["engagement"].update(guard="a/b/c")),
    "a 400-digit number in an unknown key": _edit(lambda r: r.update(extra=10**400)),
    "NaN": json.dumps(receipt()).replace('"t_s": 40.0', '"t_s": NaN', 1),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("what", sorted(BROKEN))
def test_a_receipt_that_would_break_the_reader_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        command: str, what: str) -> None:
    code, err = _run(tmp_path, command, BROKEN[what], receipt(), capsys)
    assert code == 2 and "a.json" in err, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_null_pass_line_reads_as_the_default(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               command: str) -> None:
    text = _edit(lambda r: r["checks"][1]["params"].update(min_found=None))
    code, err = _run(tmp_path, command, text, text, capsys)
    assert code in (0, 1, 3), err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_as_the_receipt_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    folder = tmp_path / "r.json"
    folder.mkdir()
    (tmp_path / "b.json").write_text(json.dumps(receipt()))
    assert main(COMMANDS[command](str(folder), str(tmp_path / "b.json"))) == 2
    assert "is a folder, not a regular file" in capsys.readouterr().err


def test_logscan_refuses_a_folder_as_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("x\n")
    assert main(["logscan", str(log), "--profile", "cpu-smoke", "--table", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
