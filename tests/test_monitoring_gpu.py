"""The dashboard's GPU row against dcgm-exporter's /metrics: a real Prometheus (Debian's package, on loopback) runs the
bundle's own scrape configuration against a stand-in for NVIDIA's dcgm-exporter that serves the fixture written
from its source (tests/fixtures/logs/dcgm-exporter-metrics.txt; no GPU, no DCGM here), and every GPU-row query must
return series for both GPUs, carrying every label its legend names. A misspelt metric or label returns nothing and
fails. The Kubernetes side, the PodMonitor for dcgm-exporter, is in tests/test_k8s_monitoring.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, http_ok, wait_for
from tests.monitoring_series import DCGM_METRICS, serve_text

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "monitoring" / "prometheus"
DASHBOARD = ROOT / "monitoring" / "grafana" / "dashboards" / "appliance.json"
VARIABLES = {"$instance": ".*", "$rank": ".*", "$model_name": ".*", "$__rate_interval": "1m", "$__range": "5m"}
SOURCE = re.compile(r"^# source: etc/default-counters\.csv:(\d+)$")


def gpu_targets() -> list[tuple[str, dict]]:
    import json

    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t) for p in dashboard["panels"] for t in p.get("targets", []) if "DCGM_" in t["expr"]]


def test_every_family_of_the_fixture_names_the_line_of_default_counters_it_follows() -> None:
    lines = DCGM_METRICS.read_text().splitlines()
    header = [line for line in lines if line.startswith("# ") and not SOURCE.match(line)
              and not line.startswith(("# HELP", "# TYPE"))]
    assert any("691c92762eb551313c825f6efe4ceeee20982801" in line for line in header), "the header names no commit"
    families = [i for i, line in enumerate(lines) if line.startswith("# HELP ")]
    assert families
    for i in families:
        assert SOURCE.match(lines[i - 1]), f"{lines[i]}: no `# source:` line above it"
    samples = [s for f in text_string_to_metric_families(DCGM_METRICS.read_text()) for s in f.samples]
    # The labels dcgm-exporter's template writes (render_metrics.go:47) and the driver version it adds to each.
    assert samples and all(list(s.labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                                              "DCGM_FI_DRIVER_VERSION"] for s in samples)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("prometheus")
    assert exe, "prometheus is missing: apt-get install prometheus (scripts/test.sh does)"
    home = tmp_path_factory.mktemp("prometheus-gpu")
    bundle = home / "bundle"
    shutil.copytree(BUNDLE, bundle)
    config = yaml.safe_load((bundle / "prometheus.yml").read_text())
    # The bundle's jobs and relabelling as they ship; only the scrape interval is shortened (two scrapes in
    # seconds), the exporter's and engine's targets emptied, and the GPU target is the stand-in's port.
    config["global"]["scrape_interval"] = "1s"
    (bundle / "prometheus.yml").write_text(yaml.safe_dump(config))
    for name in ("exporter", "engine"):
        (bundle / "targets" / f"{name}.yml").write_text("[]\n")
    shipped = yaml.safe_load((BUNDLE / "targets" / "gpu.yml").read_text())
    with serve_text(DCGM_METRICS.read_text()) as port:
        shipped[0]["targets"] = [f"127.0.0.1:{port}"]
        (bundle / "targets" / "gpu.yml").write_text(yaml.safe_dump(shipped))
        listen = free_port()
        log = home / "prometheus.log"
        proc = subprocess.Popen([exe, f"--config.file={bundle / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{listen}",
                                 "--log.level=warn"], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        url = f"http://127.0.0.1:{listen}"
        try:
            assert wait_for(lambda: http_ok(f"{url}/-/ready"), timeout=60, interval=0.5), log.read_text()
            scraped = 'count_over_time(up{job="dcgm-exporter"}[1m]) >= 3'
            assert wait_for(lambda: query(url, scraped), timeout=60, interval=0.5), log.read_text()
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def query(url: str, expr: str) -> list[dict]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=30).json()
    assert body["status"] == "success", (expr, body.get("error"))
    return body["data"]["result"]


def test_the_gpu_job_scrapes_dcgm_exporter_with_the_labels_the_dashboard_selects(prometheus: str) -> None:
    (up,) = query(prometheus, 'up{job="dcgm-exporter"}')
    assert up["value"][1] == "1"
    assert {k: up["metric"][k] for k in ("instance", "rank", "component")} == {
        "instance": "127.0.0.1", "rank": "0", "component": "gpu"}


@pytest.mark.parametrize(("panel", "target"), gpu_targets(), ids=lambda v: v if isinstance(v, str) else v["refId"])
def test_every_gpu_row_query_returns_both_gpus_with_the_labels_its_legend_names(prometheus: str, panel: str,
                                                                                target: dict) -> None:
    expr = target["expr"]
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    result = query(prometheus, expr)
    assert sorted(r["metric"].get("gpu") for r in result) == ["0", "1"], (panel, expr, result)
    legend = set(re.findall(r"\{\{(\w+)\}\}", target["legendFormat"]))
    assert legend and all(legend <= set(r["metric"]) for r in result), (panel, legend, result)
