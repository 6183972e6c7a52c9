"""The canary while serving, on the REAL vLLM CPU engine: `appliance run cpu-smoke-canary` with the
corruption injector loaded (a logits processor that corrupts only while prefix caching is on).
Switched on, the canary confirms corruption within two failing rounds, the serve turns `degraded`,
the ladder takes `no-prefix-caching` (the engine restarted by supervisord with
--no-enable-prefix-caching, the exporter judging that profile), a round passes on it and the serve is `ready`
again. Corruption no rung
cures (`always`) then ends in `failed`: the ladder never loops."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import http_ok, start_serve, wait_for

INTERVAL_S = 10


def status(url: str) -> dict:
    return httpx.get(f"{url}/status", timeout=5).json()


def metric(url: str, series: str, **labels: str) -> float | None:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == series and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def test_confirmed_corruption_degrades_steps_down_recovers_and_past_the_last_rung_fails(
        smoke_model_dir: Path, tmp_path: Path) -> None:
    flag = tmp_path / "corrupt.flag"
    serve = start_serve(tmp_path / "run", smoke_model_dir, f"canary.interval_s={INTERVAL_S}",
                        "engine.logits_processors=[appliance.canary.inject:RepeatLastToken]",
                        profile="cpu-smoke-canary", env={"APPLIANCE_CANARY_INJECT_FLAG": str(flag)})
    seen: list[tuple[float, str, str]] = []  # (time, exporter state, canary status): the timeline for failures

    def observe() -> dict:
        body = status(serve.exporter)
        seen.append((round(time.monotonic() - t0, 1), body["state"], (body.get("canary") or {}).get("status")))
        return body

    t0 = time.monotonic()
    # The bounds catch a hang, not slowness: a canary round of this profile took 139-149 s on this machine idle
    # (2026-12-05, about 7 tokens/s of decode, a 192-token long decode; 64 since), so each wait spans at least two
    # rounds.
    try:
        up = wait_for(lambda: http_ok(f"{serve.url}/health"), timeout=300, interval=2)
        assert up, serve.output.read_text()[-3000:]
        assert wait_for(lambda: observe()["canary"]["rounds_total"]["healthy"] >= 1 and observe()["ready"],
                        timeout=600, interval=2), seen[-5:]
        started_digest = observe()["profile"]["digest"]
        first = observe()["canary"]["last_round_unix"]
        assert wait_for(lambda: observe()["canary"]["last_round_unix"] != first, timeout=400, interval=0.5)
        flag.write_text("")  # corrupt from now on, while prefix caching is on
        switched_on = time.time()
        healthy_before = observe()["canary"]["rounds_total"]["healthy"]

        assert wait_for(lambda: observe()["canary"]["step_downs"], timeout=900, interval=1), seen[-10:]
        canary = observe()["canary"]
        event = canary["step_downs"][0]
        failing_rounds = canary["rounds_total"]["corruption"]
        assert failing_rounds == 2, canary  # confirmed within two rounds (confirm_after=2)
        assert canary["rounds_total"]["healthy"] == healthy_before
        assert event["to"] == "no-prefix-caching" and event["outcome"] == "taken"
        assert "repetition-loop" in event["signatures"]
        assert any(state == "degraded" and cs in ("corrupt", "rechecking") for _, state, cs in seen), seen
        detection_s = event["at_unix"] - switched_on

        assert wait_for(lambda: observe()["canary"]["status"] == "ok" and observe()["ready"], timeout=1200,
                        interval=2), seen[-10:]
        body = observe()
        assert body["canary"]["rung"]["name"] == "no-prefix-caching"
        assert body["canary"]["effective"] == {"cache.prefix_caching": "false"}
        # The engine restarted from the rewritten launch (supervisord.conf names only launch.json).
        launch = json.loads((serve.run_dir / "launch.json").read_text())
        assert "--no-enable-prefix-caching" in launch["programs"]["vllm"]["argv"]
        assert "'enable_prefix_caching': False" in (serve.run_dir / "vllm.log").read_text()
        # …and the exporter judges that launch's profile, not the one the serve started with.
        assert body["profile"]["digest"] == launch["profile"]["digest"] != started_digest
        assert metric(serve.exporter, "appliance_canary_step_downs_total") == 1
        assert metric(serve.exporter, "appliance_canary_failures_total", signature="repetition-loop") == 2
        assert metric(serve.exporter, "appliance_canary_rung", name="no-prefix-caching") == 1
        assert metric(serve.exporter, "appliance_canary_last_success_timestamp_seconds") > switched_on
        log = (serve.run_dir / "canary.log").read_text()
        assert "stepped down to rung 1 no-prefix-caching" in log and "recovered" in log

        flag.write_text("always")  # a corruption no rung cures
        assert wait_for(lambda: observe()["state"] == "failed", timeout=900, interval=2), seen[-10:]
        body = observe()
        assert body["canary"]["status"] == "failed"
        assert body["canary"]["step_downs"][-1]["outcome"] == "past the last rung: serve failed"
        assert httpx.get(f"{serve.exporter}/ready", timeout=5).status_code == 503
        assert any("past the last step-down rung" in r for r in body["reasons"])
        print(f"\ncanary figures: confirmed after {failing_rounds} failing rounds, {detection_s:.0f} s after the "
              f"corruption was switched on (interval {INTERVAL_S} s); timeline {seen[::10]}")
    except BaseException:
        print((serve.run_dir / "canary.log").read_text() if (serve.run_dir / "canary.log").exists() else "no log")
        raise
    finally:
        serve.stop()
        flag.unlink(missing_ok=True)

