"""`gate --battery seed`: the seed harness's final acceptance as data, its verdict rule, each check's judge on
answers whose right result is known, the checks against fake serves, and `gate battery` over arm receipts.
The real run on the CPU engine is tests/test_gate_engine.py::test_the_seed_battery_runs_every_check_of_every_arm."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.cli import main
from appliance.errors import ApplianceError
from appliance.gate.battery import coherence, instruction, needles
from appliance.gate.battery.checks import judge_reference
from appliance.gate.battery.definition import ARMS, SEED
from appliance.gate.battery.run_context import BatteryRun
from appliance.gate.battery.sizing import CoherenceParams, NeedleParams, battery_params_for
from appliance.gate.battery.verdict import judge, receipt_verdict, word
from appliance.gate.context import GateContext
from appliance.gate.progress import Quiet
from appliance.gate.receipt import SCHEMA
from appliance.gate.receipt_model import Check
from appliance.gate.sizing import params_for
from appliance.profile.loader import load_profile

# --- the battery as the harness defines it -------------------------------------------------------------------

def test_the_battery_is_the_harness_s_eighteen_checks_fourteen_run_here_four_recorded_as_not_run():
    ids = [c.id for c in SEED.checks]
    assert ids == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "D1", "D1-c1", "D2", "D2-c1"]
    assert [o.id for o in SEED.outside] == ["A1", "A2", "B1", "B2"]
    assert len(ids) + len(SEED.outside) == 18  # the seed: "17 of 18 checks pass"
    assert SEED.min_checks == 14 and SEED.expect == "d44e224ab9"
    assert {c.arm for c in SEED.checks} == set(ARMS)
    assert "30-minute" in next(o.why for o in SEED.outside if o.id == "B2")
    standard = battery_params_for(load_profile("gb10-tp2").profile)
    assert (standard.arthur_c12.line_count, standard.arthur_c12.concurrency, standard.arthur_c12.repeat,
            standard.arthur_c12.runs, standard.arthur_c12.min_passed) == (900, 12, 2, 3, 18)
    assert (standard.needles.line_counts, standard.needles.needles, standard.needles.distractors,
            standard.needles.repeats, standard.needles.seed) == ((1500, 2850), 8, 8, 3, 20260808)
    assert standard.gsm8k.min_accuracy == 0.92 and standard.gsm8k.num_fewshot == 8 and standard.gsm8k.limit is None
    assert standard.bench_row == "pp2048 @ d8192" and standard.bench_tolerance == 0.05


def lines(*statuses: tuple[str, str]) -> list[Check]:
    return [Check(name=n, status=s, summary=f"evidence of {n}") for n, s in statuses]


ALL_PASS = [(c.id, "pass") for c in SEED.checks]


def test_fourteen_passes_are_accepted():
    result = judge(lines(*ALL_PASS), SEED)
    assert result.accepted and result.passed == result.recorded == 14 and not result.blockers


@pytest.mark.parametrize("status", ["fail", "timeout", "error", "unavailable", "skipped", "inconclusive"])
def test_anything_but_pass_is_a_blocker_including_a_timeout_and_a_word_added_later(status: str):
    result = judge(lines(*ALL_PASS[:-1], ("D2-c1", status)), SEED)
    assert not result.accepted and result.blockers == [f"D2-c1 {word(status)}: evidence of D2-c1"]


def test_too_few_checks_or_a_check_twice_is_not_accepted():
    short = judge(lines(*ALL_PASS[:10]), SEED)  # the default arm only
    assert not short.accepted and short.missing == ["D1", "D1-c1", "D2", "D2-c1"] and "10 recorded" in short.why
    twice = judge(lines(*ALL_PASS, ("C5", "pass")), SEED)
    assert not twice.accepted and twice.blockers == ["C5: recorded 2 times (one line each)"]
    padded = judge(lines(*ALL_PASS[:13], ("X9", "pass")), SEED)  # a foreign line cannot pad the count
    assert not padded.accepted and padded.missing == ["D2-c1"]


def test_an_arm_receipt_alone_is_inconclusive_when_it_passed_and_failed_when_it_did_not():
    assert receipt_verdict(lines(*ALL_PASS[:10]), SEED) == "inconclusive"
    assert receipt_verdict(lines(*ALL_PASS[:9], ("C10", "fail")), SEED) == "fail"
    assert receipt_verdict(lines(*ALL_PASS), SEED) == "pass"


# --- the coherence gate's judge -----------------------------------------------------------------------------

CODES = coherence.CODES
GOOD = f"The first code is {CODES[0]}, the middle one {CODES[1]} and the last {CODES[2]}."


def test_a_prompt_plants_its_three_codes_where_the_harness_does():
    prompt = coherence.build_prompt(900)
    assert coherence.code_lines(900) == {17: 0, 450: 1, 887: 2}
    for line, i in coherence.code_lines(900).items():
        assert f"Line {line:04d}: MARKER" in prompt.text and CODES[i] in prompt.text
    assert prompt.text.count("\nLine ") == 900 and prompt.sha256 == coherence.build_prompt(900).sha256


@pytest.mark.parametrize(("answer", "ok", "why"), [
    (GOOD, True, "all three codes"),
    (GOOD.upper(), True, "all three codes"),  # the harness matches case-insensitively
    (GOOD.replace(CODES[1], "cedar-lynx-85"), False, "missing code(s): cedar-lynx-58"),
    (GOOD + " <｜begin▁of▁sentence｜> and so on", False, "control token"),
    (GOOD + " \ufffd", False, "U+FFFD"),
    (GOOD + " λθελόγ внутрь 查看日志 проверка логов δεδομένα", False, "non-Latin"),
    (GOOD + " " + "z" * 400, False, "degenerate"),
    (f"{GOOD} The context is missing, I think.", False, "context is missing"),
    ("Tous les codes: " + GOOD + " Très bien, déjà vérifié.", True, "all three codes"),  # accents are Latin
])
def test_an_answer_passes_only_with_every_code_and_coherent_text(answer: str, ok: bool, why: str):
    passed, detail = coherence.judge_answer(answer, CODES)
    assert passed is ok and why in detail


# --- fake serves for the checks (httpx.MockTransport: the right verdict is known) ----------------------------

def ctx_for(profile: str, handler, tmp_path: Path, arm: str = "default", exporter: str | None = None,
            reference: float | None = None) -> GateContext:
    def respond(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        status, payload = handler(request.url.path, body)
        return httpx.Response(status, json=payload)

    p = load_profile(profile).profile
    run = BatteryRun(SEED, arm, battery_params_for(p), exporter, reference, "test")  # type: ignore[arg-type]
    return GateContext(url="http://serve", model="m", checkpoint=p.model.checkpoint, tokenizer=None, profile=p,
                       params=params_for(p), out_dir=tmp_path, progress=Quiet(),
                       transport=httpx.MockTransport(respond), battery=run)


def chat(content: str, finish: str = "stop") -> dict:
    return {"choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 24000}}


def reader(poisoned: int = 0):
    """Answers the codes of a coherence prompt; the first `poisoned` requests answer gibberish."""
    seen = []

    def handler(path: str, body: dict) -> tuple[int, dict]:
        if path == "/tokenize":
            return 200, {"count": len(body["prompt"]) // 4}
        seen.append(1)
        prompt = body["messages"][-1]["content"]
        codes = re.findall(r"validation code is ([a-z]+-[a-z]+-\d+)", prompt)
        if len(seen) <= poisoned:  # the codes, drowned in arthur's mixed-script gibberish
            return 200, chat(", ".join(codes) + " Lambdaλθελόγ—— just查看日志检查结果 let me 我的猜测是这样的 " * 3)
        return 200, chat("Codes: " + ", ".join(codes))
    return handler


def test_c5_passes_at_24_of_24_three_times_and_fails_a_serve_that_loses_seven(tmp_path):
    from appliance.gate.battery.checks import c5_arthur_c12

    good = c5_arthur_c12(ctx_for("gb10-tp2", reader(), tmp_path))
    assert good.status == "pass" and good.summary.startswith("passed=24/24 passed=24/24 passed=24/24 (min 24")
    assert good.params["line_count"] == 900 and good.metrics == {"passed": [24, 24, 24], "total": 24}
    poisoned = c5_arthur_c12(ctx_for("gb10-tp2", reader(poisoned=7), tmp_path))  # 17 in the first run
    assert poisoned.status == "fail" and "passed=17/24" in poisoned.summary and "(min 17)" in poisoned.summary
    assert "non-Latin" in poisoned.summary


def test_c6_needs_two_of_two(tmp_path):
    from appliance.gate.battery.checks import c6_arthur_c1

    assert c6_arthur_c1(ctx_for("gb10-tp2", reader(), tmp_path)).summary == "passed=2/2"
    one = c6_arthur_c1(ctx_for("gb10-tp2", reader(poisoned=1), tmp_path))
    assert one.status == "fail" and one.summary.startswith("passed=1/2")


def test_a_prompt_too_long_for_the_serve_is_shortened_and_says_how_many_lines(tmp_path):
    ctx = ctx_for("gb10-tp2", reader(), tmp_path)
    small = CoherenceParams(line_count=900, concurrency=1, repeat=1, max_tokens=48)
    from dataclasses import replace

    tiny = replace(ctx, profile=load_profile("gb10-tp2", cli_overrides=["limits.max_model_len=4096"]).profile)
    result = asyncio.run(coherence.run(tiny, small))
    assert 40 <= result["line_count"] < 900 and result["passed"] == [1]


# --- multi-needle ---------------------------------------------------------------------------------------------

def test_the_needle_prompt_is_reproducible_and_keeps_distractors_out_of_the_question():
    a = needles.build_prompt(1500, 8, 8, 20260809)
    assert a == needles.build_prompt(1500, 8, 8, 20260809) and a != needles.build_prompt(1500, 8, 8, 20260810)
    question = a.text.rsplit("Question:", 1)[1]
    assert all(k in question for k, _ in a.needles) and not any(k in question for k, _ in a.distractors)
    assert len({k for k, _ in (*a.needles, *a.distractors)}) == 16


def test_a_needle_counts_only_paired_with_its_code_and_a_reported_distractor_is_a_leak():
    p = needles.build_prompt(200, 8, 8, 7)
    answer = "\n".join(f"{k}={c}" for k, c in p.needles[:7]) + f"\n{p.needles[7][0]}: 000000"
    scored = needles.score(answer, p)
    assert (scored["needles_hit"], scored["missed"], scored["leaked"]) == (7, [p.needles[7][0]], [])
    leak = needles.score(answer + f"\n{p.distractors[0][0]} is {p.distractors[0][1]}", p)
    assert leak["leaked"] == [p.distractors[0][0]]


def needle_reader(window_at: int | None = None, truncate: bool = False):
    def handler(path: str, body: dict) -> tuple[int, dict]:
        prompt = body["messages"][0]["content"]
        lines_count = prompt.count("\nLine ")
        if window_at and lines_count >= window_at:
            return 400, {"error": {"message": "This model's maximum context length is 49152 tokens."}}
        asked = re.findall(r"vaults: (.*)\?", prompt)[0].split(", ")
        codes = dict(re.findall(r"vault ([A-Z]+-\d\d) is (\d{6})", prompt))
        return 200, chat("\n".join(f"{k}={codes[k]}" for k in asked), "length" if truncate else "stop")
    return handler


def test_c9_passes_at_48_of_48_and_counts_a_row_without_a_result_as_failed(tmp_path):
    from appliance.gate.battery.checks import c9_multi_needle

    good = c9_multi_needle(ctx_for("gb10-tp2", needle_reader(), tmp_path))
    assert good.status == "pass" and good.summary == "6 rows all 8/8, leaks 0, 0 failed (48/48)"
    # At max_model_len 49152 the 2850-line rows do not fit: the serve refuses them, and they count as failed.
    window = c9_multi_needle(ctx_for("gb10-tp2", needle_reader(window_at=2850), tmp_path))
    assert window.status == "fail" and "3 rows 8/8, 0 leaked, 3 FAILED (24/48)" in window.summary
    assert "serve's window" in window.summary
    cut = c9_multi_needle(ctx_for("gb10-tp2", needle_reader(truncate=True), tmp_path))
    assert cut.status == "fail" and "6 FAILED" in cut.summary  # a truncated answer is no result either


def test_needle_params_keep_the_harness_budget():
    assert NeedleParams(line_counts=(1500,)).max_tokens == max(512, 8 * 16 + 256)


# --- instruction following ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "ok"), [
    ('["Networking", "Benchmarking", "Docker"]', True),
    ('  ["Networking"]\n', True),
    ('Here are the labels:\n["Networking", "Docker"]', False),   # the jasl/vllm#19 failure: a preamble
    ('```json\n["Networking"]\n```', False),
    ('{"labels": ["Networking"]}', False),
    ("[1, 2]", False),
    ("", False),
])
def test_only_a_bare_json_array_of_strings_passes(answer: str, ok: bool):
    assert instruction.judge_answer(answer)[0] is ok


def test_the_instruction_prompt_puts_the_json_only_rule_in_the_system_turn():
    assert "Output ONLY a JSON array of strings" in instruction.SYSTEM
    assert instruction.NOTE.count("<content>") == 1 and "```bash" in instruction.NOTE


# --- C10 -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "ok"), [(1471.8, True), (1399.0, True), (1545.0, True), (1390.0, False),
                                           (1560.0, False)])
def test_c10_is_within_five_percent_of_the_reference_arm(value: float, ok: bool):
    # The harness: "the V2 arm measured 1471.8 at d8192 ... anything within 5% is unchanged" (its awk bounds
    # 1398..1546 round 1471.8 x 0.95 = 1398.2 and x 1.05 = 1545.4).
    assert judge_reference(value, 1471.8, 0.05)[0] is ok


def test_c10_without_a_reference_fails_and_says_how_to_give_one():
    ok, evidence = judge_reference(290.0, None, 0.05)
    assert not ok and "--bench-reference" in evidence and "290.0" in evidence
    assert judge_reference(None, 1471.8, 0.05) == (False, "no row measured")


# --- gate battery over arm receipts ---------------------------------------------------------------------------

def arm_receipt(tmp_path: Path, arm: str, statuses: dict[str, str] | None = None, lock: str = "l" * 64) -> str:
    checks = [{"name": c.id, "status": (statuses or {}).get(c.id, "pass"), "summary": f"{c.id} evidence",
               "params": {"title": c.title}} for c in SEED.of_arm(arm)]  # type: ignore[arg-type]
    data = {"schema": SCHEMA, "complete": True, "verdict": "inconclusive", "started_at": "x",
            "provenance": {"lock_digest": lock, "engine": {"version": "0.27.1"}, "profile": {"name": "gb10-tp2"}},
            "engagement": {}, "checks": checks,
            "battery": {"name": "seed", "arm": arm, "definition": [], "not_run": []}}
    path = tmp_path / f"{arm}-{lock[:2]}.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_gate_battery_accepts_three_clean_arms_and_prints_the_harness_lines(tmp_path, capsys):
    receipts = [arm_receipt(tmp_path, arm) for arm in ARMS]
    assert main(["gate", "battery", *receipts]) == 0
    out = capsys.readouterr().out
    assert "ACCEPTED: every one of the 14 serve checks passed on d44e224ab9" in out
    assert re.search(r"^CHECK C5 arthur c=12 x3, no degraded serve\s+:: PASS\s+:: C5 evidence$", out, re.M)
    for outside in ("A1", "A2", "B1", "B2"):
        assert re.search(rf"^CHECK {outside} .*:: NOT RUN :: outside the appliance", out, re.M)


def test_gate_battery_names_every_blocker_and_a_missing_arm(tmp_path, capsys):
    receipts = [arm_receipt(tmp_path, "default", {"C8": "timeout"}), arm_receipt(tmp_path, "v1")]
    assert main(["gate", "battery", *receipts, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["blockers"] == ["C8 TIMEOUT: C8 evidence"] and result["missing"] == ["D2", "D2-c1"]
    assert main(["gate", "battery", *receipts]) == 1
    assert "MISSING :: not measured: run the noguard arm's serve" in capsys.readouterr().out


def test_gate_battery_refuses_receipts_of_two_builds_or_one_arm_twice(tmp_path, capsys):
    a = arm_receipt(tmp_path, "default")
    assert main(["gate", "battery", a, arm_receipt(tmp_path, "v1", lock="m" * 64)]) == 2
    assert "not of one build" in capsys.readouterr().err
    assert main(["gate", "battery", a, a]) == 2
    assert "two receipts of arm default" in capsys.readouterr().err


def test_a_v1_arm_on_a_profile_that_does_not_run_v1_is_exit_2_before_anything_runs(tmp_path, capsys):
    assert main(["gate", "--battery", "seed", "--arm", "v1", "--profile", "gb10-tp2", "--url", "http://127.0.0.1:9",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--arm v1 judges a serve started with engine.runner=v1" in err and "--set engine.runner=v1" in err
    assert main(["gate", "--battery", "nope", "--profile", "gb10-tp2"]) == 2
    assert main(["gate", "--battery", "seed", "--checks", "bench", "--profile", "gb10-tp2"]) == 2
    assert not (tmp_path / "r").exists()


def test_the_noguard_arm_on_a_channel_without_the_guard_runs_the_profile_as_it_ships_and_d2_says_why(tmp_path):
    """K4 refuses cache.guard=0 on a channel whose engine has no guard (the CPU channels): the noguard arm there is
    the serve as it ships, and D2 fails naming the channel, rather than the arm being unrunnable (MISSING)."""
    from appliance.gate.battery import checks
    from appliance.gate.battery.prepare import battery_run, check_arm, receipt_section
    from appliance.lock import channel_lock

    cpu = load_profile("cpu-smoke").profile
    assert check_arm(cpu, "noguard") == "noguard"
    run = battery_run("seed", "noguard", cpu, params_for(cpu), None, None)
    channel = cpu.engine.channel
    assert channel and run.unguarded_channel == channel
    serve = receipt_section(run, channel_lock(channel), None)["serve"]
    assert serve.startswith("the profile as it ships") and f"channel {channel} has no same-step" in serve
    ctx = GateContext(url="http://serve", model="m", checkpoint=cpu.model.checkpoint, tokenizer=None, profile=cpu,
                      params=params_for(cpu), out_dir=tmp_path, progress=Quiet(), battery=run)
    with pytest.MonkeyPatch.context() as mp:  # the exporter's /status of a serve whose log has no guard line
        mp.setattr(checks, "_status", lambda _ctx: ({"facts": {"runner_v2": False}}, ""))
        d2 = checks.d2_noguard(ctx)
    assert (d2.status, d2.summary) == ("fail", f"no line: channel {channel} has no same-step ghost-block guard "
                                               f"to turn off (K4)")
    # where the channel's engine has the guard, the arm still needs the serve started with cache.guard=0
    gb10 = load_profile("gb10-tp2").profile
    with pytest.raises(ApplianceError, match=r"--arm noguard judges a serve started with cache\.guard=0"):
        check_arm(gb10, "noguard")
    off = load_profile("gb10-tp2", cli_overrides=["cache.guard=0"]).profile
    assert battery_run("seed", "noguard", off, params_for(off), None, None).unguarded_channel is None


# --- --bench-reference: C10's figure read from a receipt ----------------------------------------------------------

RECEIPTS = Path(__file__).parent / "fixtures" / "gate" / "receipts"


def test_bench_reference_reads_the_row_from_a_standard_receipt_and_from_a_battery_s_c10_line(tmp_path: Path) -> None:
    from appliance.gate.battery.prepare import reference

    profile = load_profile("cpu-smoke").profile
    params = replace(battery_params_for(profile), bench_row="pp64")
    standard = RECEIPTS / "cpu-smoke-run1" / "receipt.json"
    assert reference(params, profile, standard) == (205.62, f"{standard}: pp64")  # the typed `bench` line

    data = json.loads(standard.read_text())
    data["checks"] = [c for c in data["checks"] if c["name"] != "bench"] + [
        {"name": "C10", "status": "pass", "summary": "1500.0 (reference 1471.8, +/-5 %)",
         "metrics": {"rows": [{"test": "pp64", "kind": "pp", "t_s": 1500.0}]}}]
    battery = tmp_path / "receipt.json"
    battery.write_text(json.dumps(data))
    assert reference(params, profile, battery)[0] == 1500.0  # a battery's C10 keeps llama-benchy's rows as written

    with pytest.raises(ApplianceError) as missing:
        reference(replace(params, bench_row="pp2048 @ d8192"), profile, standard)
    assert missing.value.field == "--bench-reference" and "no pp2048 @ d8192 row" in str(missing.value)


@pytest.mark.parametrize("body", [{"choices": [None], "usage": 5}, {"choices": "x", "usage": []}, [1], "text",
                                  {"choices": [{"finish_reason": 3}], "usage": {"prompt_tokens": True}}])
def test_the_battery_s_reply_readers_take_a_broken_reply_as_no_answer_not_a_crash(body: Any) -> None:
    """C7, C9 and the coherence checks read finish_reason and prompt_tokens through these: a reply of the wrong
    shape (choices: [null], usage: 5) must leave the rows already collected intact."""
    from appliance.gate.client import finish_reason, first_choice, prompt_tokens

    assert first_choice(body) == {} or first_choice(body) == {"finish_reason": 3}
    assert finish_reason(body) is None and prompt_tokens(body) is None


def test_the_default_arm_renders_no_runner_switch_when_nothing_is_set_and_names_it_when_the_profile_sets_one():
    """The harness's default arm sets nothing, so C2 judges the engine's own runner routing. Render level (the
    serve's env from render/plan.py, the one source); tests/test_gate_engine.py runs the battery on the CPU serve."""
    from appliance.gate.battery.prepare import battery_run, serve_of
    from appliance.render.plan import build_plan, engine_env, plan_facts

    auto = load_profile("cpu-smoke", cli_overrides=["engine.runner=auto"]).profile
    assert "VLLM_USE_V2_MODEL_RUNNER" not in build_plan(auto).env
    run = battery_run("seed", "default", auto, params_for(auto), None, None)
    assert run.arm_sets == () and "differs" not in serve_of(run) and "engine.runner=auto" in serve_of(run)
    shipped = load_profile("cpu-smoke").profile  # runner v1 as it ships: the serve sets the switch, the receipt says
    run = battery_run("seed", "default", shipped, params_for(shipped), None, None)
    assert run.arm_sets == ("VLLM_USE_V2_MODEL_RUNNER=0",)
    assert "renders VLLM_USE_V2_MODEL_RUNNER=0" in serve_of(run) and "--set engine.runner=auto" in serve_of(run)
    # on GB10 the fork's SM120 switches are rendered too (at its own default, on), and named
    gb10 = load_profile("gb10-tp2", cli_overrides=["engine.runner=auto"]).profile
    assert "VLLM_USE_V2_MODEL_RUNNER" not in engine_env(gb10, plan_facts(gb10))
    sets = battery_run("seed", "default", gb10, params_for(gb10), None, None).arm_sets
    assert sets and all(s.startswith("VLLM_DEEPSEEK_V4_FLASHINFER_SM120_") for s in sets)
    assert battery_run("seed", "v1", load_profile("cpu-smoke").profile, params_for(shipped), None, None).arm_sets == ()


def test_c8_runs_lm_eval_with_the_harness_settings_and_the_plain_gate_keeps_its_own(tmp_path):
    """The harness's C8 runs scripts/run_lm_eval.sh with its defaults: 8-shot, num_concurrent 4, max_gen_toks 2048,
    max_retries 10 (jasl/vllm-ds4-sm120-harness). The battery passes the same to lm-eval; `gate` alone does not."""
    from appliance.gate import gsm8k

    gb10 = load_profile("gb10-tp2").profile
    p = battery_params_for(gb10).gsm8k
    assert (p.num_fewshot, p.num_concurrent, p.max_gen_toks, p.max_retries) == (8, 4, 2048, 10)
    ctx = GateContext(url="http://127.0.0.1:8000", model="m", checkpoint=gb10.model.checkpoint, tokenizer=None,
                      profile=gb10, params=params_for(gb10), out_dir=tmp_path, progress=Quiet())
    args = gsm8k.argv("lm_eval", ctx, p, tmp_path / "out")
    model_args = args[args.index("--model_args") + 1].split(",")
    assert {"num_concurrent=4", "max_gen_toks=2048", "max_retries=10"} <= set(model_args)
    assert args[args.index("--num_fewshot") + 1] == "8"
    plain = gsm8k.argv("lm_eval", ctx, params_for(gb10).gsm8k, tmp_path / "out")[args.index("--model_args") + 1]
    assert "num_concurrent=16" in plain and "max_gen_toks" not in plain


def test_c10_benches_the_harness_depths_and_the_receipt_names_each_difference_from_the_harness(tmp_path):
    """The harness's C10 (scripts/run_gb10_llama_benchy_standard.sh): a fresh standard serve at mml 49152, llama-benchy
    at git b220b7c9, depth 8192/16384/32768, --skip-coherence. What the appliance cannot match is recorded."""
    from appliance.gate.battery.checks import C7_DIFFERENCE, c10_differences

    gb10 = load_profile("gb10-tp2").profile
    bench = battery_params_for(gb10).bench
    assert (bench.pp, bench.tg, bench.depth, bench.runs, bench.skip_coherence) == (
        (2048,), (128,), (8192, 16384, 32768), 3, True)

    def diffs(profile) -> list[str]:
        ctx = GateContext(url="http://127.0.0.1:8000", model="m", checkpoint=profile.model.checkpoint,
                          tokenizer=None, profile=profile, params=params_for(profile), out_dir=tmp_path,
                          progress=Quiet())
        return c10_differences(ctx, "0.4.0")

    at_standard = diffs(gb10)
    assert len(at_standard) == 2 and "fresh benchmark-standard serve" in at_standard[0]
    assert "llama-benchy 0.4.0" in at_standard[1] and "b220b7c9" in at_standard[1]
    long = diffs(load_profile("gb10-tp2", cli_overrides=["limits.max_model_len=131072"]).profile)
    assert "serve max_model_len 131072, the harness's bench standard 49152" in long
    assert "issue19_aqua001_request.json" in C7_DIFFERENCE
