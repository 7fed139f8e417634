"""LlmRequest → DeepSeek request body, and what actually reaches the server."""

from __future__ import annotations

from typing import Any

from dsh.testing.mockserver import MockServer
from dsh.values._content import Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_deepseek import DeepSeekAdapter
from dsh_plugins.llm_deepseek.request import request_body

from .support import collect

CALL = ToolCall("call_00_abc", "get_date", "{}")
WEATHER = ToolSchema(
    "get_weather",
    "Weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def body_of(request: LlmRequest) -> dict[str, Any]:
    return request_body(request, "deepseek-v4-pro")


def messages_of(*messages: Message, system: str | None = None) -> list[dict[str, Any]]:
    body = body_of(LlmRequest("deepseek-v4-pro", messages, system=system))
    result: list[dict[str, Any]] = body["messages"]
    return result


def test_a_minimal_request_streams_with_usage_and_sends_nothing_unset() -> None:
    body = body_of(LlmRequest("deepseek/deepseek-v4-pro", (Message("user", (Text("hi"),)),)))
    assert body == {
        "model": "deepseek-v4-pro",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_sampling_options_are_passed_through() -> None:
    request = LlmRequest(
        "m", (Message("user", (Text("q"),)),), temperature=0.2, max_tokens=99, stop=("##",)
    )
    body = body_of(request)
    assert (body["temperature"], body["max_tokens"], body["stop"]) == (0.2, 99, ["##"])


def test_thinking_is_sent_explicitly_whenever_set() -> None:
    user = (Message("user", (Text("q"),)),)
    assert body_of(LlmRequest("m", user, thinking=True))["thinking"] == {"type": "enabled"}
    assert body_of(LlmRequest("m", user, thinking=False))["thinking"] == {"type": "disabled"}


def test_reasoning_effort_is_sent_unless_thinking_is_off() -> None:
    user = (Message("user", (Text("q"),)),)
    assert body_of(LlmRequest("m", user, reasoning_effort="max"))["reasoning_effort"] == "max"
    on = body_of(LlmRequest("m", user, reasoning_effort="high", thinking=True))
    assert on["reasoning_effort"] == "high"
    off = body_of(LlmRequest("m", user, reasoning_effort="max", thinking=False))
    assert "reasoning_effort" not in off


def test_the_system_prompt_and_system_messages_become_system_messages() -> None:
    messages = messages_of(
        Message("system", (Text("be brief"), Text("be kind"))),
        Message("user", (Text("q"),)),
        system="You are dsh.",
    )
    assert messages == [
        {"role": "system", "content": "You are dsh."},
        {"role": "system", "content": "be brief\nbe kind"},
        {"role": "user", "content": "q"},
    ]


def test_user_text_blocks_are_joined_and_images_make_a_parts_array() -> None:
    text_only = messages_of(Message("user", (Text("a"), Text("b"))))
    assert text_only == [{"role": "user", "content": "a\nb"}]
    with_image = messages_of(
        Message("user", (Text("what is this?"), Image("data:image/png;base64,AAAA", "image/png")))
    )
    assert with_image == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        }
    ]


def test_assistant_turns_carry_text_reasoning_verbatim_and_tool_calls() -> None:
    reasoned = Message(
        "assistant", (Reasoning("I need "), Reasoning("the date."), Text("Ok."), CALL)
    )
    assert messages_of(reasoned) == [
        {
            "role": "assistant",
            "content": "Ok.",
            "reasoning_content": "I need the date.",
            "tool_calls": [
                {
                    "id": "call_00_abc",
                    "type": "function",
                    "function": {"name": "get_date", "arguments": "{}"},
                }
            ],
        }
    ]


def test_reasoning_is_passed_back_on_every_reasoned_turn_even_without_tools() -> None:
    history = (
        Message("user", (Text("q1"),)),
        Message("assistant", (Reasoning("r1"), Text("a1"))),
        Message("user", (Text("q2"),)),
        Message("assistant", (Text("a2"),)),
        Message("user", (Text("q3"),)),
    )
    assistants = [m for m in messages_of(*history) if m["role"] == "assistant"]
    assert assistants == [
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "assistant", "content": "a2"},
    ]


def test_tool_results_become_tool_messages_in_order_with_user_text_kept_around_them() -> None:
    results = Message(
        "user",
        (
            Text("before"),
            ToolResult("call_1", (Text("one"),)),
            ToolResult("call_2", ()),
            ToolResult("call_3", (Text("line"), Image("http://x/y.png"))),
            Text("after"),
        ),
    )
    assert messages_of(results) == [
        {"role": "user", "content": "before"},
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {"role": "tool", "tool_call_id": "call_2", "content": "(no output)"},
        {"role": "tool", "tool_call_id": "call_3", "content": "line\n[image: unknown type]"},
        {"role": "user", "content": "after"},
    ]


def test_blocks_a_role_cannot_carry_are_dropped() -> None:
    assert messages_of(Message("user", (Reasoning("r"), CALL, Text("q")))) == [
        {"role": "user", "content": "q"}
    ]


def test_tools_are_functions_and_strict_ones_make_every_function_strict() -> None:
    plain = body_of(LlmRequest("m", (), tools=(WEATHER,)))
    assert plain["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    strict = ToolSchema("s", "strict one", strict=True)
    tools = body_of(LlmRequest("m", (), tools=(WEATHER, strict)))["tools"]
    assert [t["function"]["strict"] for t in tools] == [True, True]


async def test_strict_tools_go_to_the_beta_base_url(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    request = LlmRequest(
        "deepseek-v4-flash",
        (Message("user", (Text("q"),)),),
        tools=(ToolSchema("s", "d", strict=True),),
    )
    mock_server.queue("text-v4")
    await collect(adapter, request)
    mock_server.queue("text-v4")
    await collect(adapter)
    assert [r.path for r in mock_server.requests] == ["/beta/chat/completions", "/chat/completions"]


async def test_the_server_receives_the_key_the_model_name_and_sse_accept(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("text")
    request = LlmRequest("deepseek/deepseek-v4-pro", (Message("user", (Text("q"),)),))
    await collect(adapter, request)
    (received,) = mock_server.requests
    assert received.headers["Authorization"] == "Bearer k"
    assert received.headers["Accept"] == "text/event-stream"
    assert received.body["model"] == "deepseek-v4-pro"
