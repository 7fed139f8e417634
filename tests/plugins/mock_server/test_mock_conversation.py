"""The scripted-conversation mode answers like a model in a short agent session."""

from __future__ import annotations

import json
from typing import Any

from dsh.sse import parse_sse
from dsh_plugins.mock_server import SCENARIOS, Scenario, sample_arguments, thinking_enabled


def answer(**body: Any) -> dict[str, Any]:
    """The folded message of the scripted answer to ``body``."""
    body.setdefault("model", "deepseek-v4-flash")
    scenario: Scenario = SCENARIOS["scripted"](body)
    message: dict[str, Any] = {"reasoning": "", "content": "", "calls": [], "finish": None}
    for event in parse_sse("".join(scenario.frames).encode()):
        choice = json.loads(event.data)["choices"][0]
        delta = choice["delta"]
        message["reasoning"] += delta.get("reasoning_content") or ""
        message["content"] += delta.get("content") or ""
        message["calls"] += delta.get("tool_calls") or []
        message["finish"] = choice["finish_reason"] or message["finish"]
    return message


WORDS = {
    "type": "function",
    "function": {
        "name": "word_count",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["text", "n"],
        },
    },
}


def test_without_tools_it_answers_quoting_the_user_after_reasoning() -> None:
    message = answer(messages=[{"role": "user", "content": "hello"}])
    assert message["content"] == 'You said: "hello". I am the dsh mock model.'
    assert message["reasoning"] == "The user wrote to me; a short answer will do."
    assert message["finish"] == "stop"


def test_with_thinking_off_there_is_no_reasoning() -> None:
    message = answer(messages=[{"role": "user", "content": "hello"}], thinking={"type": "disabled"})
    assert message["reasoning"] == ""


def test_offered_a_tool_it_calls_it_with_arguments_from_the_schema() -> None:
    messages = [{"role": "user", "content": 'count "a b c" please'}]
    message = answer(messages=messages, tools=[WORDS])
    head = message["calls"][0]
    assert head["function"]["name"] == "word_count"
    assert head["id"].startswith("call_00_")
    arguments = "".join(c["function"]["arguments"] for c in message["calls"])
    assert json.loads(arguments) == {"text": "a b c", "n": 1}
    assert message["finish"] == "tool_calls"
    assert answer(messages=messages, tools=[WORDS])["calls"][0]["id"] == head["id"]


def test_with_tool_results_waiting_it_answers_with_them() -> None:
    messages = [
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "4"},
    ]
    message = answer(messages=messages, tools=[WORDS])
    assert message["content"] == "The tool returned: 3; 4"
    assert message["calls"] == []


def test_user_content_parts_and_a_missing_user_message_are_handled() -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}]
    assert answer(messages=[{"role": "user", "content": parts}])["content"].startswith(
        'You said: "look"'
    )
    assert answer(messages=[{"role": "system", "content": "s"}])["content"].startswith(
        'You said: ""'
    )


def test_sample_arguments_fill_every_required_property() -> None:
    schema = {
        "properties": {
            "s": {"type": "string"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "o": {"type": "object"},
        },
        "required": ["s", "f", "b", "o", "missing"],
    }
    assert sample_arguments(schema, "“quoted”") == {
        "s": "quoted",
        "f": 1,
        "b": True,
        "o": None,
        "missing": None,
    }
    assert sample_arguments({}, "q") == {}


def test_thinking_defaults_follow_the_model() -> None:
    assert thinking_enabled({"model": "deepseek-v4-pro"})
    assert not thinking_enabled({"model": "deepseek-chat"})
    assert thinking_enabled({"model": "deepseek-chat", "thinking": {"type": "enabled"}})
