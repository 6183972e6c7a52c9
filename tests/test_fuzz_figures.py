"""The fuzz report's merge (tests/fuzz_figures.py): a module whose tests ran on two xdist workers is the sum of both
parts, a worker's later report replaces its own earlier one, and a later run replaces an earlier run's parts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fuzz_figures import Figures, merge


def _figures(area: str, inputs: int, tracebacks: int, slowest_s: float) -> dict:
    figures = Figures()
    for _ in range(inputs):
        figures.count(area)
        figures.exited(area, 2)
    figures._area(area).tracebacks = tracebacks
    figures.took(slowest_s, f"{area} slowest")
    return figures.to_json()


def test_the_workers_parts_of_a_module_add_up_and_a_later_run_replaces_them(tmp_path: Path) -> None:
    report = tmp_path / "fuzz.json"
    fuzz, kills = "tests/test_fuzz.py", "tests/test_fuzz_transactions.py"
    merge(report, fuzz, _figures("bundle:apply", 80, 1, 0.5), "run1/gw0")
    merge(report, fuzz, _figures("render", 71, 0, 1.5), "run1/gw1")
    merge(report, fuzz, _figures("bundle:verify", 20, 0, 0.1), "run1/gw1")  # gw1's report at its module's end
    merge(report, kills, _figures("kill:promote", 31, 0, 3.0), "run1/gw0")
    known = json.loads(report.read_text())
    module = known[fuzz]
    assert (module["inputs"], module["tracebacks"]) == (100, 1)
    assert sorted(module["per_area"]) == ["bundle:apply", "bundle:verify"]
    assert module["per_class"]["archives"]["inputs"] == 100
    assert module["exits"] == {"bundle:apply:2": 80, "bundle:verify:2": 20}
    assert (module["slowest_s"], module["slowest"]) == (0.5, "bundle:apply slowest")
    assert known[kills]["inputs"] == 31

    merge(report, fuzz, _figures("render", 7, 0, 0.2), "run2/gw0")  # the next run
    known = json.loads(report.read_text())
    assert (known[fuzz]["inputs"], sorted(known[fuzz]["per_area"])) == (7, ["render"])
    assert list(known["parts"][fuzz]) == ["run2/gw0"] and known[kills]["inputs"] == 31
