"""The scripted-conversation mode answers like a model in a short agent session."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver import SCENARIOS, Scenario, sample_arguments, thinking_enabled
from dsh.testing.mockserver.conversation import choose_tool, in_thinking_mode


def answer(**body: Any) -> dict[str, Any]:
    """The folded message of the scripted answer to ``body``."""
    body.setdefault("model", "deepseek-v4-flash")
    return fold(SCENARIOS["scripted"](body))


def fold(scenario: Scenario) -> dict[str, Any]:
    """A streamed answer's reasoning, content, tool-call deltas and finish reason."""
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


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name}} for name in names]


def called(question: str, *names: str) -> str:
    message = answer(messages=[{"role": "user", "content": question}], tools=tools(*names))
    return str(message["calls"][0]["function"]["name"])


def test_it_calls_the_tool_the_prompt_names() -> None:
    offered = ("shell", "read_file", "write_file", "list_dir")
    assert called("use the shell to count files", *offered) == "shell"
    assert called("please write_file notes.txt", *offered) == "write_file"
    assert called("Write file notes.txt", *offered) == "write_file"  # spaces for underscores
    assert called("read file x; read is fine too", "read", "read_file") == "read_file"  # longest
    assert called("the myshell thing", "shell", "list_dir") == "list_dir"  # a word's start only
    assert called("How many words are in it?", "read_file", "word_count") == "word_count"
    assert called("copy it, then shell out", "shell", "copy_dir", "dir_list") == "shell"


def test_otherwise_it_calls_a_read_only_tool_not_the_first() -> None:
    assert called("Summarise README.md", "shell", "write_file", "read_file", "grep") == "read_file"
    assert called("what is here?", "edit_file", "glob") == "glob"
    needs_path = {"name": "read_file", "parameters": {"required": ["path"]}}
    optional = {"name": "list_dir", "parameters": {"properties": {"path": {"type": "string"}}}}
    offered = [{"type": "function", "function": f} for f in (needs_path, optional)]
    assert choose_tool(offered, "hello") == optional  # the fewest required arguments
    assert called("hello", "shell", "echo") == "shell"  # nothing looks read-only: the first


def test_choose_tool_is_what_the_scripted_answer_uses() -> None:
    offered = tools("shell", "list_dir")
    assert choose_tool(offered, "hi") == offered[1]["function"]


def test_tool_loop_reasons_first_in_thinking_mode_only() -> None:
    messages = [{"role": "user", "content": "go"}]
    thinking = fold(SCENARIOS["tool-loop"]({"model": "deepseek-flash", "messages": messages}))
    assert thinking["reasoning"] == "0 tool result(s) so far; 5 wanted."
    assert thinking["calls"][0]["function"]["name"] == "echo"
    off = {"model": "deepseek-flash", "messages": messages, "thinking": {"type": "disabled"}}
    assert fold(SCENARIOS["tool-loop"](off))["reasoning"] == ""
    done = [*messages, {"role": "tool", "tool_call_id": "c", "content": "x"}]
    last = fold(SCENARIOS["tool-loop"]({"model": "m", "messages": done}, steps=1))
    assert last["reasoning"] == "1 tool result(s) so far; 1 wanted."
    assert last["content"] == "finished after 1 steps"
    assert fold(SCENARIOS["tool-loop"]({}))["reasoning"] == ""  # no conversation: no thinking


# -- transcripts without reasoning, served in thinking mode ----------------------------------


def test_a_tool_transcript_without_reasoning_gets_an_empty_reasoning_field_in_thinking_mode() -> (
    None
):
    """``tool-calls-parallel`` (a V3 transcript) answered to a thinking-mode request: the
    first delta carries ``reasoning_content: ""``, as V4 sends it, so a client can pass the
    turn back (the mock refuses a thinking-mode tool turn without the field)."""
    plain = SCENARIOS["tool-calls-parallel"]({})
    served = in_thinking_mode(plain)
    [first] = [f for f in served.frames if f.startswith("data: {")][:1]
    assert json.loads(first[6:])["choices"][0]["delta"]["reasoning_content"] == ""
    assert served.frames[1:] == plain.frames[1:]


@pytest.mark.parametrize(
    "scenario",
    [
        SCENARIOS["tool-call-thinking"]({}),  # reasons already
        SCENARIOS["text-v4"]({}),  # calls no tool
        SCENARIOS["rate-limit"]({}),  # not a stream
        Scenario("odd", (": comment\n\n", "data: {broken\n\n", 'data: {"tool_calls": 1}\n\n')),
    ],
    ids=["reasoning", "no-tools", "http-error", "no-delta"],
)
def test_other_answers_are_served_as_they_are(scenario: Scenario) -> None:
    assert in_thinking_mode(scenario) == scenario
