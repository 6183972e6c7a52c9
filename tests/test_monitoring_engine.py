"""The monitoring bundle against the REAL CPU serve: one `appliance run cpu-smoke` (watched while it loads) and a
real Prometheus (Debian's package, on loopback) running the bundle's own configuration, its targets pointed at this
serve's ports, and a stand-in for dcgm-exporter serving the GPU fixture (no GPU here). All three targets are up with the
labels the rules join on, the alert rules load and none fires on the
healthy serve, and every dashboard query runs: a query Prometheus rejects, or one naming a series that neither the
serve nor the fixtures' /metrics (DeepSeek, multi-node, canary lines) expose, fails.

APPLIANCE_MONITORING_EVIDENCE=DIR writes what each panel's queries returned (panels.json), the exporter's lines in
the container's output (container-output.txt) and the start as /status last said it (startup.json)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.conftest import Serve, free_port, http_ok, start_serve, wait_for
from tests.monitoring_series import DCGM_METRICS, fixture_series_names, metric_names, queries, serve_text

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "monitoring" / "prometheus"
DASHBOARD = json.loads((ROOT / "monitoring" / "grafana" / "dashboards" / "appliance.json").read_text())
VARIABLES = {"$instance": ".*", "$rank": ".*", "$model_name": ".*", "$__rate_interval": "1m", "$__range": "1h"}


@dataclass
class Watched:
    serve: Serve
    statuses: list[dict]
    """/status as polled every half second from the start until ready."""


@pytest.fixture(scope="module")
def watched(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    serve = start_serve(tmp_path_factory.mktemp("monitoring") / "run", smoke_model_dir)
    statuses: list[dict] = []

    def ready() -> bool:
        body = httpx.get(f"{serve.exporter}/status", timeout=5).json()
        statuses.append(body)
        return body["state"] == "ready"

    if not wait_for(ready, timeout=600, interval=0.5):
        serve.stop()
        pytest.fail(f"the serve never turned ready:\n{serve.output.read_text()[-4000:]}")
    yield Watched(serve, statuses)
    serve.stop()


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **params: str) -> dict:
        body = httpx.get(f"{self.url}{path}", params=params, timeout=30).json()
        assert body["status"] == "success", body
        return body["data"]


@pytest.fixture(scope="module")
def prometheus(watched: Watched, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    exe = shutil.which("prometheus")
    assert exe, "prometheus is missing: apt-get install prometheus (scripts/test.sh does)"
    home = tmp_path_factory.mktemp("prometheus")
    bundle = home / "bundle"
    shutil.copytree(BUNDLE, bundle)
    # The bundle's configuration as it ships; only its target files name this serve's ports.
    (bundle / "targets" / "exporter.yml").write_text(
        f'- targets: ["127.0.0.1:{watched.serve.health_port}"]\n  labels: {{component: exporter, rank: "0"}}\n')
    (bundle / "targets" / "engine.yml").write_text(
        f'- targets: ["127.0.0.1:{watched.serve.port}"]\n  labels: {{component: engine, rank: "0"}}\n')
    gpu = ExitStack()
    dcgm_port = gpu.enter_context(serve_text(DCGM_METRICS.read_text()))
    (bundle / "targets" / "gpu.yml").write_text(
        f'- targets: ["127.0.0.1:{dcgm_port}"]\n  labels: {{component: gpu, rank: "0"}}\n')
    port = free_port()
    log = home / "prometheus.log"
    proc = subprocess.Popen([exe, f"--config.file={bundle / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        assert wait_for(lambda: http_ok(f"{prom.url}/-/ready"), timeout=60, interval=0.5), log.read_text()
        client = OpenAI(base_url=f"{watched.serve.url}/v1", api_key="unused")

        def scraped_twice() -> bool:
            # Traffic between the scrapes, so that the rates and histograms have something to say.
            client.completions.create(model="smollm2", prompt="One, two, three,", max_tokens=8)
            up = prom.get("/api/v1/query", query="count_over_time(up[5m]) >= 2")["result"]
            return len(up) == 3

        assert wait_for(scraped_twice, timeout=120, interval=3), prom.get("/api/v1/targets")
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        gpu.close()


def test_every_target_is_up_with_the_labels_the_rules_join_on(prometheus: Prometheus, watched: Watched) -> None:
    targets = prometheus.get("/api/v1/targets")["activeTargets"]
    by_job = {t["labels"]["job"]: t for t in targets}
    assert set(by_job) == {"appliance-exporter", "appliance-engine", "dcgm-exporter"}
    assert by_job["dcgm-exporter"]["health"] == "up" and by_job["dcgm-exporter"]["labels"]["component"] == "gpu"
    for job, component, port in (("appliance-exporter", "exporter", watched.serve.health_port),
                                 ("appliance-engine", "engine", watched.serve.port)):
        t = by_job[job]
        assert t["health"] == "up", t
        assert t["scrapeUrl"] == f"http://127.0.0.1:{port}/metrics"
        assert {k: t["labels"][k] for k in ("instance", "rank", "component")} == {
            "instance": "127.0.0.1", "rank": "0", "component": component}


def test_the_alert_rules_load_and_none_fires_on_the_healthy_serve(prometheus: Prometheus) -> None:
    groups = prometheus.get("/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    shipped = re.findall(r"^\s*- alert: (\w+)", (BUNDLE / "rules" / "appliance.rules.yml").read_text(), re.M)
    assert sorted(r["name"] for r in rules) == sorted(shipped)
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    # Every rule has been evaluated against the live series at least once by now.
    assert all(r.get("lastEvaluation", "").startswith("20") for r in rules)
    assert prometheus.get("/api/v1/alerts")["alerts"] == []


def test_every_dashboard_query_runs_and_names_only_series_someone_exposes(prometheus: Prometheus) -> None:
    live = set(prometheus.get("/api/v1/label/__name__/values"))
    fixtures = fixture_series_names()
    report, unknown = [], []
    for panel, expr in queries(DASHBOARD):
        query = expr
        for var, value in VARIABLES.items():
            query = query.replace(var, value)
        response = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": query}, timeout=30).json()
        assert response["status"] == "success", (panel, expr, response.get("error"))
        names = metric_names(expr)
        unknown += [(panel, n) for n in names if n not in live and n not in fixtures]
        report.append({"panel": panel, "expr": expr, "series": len(response["data"]["result"]),
                       "names_live": sorted(n for n in names if n in live),
                       "names_from_fixtures": sorted(n for n in names if n not in live and n in fixtures)})
    assert not unknown, unknown
    # The serve's own rows are not empty: the appliance's state and vLLM's counters came through the bundle.
    answered = {r["panel"] for r in report if r["series"]}
    assert {"Ready", "State", "Tokens per second", "Requests", "Time in start-up", "GPU utilisation"} <= answered, \
        answered
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] != "query":
            continue
        label, match = re.fullmatch(r"label_values\((?:(.+), )?(\w+)\)", variable["query"]).group(2, 1)  # type: ignore[union-attr]
        for var, value in VARIABLES.items():
            match = match.replace(var, value)
        values = prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": match})
        assert values, (variable["name"], match)
        report.append({"variable": variable["name"], "values": values})
    evidence("panels.json", json.dumps(report, indent=1) + "\n")


def test_every_series_an_alert_rule_reads_is_exposed(prometheus: Prometheus) -> None:
    live = set(prometheus.get("/api/v1/label/__name__/values"))
    fixtures = fixture_series_names()
    rules = [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]
    missing = [(r["name"], n) for r in rules for n in metric_names(r["query"])
               if n not in live and n not in fixtures and n != "up"]
    assert not missing, missing


def test_the_start_was_reported_phase_by_phase_while_it_loaded(watched: Watched) -> None:
    phases = [s["startup"]["phase"] for s in watched.statuses if s.get("startup") and s["startup"]["phase"]]
    seen = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    order = watched.statuses[-1]["startup"]["phases"]
    assert seen[-1] == "ready" and seen == sorted(seen, key=order.index), seen  # never backwards
    last = watched.statuses[-1]["startup"]
    history = [h["phase"] for h in last["history"]]
    # The CPU start: no download (the folder is on disk), no graphs (eager); the rest in the engine's order.
    assert history == ["engine", "weights", "compile", "warmup", "api-server", "ready"], last
    assert last["elapsed_s"] > 0 and last["index"] == len(order)
    # The same in the container's output (supervisord's stdout: the log tail of the engine's and the exporter's
    # output), in order, ending with one `ready after` that names the phases.
    out = watched.serve.output.read_text()
    lines = [line for line in out.splitlines() if line.startswith("appliance: ")]
    said = [re.search(r"\(([a-z-]+), phase", line)[1] for line in lines  # type: ignore[index]
            if line.startswith("appliance: loading ")]
    assert len(set(said)) >= 2 and said == sorted(said, key=order.index), "\n".join(lines)
    ready = [line for line in lines if line.startswith("appliance: ready after ")]
    assert len(ready) == 1 and "weights " in ready[0], "\n".join(lines)
    assert any(line.startswith("appliance: state ") and line.endswith("-> ready") for line in lines), "\n".join(lines)
    evidence("container-output.txt", "\n".join(lines) + "\n")
    evidence("startup.json", json.dumps(last, indent=1) + "\n")


def evidence(name: str, text: str) -> None:
    folder = os.environ.get("APPLIANCE_MONITORING_EVIDENCE")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / name).write_text(text)
