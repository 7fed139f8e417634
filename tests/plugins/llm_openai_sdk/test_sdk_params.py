"""LlmRequest → the SDK's typed parameters of ``chat.completions.create``, and the body that
reaches the server through the SDK: reasoning passback (point 1), strict closure (point 7) and
JSON output mode among them."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from dsh.testing.mockserver import MockServer
from dsh.values._content import Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter
from dsh_plugins.llm_openai_sdk.request import create_params

from .support import MODEL, collect

CALL = ToolCall("call_00_abc", "get_date", "{}")
WEATHER = ToolSchema(
    "get_weather",
    "Weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
STRICT_WEATHER = attrs.evolve(WEATHER, strict=True)
USER = (Message("user", (Text("q"),)),)


def arguments_of(request: LlmRequest) -> dict[str, Any]:
    return create_params(request, "deepseek-v4-pro")


def messages_of(*messages: Message, system: str | None = None) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = arguments_of(LlmRequest(MODEL, messages, system=system))[
        "messages"
    ]
    return wire


def test_a_minimal_request_streams_with_usage_and_sets_nothing_else() -> None:
    assert arguments_of(LlmRequest(MODEL, USER)) == {
        "model": "deepseek-v4-pro",
        "messages": [{"role": "user", "content": "q"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_sampling_options_are_passed_when_set() -> None:
    request = LlmRequest(MODEL, USER, temperature=0.0, max_tokens=99, stop=("##",))
    arguments = arguments_of(request)
    assert (arguments["temperature"], arguments["max_tokens"], arguments["stop"]) == (
        0.0,
        99,
        ["##"],
    )


def test_thinking_and_effort_travel_in_extra_body() -> None:
    on = arguments_of(LlmRequest(MODEL, USER, thinking=True, reasoning_effort="max"))
    assert on["extra_body"] == {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}
    off = arguments_of(LlmRequest(MODEL, USER, thinking=False, reasoning_effort="max"))
    assert off["extra_body"] == {"thinking": {"type": "disabled"}}
    default = arguments_of(LlmRequest(MODEL, USER, reasoning_effort="high"))
    assert default["extra_body"] == {"reasoning_effort": "high"}


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


def test_user_text_is_joined_and_images_make_content_parts() -> None:
    assert messages_of(Message("user", (Text("a"), Text("b")))) == [
        {"role": "user", "content": "a\nb"}
    ]
    with_image = messages_of(Message("user", (Text("look"), Image("data:image/png;base64,x"))))
    assert with_image == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,x"}},
            ],
        }
    ]


def test_an_assistant_turn_passes_reasoning_back_and_never_sends_null_content() -> None:
    turn = Message("assistant", (Reasoning("think"), Reasoning(" more"), CALL))
    assert messages_of(turn) == [
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "think more",
            "tool_calls": [
                {
                    "id": "call_00_abc",
                    "type": "function",
                    "function": {"name": "get_date", "arguments": "{}"},
                }
            ],
        }
    ]
    plain = messages_of(Message("assistant", (Text("a"), Text("b"))))
    assert plain == [{"role": "assistant", "content": "ab"}]


def test_tool_results_answer_their_calls_in_order_between_user_content() -> None:
    blocks = (
        Text("before"),
        ToolResult("call_1", (Text("one"),)),
        ToolResult("call_2", (Text("a"), Image("http://x/y.png", "image/png"), Text(""))),
        ToolResult("call_3", ()),
        Reasoning("ignored in a user turn"),
        Text("after"),
    )
    assert messages_of(Message("user", blocks)) == [
        {"role": "user", "content": "before"},
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {"role": "tool", "tool_call_id": "call_2", "content": "a\n[image: image/png]"},
        {"role": "tool", "tool_call_id": "call_3", "content": "(no output)"},
        {"role": "user", "content": "after"},
    ]
    unnamed = messages_of(Message("user", (ToolResult("c", (Image("http://x"),)), Reasoning("r"))))
    assert unnamed == [{"role": "tool", "tool_call_id": "c", "content": "[image: unknown type]"}]


def test_strict_tools_make_every_function_strict_and_closed() -> None:
    loose = ToolSchema("echo", "Echo.")
    plain = arguments_of(LlmRequest(MODEL, USER, tools=(WEATHER,)))
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
    strict = arguments_of(LlmRequest(MODEL, USER, tools=(STRICT_WEATHER, loose)))
    assert [tool["function"]["strict"] for tool in strict["tools"]] == [True, True]
    assert strict["tools"][1]["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


async def test_the_sdk_sends_exactly_these_arguments_and_strict_tools_go_to_beta(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    history = (
        Message("user", (Text("weather?"),)),
        Message("assistant", (Reasoning("call it"), CALL)),
        Message("user", (ToolResult(CALL.id, (Text("Monday"),)),)),
    )
    request = LlmRequest(MODEL, history, tools=(WEATHER,), thinking=True, max_tokens=50)
    mock_server.queue("text", "text")
    await collect(adapter, request)
    strict_request = LlmRequest(MODEL, history[:1], tools=(STRICT_WEATHER,))
    await collect(adapter, strict_request)
    first, second = mock_server.requests
    expected = create_params(request, "deepseek-flash")  # the alias is sent as today's name
    expected.update(expected.pop("extra_body"))
    assert (first.path, first.body) == ("/chat/completions", expected)
    assert second.path == "/beta/chat/completions"
    assert second.body["tools"][0]["function"]["strict"] is True


TOOL_TURN = Message("assistant", (CALL,))
TEXT_TURN = Message("assistant", (Text("hello"),))


def test_point1_every_tool_call_turn_passes_reasoning_back_unless_thinking_is_off() -> None:
    """The API rejects a thinking-mode history whose tool-calling turn lacks
    ``reasoning_content``: ``""`` goes back when the turn streamed none."""
    for thinking in (True, None):
        request = LlmRequest(MODEL, (*USER, TOOL_TURN, TEXT_TURN), thinking=thinking)
        tool_turn, text_turn = arguments_of(request)["messages"][1:]
        assert tool_turn["reasoning_content"] == ""
        assert "reasoning_content" not in text_turn
    off = arguments_of(LlmRequest(MODEL, (*USER, TOOL_TURN), thinking=False))["messages"][1]
    assert "reasoning_content" not in off
    reasoned = Message("assistant", (Reasoning("why"), Text("so")))
    kept = arguments_of(LlmRequest(MODEL, (*USER, reasoned), thinking=False))["messages"][1]
    assert kept["reasoning_content"] == "why"


def closed_parameters(schema: dict[str, Any]) -> Any:
    tool = ToolSchema("t", "T.", schema, strict=True)
    return arguments_of(LlmRequest(MODEL, USER, tools=(tool,)))["tools"][0]["function"][
        "parameters"
    ]


def test_point7_strict_schemas_are_closed_at_every_depth_and_never_modified() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "where": {
                "type": ["object", "null"],
                "properties": {"lat": {"type": "number"}},
                "additionalProperties": {"type": "string"},
            },
            "tags": {"type": "array", "items": {"properties": {"k": {"type": "string"}}}},
            "pair": {"prefixItems": [{"type": "object"}, True], "items": [{"type": "object"}]},
            "either": {"anyOf": [{"type": "object"}, {"type": "string"}]},
            "never": {"not": {"type": "object"}},
        },
        "$defs": {"Unit": {"type": "object", "properties": {"u": {}}}},
        "definitions": "not a mapping",
        "required": ["city"],
    }
    before = repr(schema)
    closed = closed_parameters(schema)
    assert repr(schema) == before
    assert closed["required"] == ["city", "where", "tags", "pair", "either", "never"]
    assert closed["additionalProperties"] is False
    where = closed["properties"]["where"]
    assert (where["required"], where["additionalProperties"]) == (["lat"], False)
    item = closed["properties"]["tags"]["items"]
    assert (item["required"], item["additionalProperties"]) == (["k"], False)
    pair = closed["properties"]["pair"]
    empty = {"type": "object", "required": [], "additionalProperties": False}
    assert pair == {"prefixItems": [empty, True], "items": [empty]}
    assert closed["properties"]["either"]["anyOf"] == [empty, {"type": "string"}]
    assert closed["properties"]["never"] == {"not": empty}
    assert closed["$defs"]["Unit"]["required"] == ["u"]
    assert closed["definitions"] == "not a mapping"
    assert closed["properties"]["city"] == {"type": "string"}


def test_strict_closure_matches_the_hand_rolled_adapter_body_for_body() -> None:
    """The kit compares the two adapters' bodies: the same policy, two implementations."""
    from dsh_plugins.llm_deepseek.request import request_body

    schema = {"type": "object", "properties": {"a": {"properties": {"b": {"items": {}}}}}}
    tools = (ToolSchema("t", "T.", schema, strict=True), WEATHER)
    request = LlmRequest(MODEL, (*USER, TOOL_TURN), tools=tools, response_format="json_object")
    ours = arguments_of(request)
    theirs = request_body(request, "deepseek-v4-pro")
    assert (ours["tools"], ours["messages"]) == (theirs["tools"], theirs["messages"])


def test_json_output_mode_is_the_typed_response_format() -> None:
    json_mode = arguments_of(LlmRequest(MODEL, USER, response_format="json_object"))
    assert json_mode["response_format"] == {"type": "json_object"}
    text = arguments_of(LlmRequest(MODEL, USER, response_format="text"))
    assert text["response_format"] == {"type": "text"}
    assert "response_format" not in arguments_of(LlmRequest(MODEL, USER))


async def test_json_output_mode_reaches_the_server(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("text")
    await collect(
        adapter,
        LlmRequest(
            MODEL, (Message("user", (Text("json please"),)),), response_format="json_object"
        ),
    )
    assert mock_server.requests[0].body["response_format"] == {"type": "json_object"}


KEYWORDS = st.sampled_from(
    ["type", "properties", "items", "prefixItems", "anyOf", "not", "$defs", "required", "x"]
)
SCHEMAS = st.recursive(
    st.none() | st.booleans() | st.sampled_from(["object", "string", ["object", "null"]]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(KEYWORDS | st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(SCHEMAS)
def test_point7_the_closure_is_the_hand_rolled_adapter_s_on_any_schema(schema: Any) -> None:
    from dsh_plugins.llm_deepseek.strict import close_schema
    from dsh_plugins.llm_openai_sdk.closure import closed

    assert closed(schema) == close_schema(schema)
