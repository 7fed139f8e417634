"""LlmRequest → the Messages API body: system, max_tokens, thinking, turns, tool pairing,
signatures passed back, images."""

from __future__ import annotations

import pytest

from dsh.values._content import Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._errors import LlmError
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_anthropic.request import request_body, wire_messages

USER = Message("user", (Text("hi"),))


def body(**fields: object) -> dict[str, object]:
    request = LlmRequest("deepseek-anthropic/deepseek-flash", **{"messages": (USER,), **fields})  # type: ignore[arg-type]
    return request_body(request, "deepseek-flash", max_tokens=8000, budget_tokens=2048)


def test_a_plain_request() -> None:
    assert body() == {
        "model": "deepseek-flash",
        "max_tokens": 8000,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_system_prompts_are_the_top_level_system() -> None:
    history = (Message("system", (Text("Be brief."),)), USER, Message("system", (Text(""),)))
    sent = body(system="You are dsh.", messages=history)
    assert sent["system"] == "You are dsh.\n\nBe brief."
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


@pytest.mark.parametrize(
    ("thinking", "sent"),
    [
        (True, {"type": "enabled", "budget_tokens": 2048}),
        (False, {"type": "disabled"}),
        (None, None),
    ],
)
def test_thinking_is_sent_when_the_request_sets_it(thinking: bool | None, sent: object) -> None:
    assert body(thinking=thinking).get("thinking") == sent


def test_the_budget_stays_below_max_tokens() -> None:
    sent = body(thinking=True, max_tokens=1500)
    assert sent["max_tokens"] == 1500
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1499}


def test_a_provider_that_ignores_the_budget_gets_it_unchecked() -> None:
    """DeepSeek's Messages endpoint ignores ``budget_tokens``: a request Anthropic would refuse
    (max_tokens under 1024 with thinking on) is sent, with the configured budget."""
    request = LlmRequest(
        "deepseek-anthropic/deepseek-flash", (USER,), thinking=True, max_tokens=1000
    )
    sent = request_body(request, "deepseek-flash", 8000, 2048, checks_budget=False)
    assert (sent["max_tokens"], sent["thinking"]) == (
        1000,
        {"type": "enabled", "budget_tokens": 2048},
    )


def test_max_tokens_too_small_for_thinking_is_refused_before_sending() -> None:
    with pytest.raises(LlmError) as raised:
        body(thinking=True, max_tokens=1024)
    assert raised.value.failure.code == "INVALID_REQUEST"
    assert "raise max_tokens or turn thinking off" in raised.value.failure.message


def test_tools_temperature_and_stop_sequences() -> None:
    schema = ToolSchema("read", "Read a file.", {"type": "object", "properties": {}})
    sent = body(tools=(schema,), temperature=0.2, stop=("END",))
    assert sent["tools"] == [
        {
            "name": "read",
            "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]
    assert sent["temperature"] == 0.2
    assert sent["stop_sequences"] == ["END"]
    assert "tool_choice" not in sent


def test_a_tool_round_passes_thinking_back_with_its_signature() -> None:
    history = (
        USER,
        Message(
            "assistant",
            (
                Reasoning("I should look.", "sig-1"),
                Text("Looking."),
                ToolCall("toolu_1", "read", '{"path": "a"}'),
                ToolCall("toolu_2", "read", "not json"),
                ToolCall("toolu_3", "read", "[1]"),
            ),
        ),
        Message(
            "user",
            (
                Text("also this"),
                ToolResult("toolu_1", (Text("contents"),)),
                ToolResult("toolu_2", (Text("bad arguments"),), is_error=True),
                ToolResult("toolu_3", ()),
            ),
        ),
    )
    assert wire_messages(history)[1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should look.", "signature": "sig-1"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}},
                {"type": "tool_use", "id": "toolu_3", "name": "read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "contents"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "bad arguments"}],
                    "is_error": True,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_3",
                    "content": [{"type": "text", "text": "(no output)"}],
                },
                {"type": "text", "text": "also this"},
            ],
        },
    ]


def test_redacted_thinking_goes_back_as_it_came_and_unsigned_reasoning_not_at_all() -> None:
    turn = Message(
        "assistant",
        (Reasoning("", "ENC", redacted=True), Reasoning("from another provider"), Text("ok")),
    )
    assert wire_messages((USER, turn))[1]["content"] == [
        {"type": "redacted_thinking", "data": "ENC"},
        {"type": "text", "text": "ok"},
    ]


def test_thinking_with_an_empty_signature_goes_back_unchanged() -> None:
    """A gateway's synthesised thinking block (``"signature": ""``) must come back with the
    tool use, or the gateway cannot rebuild the upstream's reasoning and the step is refused."""
    turn = Message("assistant", (Reasoning("0 results so far", ""), ToolCall("c", "f", "{}")))
    assert wire_messages((USER, turn))[1]["content"] == [
        {"type": "thinking", "thinking": "0 results so far", "signature": ""},
        {"type": "tool_use", "id": "c", "name": "f", "input": {}},
    ]


def test_consecutive_turns_of_one_role_merge_with_tool_results_first() -> None:
    history = (
        USER,
        Message("assistant", (ToolCall("t", "f", "{}"),)),
        Message("user", (ToolResult("t", (Text("done"),)),)),
        Message("user", (Text("and then?"),)),
        Message("assistant", (Reasoning("unsigned"),)),
        Message("user", (Text("still there?"),)),
    )
    wire = wire_messages(history)
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [block["type"] for block in wire[2]["content"]] == ["tool_result", "text", "text"]


def test_images_by_data_url_and_by_url() -> None:
    message = Message(
        "user",
        (
            Image("data:image/png;base64,iVBORw0KGgo="),
            Image("data:image/jpeg;base64,/9j/", mime_type="image/jpeg"),
            Image("https://example.com/cat.png"),
            Image("data:text/plain,not-base64"),
        ),
    )
    assert wire_messages((message,))[0]["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "url", "url": "data:text/plain,not-base64"}},
    ]


def test_a_tool_result_may_carry_an_image() -> None:
    result = ToolResult("t", (Image("https://example.com/plot.png"), Text("")))
    history = (
        USER,
        Message("assistant", (ToolCall("t", "plot", "{}"),)),
        Message("user", (result,)),
    )
    assert wire_messages(history)[2]["content"][0]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/plot.png"}}
    ]
