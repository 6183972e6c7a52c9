"""K19 detectors on crafted replies: `</think>` in answer text, tool calls parsed, both API surfaces."""

from __future__ import annotations

import json

from appliance.gate.client import Reply
from appliance.gate.reasoning import judge_effort, parse_tool_calls, responses_text, think_leaks


def chat(content: str | None, tool_calls: list | None = None, reasoning: str | None = None) -> dict:
    message: dict[str, object] = {"role": "assistant", "content": content, "reasoning": reasoning}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def call(name: str, arguments: object) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_clean_answer_has_no_think_leak():
    assert think_leaks("42") == []
    assert think_leaks("We think it is 42.") == []


def test_bare_closing_think_in_answer_is_a_leak():
    leaks = think_leaks("Let me add 17 and 25.</think>42")
    assert len(leaks) == 1 and leaks[0].startswith("bare </think>")


def test_a_whole_unparsed_think_block_is_reported_twice_and_case_does_not_hide_it():
    assert len(think_leaks("<think>17+25</think>42")) == 2
    assert think_leaks("</THINK>42")[0].startswith("bare </think>")


def test_tool_call_with_json_arguments_is_parsed():
    parsed = parse_tool_calls(chat(None, [call("get_weather", json.dumps({"city": "Paris"}))]))
    assert parsed.problems == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [("get_weather", {"city": "Paris"})]


def test_tool_call_left_as_markup_in_content_is_not_parsed():
    parsed = parse_tool_calls(chat('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather{"city":"Paris"}'))
    assert parsed.calls == []
    assert any("markup left unparsed" in p for p in parsed.problems)


def test_tool_call_arguments_that_are_not_json_are_a_problem():
    parsed = parse_tool_calls(chat(None, [call("get_weather", "{city: Paris")]))
    assert parsed.calls == [] and "not JSON" in parsed.problems[0]
    parsed = parse_tool_calls(chat(None, [call("get_weather", "[1, 2]")]))
    assert "not a JSON object" in parsed.problems[0]


def test_reply_without_tool_call_says_so():
    assert parse_tool_calls(chat("It is sunny in Paris.")).problems == ["no tool call in the reply"]
    assert parse_tool_calls({"error": "x"}).problems == ["no choices[0].message in the reply"]


def test_think_leak_next_to_a_parsed_tool_call_is_still_a_problem():
    parsed = parse_tool_calls(chat("ok</think>", [call("get_weather", '{"city": "Paris"}')]))
    assert parsed.calls and any("</think>" in p for p in parsed.problems)


def test_responses_output_text_and_reasoning_are_kept_apart():
    body = {"output": [
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "17+25=42"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42"}]},
    ]}
    assert responses_text(body) == ("42", "17+25=42")


def test_effort_rejected_by_the_server_is_not_accepted():
    row = judge_effort("responses", "max", Reply(400, {"error": {"message": "invalid effort 'max'"}}), None)
    assert row["accepted"] is False and "invalid effort" in row["problems"][0]


def test_effort_accepted_with_a_leak_in_the_answer_is_reported():
    row = judge_effort("chat", "high", Reply(200, chat("17 plus 25</think>42", reasoning="17+25")), None)
    assert row["accepted"] is True and row["problems"][0].startswith("bare </think>")
    clean = judge_effort("chat", "none", Reply(200, chat("42")), None)
    assert clean["accepted"] is True and clean["problems"] == []
