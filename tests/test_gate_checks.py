"""Checks run end to end against fake serves (httpx.MockTransport) whose right verdict is known:
the DeepSeek-only reasoning check, recall on a perfect and on a poisoned serve, structured output."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from appliance.gate import reasoning, recall, structured
from appliance.gate.context import GateContext
from appliance.gate.progress import Quiet
from appliance.gate.sizing import params_for
from appliance.profile.loader import load_profile

Handler = Callable[[str, dict], dict | tuple[int, dict]]


def ctx_for(profile: str, handler: Handler, tmp_path: Path) -> GateContext:
    def respond(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        out = handler(request.url.path, body)
        status, payload = out if isinstance(out, tuple) else (200, out)
        return httpx.Response(status, json=payload)

    p = load_profile(profile).profile
    return GateContext(url="http://serve", model="m", checkpoint=p.model.checkpoint, tokenizer=None, profile=p,
                       params=params_for(p), out_dir=tmp_path, progress=Quiet(),
                       transport=httpx.MockTransport(respond))


def chat(content: str | None, **message: object) -> dict:
    return {"choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content, **message}}]}


SHORT, LONG = "17 plus 25", "17 plus 25: 17 + 20 = 37, 37 + 5 = 42, checked twice"


EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def deepseek(leak_effort: str | None = None, reject: str | None = None, tool_markup: bool = False,
             omitted_leaks: bool = False, none_thinks: bool = False, flat_effort: bool = False,
             max_no_think: bool = False, accept_any: bool = False) -> Handler:
    """A DeepSeek-V4-like serve (a test double: the DeepSeek reasoning parser needs the real model): reasoning
    split off, tool calls parsed, `none` not thinking, high reasoning more than low; optionally broken in one way.
    `omitted_leaks` is the seed's K19 failure: with no reasoning field the reasoning, with a bare </think>,
    comes back inside the answer."""
    def handler(path: str, body: dict) -> dict | tuple[int, dict]:
        omitted = "reasoning_effort" not in body and "reasoning" not in body
        effort = body.get("reasoning_effort") or (body.get("reasoning") or {}).get("effort")
        if (reject and effort == reject) or (effort and effort not in EFFORTS and not accept_any):
            return 400, {"error": {"message": f"reasoning effort {effort!r} is not supported"}}
        thought = "" if (effort == "none" and not none_thinks) or (effort == "max" and max_no_think) else (
            LONG if effort in (None, "high", "xhigh", "max") and not flat_effort else SHORT)
        answer = "17 + 25</think>42" if effort == leak_effort and effort else "42"
        if omitted and omitted_leaks:
            thought, answer = "", f"{LONG}</think>42"
        if path == "/v1/responses":
            output = [{"type": "message", "content": [{"type": "output_text", "text": answer}]}]
            if thought:
                output.insert(0, {"type": "reasoning", "content": [{"type": "reasoning_text", "text": thought}]})
            return {"output": output}
        if body.get("tools"):
            if tool_markup:
                return chat('<｜tool▁calls▁begin｜>get_weather{"city": "Paris"}')
            return chat(None, tool_calls=[{"id": "1", "type": "function",
                                           "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}])
        return chat(answer, reasoning=thought or None)
    return handler


def test_reasoning_passes_on_a_healthy_deepseek_serve(tmp_path):
    result = reasoning.run(ctx_for("gb10-tp2", deepseek(), tmp_path))
    assert result.status == "pass", result.summary
    assert result.metrics == {"accepted": 16, "probes": 16, "think_leaks": 0, "effort_problems": 0,
                              "tool_call_parsed": True}
    efforts = ("omitted", "none", "minimal", "low", "medium", "high", "xhigh", "max")
    assert {(r["endpoint"], r["effort"]) for r in result.details["probes"]} == {
        (s, e) for s in ("chat", "responses") for e in efforts}
    assert [(r["endpoint"], r["accepted"]) for r in result.details["unsupported_effort"]] == [
        ("chat", False), ("responses", False)]


def test_reasoning_fails_on_a_bare_think_rejected_effort_or_unparsed_tool_call(tmp_path):
    leak = reasoning.run(ctx_for("gb10-tp2", deepseek(leak_effort="high"), tmp_path))
    assert leak.status == "fail" and "think markup in chat:high, responses:high" in leak.summary
    rejected = reasoning.run(ctx_for("gb10-tp2", deepseek(reject="max"), tmp_path))
    assert rejected.status == "fail" and "rejected: chat:max, responses:max" in rejected.summary
    # The seed's tests: `max` survives "without thinking being switched off on the way", and the widened field
    # "still rejects a value the model has no tier for".
    no_think = reasoning.run(ctx_for("gb10-tp2", deepseek(max_no_think=True), tmp_path))
    assert no_think.status == "fail" and "chat: effort max did not think" in no_think.summary
    loose = reasoning.run(ctx_for("gb10-tp2", deepseek(accept_any=True), tmp_path))
    assert loose.status == "fail" and "the unsupported effort 'extreme' was accepted" in loose.summary
    markup = reasoning.run(ctx_for("gb10-tp2", deepseek(tool_markup=True), tmp_path))
    assert markup.status == "fail" and "tool call NOT parsed" in markup.summary


def test_reasoning_is_not_applicable_without_a_reasoning_parser(tmp_path):
    result = reasoning.run(ctx_for("cpu-smoke", deepseek(), tmp_path))
    assert result.status == "not_applicable" and "reasoning parser" in result.summary


def recaller(poisoned: set[int]) -> Handler:
    """Answers every secret code in the prompt, except for requests whose index is poisoned."""
    seen: list[str] = []

    def handler(path: str, body: dict) -> dict:
        if path == "/tokenize":
            return {"count": len(body["prompt"]) // 4}
        prompt = body["messages"][0]["content"]
        seen.append(prompt)
        pairs = re.findall(r"The secret code of (\w+) is (\d{6})\.", prompt)
        bad = (len(seen) - 1) in poisoned
        return chat("\n".join(f"{name}: {'000000' if bad else code}" for name, code in pairs))
    return handler


def test_recall_scores_24_of_24_on_a_perfect_serve_at_c12(tmp_path):
    result = recall.run(ctx_for("gb10-tp2", recaller(set()), tmp_path))
    # 24/24, the healthy band; still one serve of a profile the race can reach: inconclusive, never a pass.
    assert result.status == "inconclusive" and result.metrics["score"] == "24/24"
    assert result.metrics["band"] == "pass" and "single clean serve proves nothing" in result.summary
    assert result.params["concurrency"] == 12 and result.metrics["context_tokens"] <= 36864
    assert "131072" in result.params["bands_calibrated_on"]
    # Without speculative decoding no hash is published before its KV is written: one serve can pass.
    nospec = recall.run(ctx_for("gb10-tp2-nospec", recaller(set()), tmp_path))
    assert nospec.status == "pass" and nospec.metrics["band"] == "pass"


def test_recall_fails_a_poisoned_serve_in_the_poisoned_band(tmp_path):
    result = recall.run(ctx_for("gb10-tp2", recaller(set(range(6))), tmp_path))
    assert result.status == "fail" and result.metrics["score"] == "12/24" and result.metrics["wrong"] == 12
    assert "poisoned band" in result.summary


def test_recall_records_a_serve_error_as_an_error(tmp_path):
    def handler(path: str, body: dict) -> tuple[int, dict]:
        return 500, {"error": {"message": "EngineDeadError"}}

    result = recall.run(ctx_for("cpu-smoke", handler, tmp_path))
    assert result.status == "error" and "EngineDeadError" in result.summary


def test_structured_fails_when_one_sampled_reply_breaks_the_schema(tmp_path):
    replies = iter(['{"name": "Ada", "age": 36, "colour": "red"}', '{"name": "Bo", "age": 7, "colour": "red"}',
                    '{"name": "Cy", "age": 1, "colour": "red"}', '{"name": "Di", "age": 2, "colour": "re'])

    def handler(path: str, body: dict) -> dict:
        assert body["temperature"] > 0 and body["response_format"]["type"] == "json_schema"
        return chat(next(replies))

    result = structured.run(ctx_for("cpu-smoke", handler, tmp_path))
    assert result.status == "fail" and result.metrics == {"valid": 3, "total": 4}
    assert "not JSON" in result.summary


def test_the_bench_corpus_server_shows_llama_benchy_the_book_and_nothing_beside_it(tmp_path: Path):
    from dataclasses import replace

    from appliance.gate.bench import corpus

    mine = tmp_path / "my texts"
    mine.mkdir()
    (mine / "book #1.txt").write_text("a book of my own\n")
    (mine / "private.txt").write_text("not for the benchmark\n")
    base = params_for(load_profile("cpu-smoke").profile).bench
    with corpus(replace(base, corpus=str(mine / "book #1.txt"))) as (url, env, about):
        assert url and httpx.get(url, trust_env=False).text == "a book of my own\n"
        root = url.rsplit("/", 1)[0]
        assert "private" not in httpx.get(f"{root}/", trust_env=False).text
        assert httpx.get(f"{root}/private.txt", trust_env=False).status_code == 404
        assert about == {"corpus": str(mine / "book #1.txt")} and env["HOME"] != str(Path.home())
    with corpus(base) as (url, _, about):
        assert url and len(httpx.get(url, trust_env=False).text) > 100_000 and "builtin" in about["corpus"]
