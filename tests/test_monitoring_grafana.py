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
    used = {m for t in targets() for m in re.findall(r"\$([a-z_]+)", t["expr"]) if not m.startswith("__")}
    used |= {m for v in defined.values() if isinstance(v.get("query"), str) for m in re.findall(r"\$([a-z_]+)",
                                                                                              v["query"])}
    # $__rate_interval and $__range are Grafana's own (they start with two underscores): nothing to define.
    assert {m for t in targets() for m in re.findall(r"\$(__[a-z_]+)", t["expr"])} <= {"__rate_interval", "__range"}
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
    for word in ("Start-up", "vLLM", "GPUs (dcgm-exporter)", "Memory", "Fabric", "canary"):
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


def panel(title: str) -> dict[str, Any]:
    (found,) = [p for p in DASHBOARD["panels"] if p["title"] == title]
    return found


def test_no_panel_query_has_a_fixed_window_rates_take_the_rate_interval() -> None:
    windows = [(p["title"], w) for p in DASHBOARD["panels"] for t in p.get("targets", [])
               for w in re.findall(r"\[([^\]]+)\]", t["expr"])]
    assert windows, "no range selector found"
    fixed = [(title, w) for title, w in windows if w not in ("$__rate_interval", "$__range")]
    assert not fixed, fixed
    # Every rate, increase and histogram window is Grafana's rate interval (at least four scrapes, the step's size).
    rates = [t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", []) if "rate(" in t["expr"]]
    assert rates and all("[$__rate_interval]" in e and "[$__range]" not in e for e in rates), rates


@pytest.mark.parametrize("title", ["Time to first token", "Inter-token latency", "End-to-end request latency"])
def test_each_latency_panel_shows_every_instance_and_all_of_them_together(title: str) -> None:
    exprs = {t["legendFormat"]: t["expr"] for t in panel(title)["targets"]}
    per_instance = [e for legend, e in exprs.items() if legend.startswith("{{instance}} rank {{rank}}")]
    together = [e for legend, e in exprs.items() if legend.startswith("all ")]
    assert per_instance and together, exprs
    assert all("sum by (instance, rank, le)" in e for e in per_instance), per_instance
    assert all("sum by (le)" in e for e in together), together
    assert {"0.99", "0.5"} <= {re.match(r"histogram_quantile\(([0-9.]+),", e)[1] for e in together}  # type: ignore[index]


def test_the_acceptance_per_draft_position_is_accepted_at_each_position_over_the_drafts() -> None:
    (target,) = panel("Acceptance per draft position")["targets"]
    assert "sum by (instance, rank, position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total" in \
        target["expr"]
    assert "group_left sum by (instance, rank) (rate(vllm:spec_decode_num_drafts_total" in target["expr"]
    assert "{{position}}" in target["legendFormat"]


def test_the_panels_of_vllms_example_dashboard_are_here() -> None:
    """vLLM's examples/observability/prometheus_grafana/grafana.json (commit 4b5c627c) draws these series; each is
    on a panel here (its E2E, ITL, TTFT, scheduler, cache, throughput panels were here before)."""
    exprs = " ".join(t["expr"] for t in targets())
    for series in ("vllm:e2e_request_latency_seconds_bucket", "vllm:generation_tokens_total",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
                   "vllm:time_to_first_token_seconds_bucket", "vllm:kv_cache_usage_perc",
                   "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
                   "vllm:request_success_total", "vllm:request_queue_time_seconds",
                   "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                   "vllm:request_max_num_generation_tokens"):
        assert series in exprs, series
    assert panel("Prompt length")["type"] == panel("Output length")["type"] == "heatmap"


def test_every_gpu_query_selects_the_gpu_component_of_the_chosen_instance_and_rank() -> None:
    gpu = [t["expr"] for t in targets() if "DCGM_" in t["expr"]]
    assert len(gpu) >= 6, gpu
    for expr in gpu:
        names = re.findall(r"DCGM_FI_[A-Z0-9_]+", expr)
        selectors = re.findall(r"DCGM_FI_[A-Z0-9_]+\{([^}]*)\}", expr)
        assert len(selectors) == len(names), f"a series without a {{...}} selector: {expr}"
        for selector in selectors:
            assert selector == 'component="gpu",instance=~"$instance",rank=~"$rank"', expr
