"""The monitoring bundle's Prometheus files, checked by Prometheus' own tool: the configuration and the alert rules
load, every alert fires and stays quiet where its `promtool test rules` cases say, and those cases bite (an alert
rewritten to always fire, or never, fails them). promtool comes from Debian's `prometheus` package, which
scripts/test.sh installs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = ROOT / "monitoring" / "prometheus"
RULES = PROMETHEUS / "rules" / "appliance.rules.yml"
RULE_TESTS = PROMETHEUS / "tests" / "appliance.rules.test.yml"


def promtool(tool: str, *args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    """`tool`: the promtool_exe fixture (tests/conftest.py), which derives the `tools` marker."""
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_bundle_configuration_with_its_rule_files(promtool_exe: str) -> None:
    done = promtool(promtool_exe, "check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout + done.stderr
    rules = promtool(promtool_exe, "check", "rules", str(RULES))
    assert rules.returncode == 0 and f"{len(alerts())} rules found" in rules.stdout, rules.stdout + rules.stderr


def test_every_alert_fires_and_stays_quiet_as_its_promtool_cases_say(promtool_exe: str) -> None:
    done = promtool(promtool_exe, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    evals = [e for case in cases for e in case["alert_rule_test"]]
    names = [a["alert"] for a in alerts()]
    assert names and evals, "no alert or no rule test found"
    for alert in names:
        mine = [e for e in evals if e["alertname"] == alert]
        assert any(e["exp_alerts"] for e in mine), f"{alert}: no case where it fires"
        # Quiet: an evaluation expecting nothing, or a near-miss node (b, c) in the inputs that never fires.
        fired = {a["exp_labels"]["instance"] for e in mine for a in e["exp_alerts"]}
        quiet = any(not e["exp_alerts"] for e in mine) or any(
            re.search(r'instance="([^"]+)"', s["series"])[1] not in fired  # type: ignore[index]
            for case in cases if any(e["alertname"] == alert for e in case["alert_rule_test"])
            for s in case["input_series"])
        assert quiet, f"{alert}: no case where it stays quiet"


@pytest.mark.parametrize(("mutant", "expr"), [("always fires", "vector(1)"), ("never fires", "vector(1) < 0")])
def test_the_cases_fail_every_alert_rewritten_to_fire_always_or_never(tmp_path: Path, mutant: str, expr: str,
                                                                      promtool_exe: str) -> None:
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule["expr"] = expr
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(yaml.safe_dump(doc))
    shutil.copy(RULE_TESTS, tmp_path / "tests" / RULE_TESTS.name)
    done = promtool(promtool_exe, "test", "rules", str(tmp_path / "tests" / RULE_TESTS.name), cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    failed = set(re.findall(r"alertname: (\w+),", done.stdout + done.stderr))
    assert failed == {a["alert"] for a in alerts()}, f"{mutant}: cases that did not notice: " \
        f"{sorted({a['alert'] for a in alerts()} - failed)}"


def test_every_alert_names_its_severity_and_the_rule_behind_it() -> None:
    assert alerts(), "no alert found"
    for alert in alerts():
        labels = alert.get("labels", {})
        assert labels.get("severity") in ("warning", "critical"), alert["alert"]
        # The rule comes from the alert's labels, or from the series it aggregates by (expectations, fatal lines).
        by_rule = re.search(r"by \([^)]*\brule\b", alert["expr"])
        assert "rule" in labels or by_rule or alert["alert"].endswith("Down"), alert["alert"]
        assert {"summary", "description"} <= set(alert["annotations"]), alert["alert"]
