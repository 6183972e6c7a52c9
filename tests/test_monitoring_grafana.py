"""The bundle's Grafana files against Grafana's documented formats (JSON Schemas written from its provisioning and
dashboard JSON model pages, tests/fixtures/grafana/; Grafana itself cannot be installed here, docs/monitoring.md says
what that leaves unchecked), and the dashboard's own consistency: every variable a query uses is defined, panels
sit on the 24-column grid without overlapping, the datasource is the provisioned one."""

from __future__ import annotations

import json
import re
from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "monitoring" / "grafana"
SCHEMAS = Path(__file__).parent / "fixtures" / "grafana"
DASHBOARD = json.loads((GRAFANA / "dashboards" / "appliance.json").read_text())
DATASOURCES = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "appliance.yml").read_text())
PROVIDERS = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "appliance.yml").read_text())


def schema(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / f"{name}.schema.json").read_text()))


@pytest.mark.parametrize(("doc", "name"), [(DATASOURCES, "provisioning-datasources"),
                                           (PROVIDERS, "provisioning-dashboards"), (DASHBOARD, "dashboard")])
def test_the_files_follow_grafanas_documented_formats(doc: Any, name: str) -> None:
    schema(name).validate(doc)


@pytest.mark.parametrize(("name", "doc", "mutate", "complaint"), [
    ("provisioning-datasources", DATASOURCES, lambda d: d["datasources"][0].pop("type"), "'type' is a required"),
    ("provisioning-datasources", DATASOURCES, lambda d: d["datasources"][0].update(acess="proxy"),
     "Additional properties"),
    ("provisioning-dashboards", PROVIDERS, lambda d: d["providers"][0]["options"].pop("path"), "'path' is a required"),
    ("dashboard", DASHBOARD, lambda d: d["panels"][1]["gridPos"].update(w=25), "25 is greater than the maximum"),
    ("dashboard", DASHBOARD, lambda d: d["panels"][1]["targets"][0].pop("refId"), "'refId' is a required"),
])
def test_the_schemas_reject_what_grafana_documents_as_wrong(name: str, doc: Any, mutate: Any, complaint: str) -> None:
    bad = deepcopy(doc)
    mutate(bad)
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        schema(name).validate(bad)


def targets() -> list[dict[str, Any]]:
    return [t for p in DASHBOARD["panels"] for t in p.get("targets", [])]


def test_every_variable_a_query_uses_is_defined_and_all_matches_a_missing_label() -> None:
    defined = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    used = {m for t in targets() for m in re.findall(r"\$([a-z_]+)", t["expr"])}
    used |= {m for v in defined.values() if isinstance(v.get("query"), str) for m in re.findall(r"\$([a-z_]+)",
                                                                                              v["query"])}
    assert used and used <= set(defined), used - set(defined)
    assert {"instance", "rank", "model_name"} <= set(defined)
    for name in ("instance", "rank", "model_name"):  # "All" is `.*`: a series without the label still shows
        assert defined[name]["includeAll"] and defined[name]["allValue"] == ".*"


def test_every_appliance_query_filters_by_instance_and_rank_and_every_vllm_query_by_model_too() -> None:
    series = re.compile(r"(?:appliance_|vllm:)[a-z0-9_:]+")
    queries = [t["expr"] for t in targets() if series.search(t["expr"])]
    assert len(queries) >= 10, "the dashboard's queries of appliance/vLLM series were not found"
    selected = vllm_selected = 0
    for expr in queries:
        # Every series a query names carries a selector: a bare name would show every instance and rank at once.
        names = series.findall(expr)
        selectors = re.findall(r"(?:appliance_|vllm:)[a-z0-9_:]+\{([^}]*)\}", expr)
        assert len(selectors) == len(names), f"a series without a {{...}} selector: {expr}"
        for selector in selectors:
            assert 'instance=~"$instance"' in selector and 'rank=~"$rank"' in selector, expr
            selected += 1
        for selector in re.findall(r"vllm:[a-z0-9_]+\{([^}]*)\}", expr):
            assert 'model_name=~"$model_name"' in selector, expr
            vllm_selected += 1
    assert selected >= len(queries) and vllm_selected > 0


def test_panels_sit_on_the_grid_without_overlapping_and_ids_are_unique() -> None:
    taken: dict[tuple[int, int], str] = {}
    for p in DASHBOARD["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"{p['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = p["title"]
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))


def test_the_dashboard_has_the_rows_people_need() -> None:
    rows = [p["title"] for p in DASHBOARD["panels"] if p["type"] == "row"]
    for word in ("Start-up", "vLLM", "Memory", "Fabric", "canary"):
        assert any(word in r for r in rows), (word, rows)


def test_the_dashboard_uses_the_provisioned_prometheus_and_the_provider_reads_a_folder() -> None:
    (ds,) = DATASOURCES["datasources"]
    assert ds["type"] == "prometheus" and ds["isDefault"] and ds["access"] == "proxy"
    variable = next(v for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource")
    assert variable["query"] == ds["type"]
    for p in DASHBOARD["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
    (provider,) = PROVIDERS["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == "/etc/grafana/dashboards/appliance"
