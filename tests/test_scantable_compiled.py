"""health/compiled.py: the compiled scan part of the log-check table is the validated table's
scan part, is compiled again when the table changes, and never stands in for a table that fails validation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.health.compiled import load_scan_table
from appliance.health.table import load_table

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "healthchecks" / "logchecks.yaml"
SERVE_LOG = ROOT / "tests" / "fixtures" / "logs" / "cpu-smoke-serve.log"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def compiled(home: Path) -> list[Path]:
    return sorted((home / "scantable").glob("*.marshal"))


def test_the_compiled_table_is_the_validated_tables_scan_part(home: Path) -> None:
    first = load_scan_table()
    assert first == load_table(TABLE).scan_table
    assert len(compiled(home)) == 1
    assert load_scan_table() == first  # read back from the compiled copy


def test_an_edited_table_is_compiled_again(home: Path, tmp_path: Path) -> None:
    table = tmp_path / "logchecks.yaml"
    table.write_text(TABLE.read_text())
    before = load_scan_table(table)
    edited = TABLE.read_text() + "\n# an edit: a comment\n"
    table.write_text(edited)
    after = load_scan_table(table)
    assert len(compiled(home)) == 2
    assert after == load_table.__wrapped__(table).scan_table
    assert before == after  # a comment: the same scan part, from a compiled copy of its own


def test_a_table_that_fails_validation_raises_and_compiles_nothing(home: Path, tmp_path: Path) -> None:
    table = tmp_path / "logchecks.yaml"
    table.write_text(TABLE.read_text() + "\nnot_a_key: 1\n")
    with pytest.raises(ApplianceError):
        load_scan_table(table)
    assert compiled(home) == []


def test_a_damaged_compiled_copy_is_compiled_again(home: Path) -> None:
    load_scan_table()
    (entry,) = compiled(home)
    entry.write_bytes(b"\x00not marshal")
    assert load_scan_table() == load_table(TABLE).scan_table
    assert entry.read_bytes() != b"\x00not marshal"


def test_a_scan_from_the_compiled_table_imports_no_pydantic_and_tells_what_the_validated_one_tells(
        home: Path) -> None:
    """Two processes on a real serve log: the second reads the compiled table; both report the same facts, and
    the second never imports pydantic."""
    log = SERVE_LOG
    code = ("import sys; from pathlib import Path; from appliance.health.scan import scan_file; "
            "f = scan_file(Path(sys.argv[1])); print(sorted(f.values.items()), f.lines_read, f.runs); "
            "print('pydantic' in sys.modules)")
    env = {**os.environ, "APPLIANCE_HOME": str(home)}
    runs = [subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=120, check=True).stdout.splitlines() for _ in range(2)]
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == "True" and runs[1][1] == "False"


def test_the_table_is_validated_from_its_file_now_not_from_an_earlier_cached_read(home: Path, tmp_path: Path) -> None:
    table = tmp_path / "logchecks.yaml"
    table.write_text(TABLE.read_text())
    load_table(table)  # a process that read the table once keeps it (functools.cache)
    table.write_text(TABLE.read_text() + "\nnot_a_key: 1\n")
    with pytest.raises(ApplianceError):
        load_scan_table(table)
    assert compiled(home) == []
