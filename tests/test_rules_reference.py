"""`appliance rules`: every rule id the project cites, built from the registries; docs/rules.md kept current."""

from __future__ import annotations

import json
import re
from pathlib import Path

from appliance.cli import main
from appliance.rulebook import build, render_markdown
from appliance.rules import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


def cited_ids() -> set[str]:
    """Every K id written in the code, the log table, the lock and the docs a user reads."""
    texts = [p.read_text() for p in (ROOT / "appliance").rglob("*.py")]
    texts += [(ROOT / "healthchecks" / "logchecks.yaml").read_text(), (ROOT / "versions.json").read_text(),
              (ROOT / "README.md").read_text(), *(p.read_text() for p in (ROOT / "docs").glob("*.md"))]
    return {m for t in texts for m in re.findall(r"\bK\d{1,2}\b", t)}


def test_every_cited_rule_id_can_be_looked_up():
    known = {e.id for e in build()}
    assert cited_ids() <= known, sorted(cited_ids() - known)


def test_every_entry_has_a_title_reason_fix_and_a_place_it_is_enforced():
    assert len(build()) > 20, "the rulebook is (nearly) empty"
    for e in build():
        assert e.title and e.reason and e.fix and e.enforced, e.id


def test_enforcement_comes_from_the_registries():
    by_id = {e.id: {x.where for x in e.enforced} for e in build()}
    assert all("validate" in by_id[i] for i in REGISTRY)
    assert {"lock", "log"} <= by_id["K15"]          # versions.json pin + NCCL log facts
    assert {"validate", "log", "gate"} <= by_id["K4"]  # rule, guard expectation, recall check
    assert "gate" in by_id["K19"] and "log" in by_id["K17"]


def test_cli_lists_one_rule_as_json_and_refuses_an_unknown_one(capsys):
    assert main(["rules", "K15", "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["id"] == "K15" and "NCCL" in entry["title"]
    assert main(["rules", "K99"]) == 2
    assert "no rule 'K99'" in capsys.readouterr().err


def test_docs_rules_md_is_rendered_from_the_registries_and_not_stale():
    shipped = (ROOT / "docs" / "rules.md").read_text()
    assert shipped == render_markdown(build()), "docs/rules.md is stale: appliance rules --markdown > docs/rules.md"
