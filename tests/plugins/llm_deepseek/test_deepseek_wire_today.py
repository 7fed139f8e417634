"""The DeepSeek API as it is today (issue 12, points 1-5, 7, 8): reasoning passback on tool-call
turns, queued requests, the trace id, HTTP 200 answers that are not a stream, finish reasons,
strict tools, and the framing only proxies send."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from dsh.testing.conformance import STRICT_TOOLS
from dsh.testing.mockserver import SCENARIOS, MockServer, Scenario
from dsh.testing.mockserver.faults import HTML_PAGE
from dsh.testing.mockserver.transcripts import PLAIN_FORMS
from dsh.testing.mockserver.validate import REASONING_NOT_PASSED_BACK, validate
from dsh.testing.mockserver.wire import KEEP_ALIVE
from dsh.values._chunks import Finish, FinishError, TextDelta
from dsh.values._content import Message, Reasoning, Text, ToolCall
from dsh.values._errors import LlmError
from dsh.values._events import TurnCompleted
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig
from dsh_plugins.llm_deepseek.failures import (
    error_type_code,
    not_event_stream_failure,
    request_id,
)
from dsh_plugins.llm_deepseek.request import request_body, wire_message
from dsh_plugins.llm_deepseek.stream import finish_reason
from dsh_plugins.llm_deepseek.strict import close_schema

from .conftest import MakeAgent
from .support import HELLO, collect, translate, turn_ends

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CALL = ToolCall("call_1", "echo", "{}")
EMPTY_REASONING_STEP = {"name": "tool-loop", "steps": 1, "reasoning": ""}


def adapter_for(server: MockServer, **options: Any) -> DeepSeekAdapter:
    return DeepSeekAdapter(DeepSeekConfig(base_url=server.url, api_key="k", **options))


async def failure(adapter: DeepSeekAdapter, request: LlmRequest = HELLO) -> LlmError:
    with pytest.raises(LlmError) as caught:
        await collect(adapter, request)
    await adapter.aclose()
    return caught.value


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[RawHandler], Awaitable[str]]]:
    """``await raw_server(handler)``: a bare TCP server on loopback; returns its base URL."""
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


def answering(head: bytes, body: bytes) -> RawHandler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    return handler


# -- 1. reasoning passback -----------------------------------------------------------------------


def assistant_wire(thinking: bool | None, *blocks: Any) -> dict[str, Any]:
    request = LlmRequest("m", (Message("assistant", blocks),), thinking=thinking)
    message: dict[str, Any] = request_body(request, "m")["messages"][0]
    return message


@pytest.mark.parametrize("thinking", [True, None])
def test_passback_a_tool_call_turn_without_reasoning_carries_an_empty_string(
    thinking: bool | None,
) -> None:
    assert assistant_wire(thinking, CALL)["reasoning_content"] == ""
    assert assistant_wire(thinking, Reasoning("I call."), CALL)["reasoning_content"] == "I call."


def test_passback_is_left_out_with_thinking_off_and_on_turns_without_calls() -> None:
    assert "reasoning_content" not in assistant_wire(False, CALL)
    assert "reasoning_content" not in assistant_wire(True, Text("hi"))
    # Reasoning that did stream still goes back verbatim, whatever the mode.
    assert assistant_wire(False, Reasoning("r"), CALL)["reasoning_content"] == "r"


def test_passback_a_memoised_serialiser_keeps_the_two_modes_apart() -> None:
    message = Message("assistant", (CALL,))
    adapter = DeepSeekAdapter(DeepSeekConfig(api_key="k"))
    on = request_body(LlmRequest("m", (message,), thinking=True), "m", adapter._serialize)
    off = request_body(LlmRequest("m", (message,), thinking=False), "m", adapter._serialize)
    assert on["messages"][0]["reasoning_content"] == ""
    assert "reasoning_content" not in off["messages"][0]
    assert wire_message(message) == wire_message(message, True)


def assistants_with_calls(server: MockServer) -> list[dict[str, Any]]:
    return [
        message
        for request in server.requests
        for message in request.body["messages"]
        if message["role"] == "assistant" and message.get("tool_calls")
    ]


@pytest.mark.parametrize("thinking", [True, None])
async def test_passback_an_agent_whose_tool_step_streamed_only_empty_reasoning_completes(
    thinking: bool | None, make_agent: MakeAgent, mock_server: MockServer
) -> None:
    agent = await make_agent(thinking=thinking)
    mock_server.queue(EMPTY_REASONING_STEP)
    agent.send("go")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnCompleted()]
    (called,) = assistants_with_calls(mock_server)
    assert called["reasoning_content"] == ""
    assert ("thinking" in mock_server.requests[-1].body) == (thinking is not None)


async def test_passback_thinking_switched_on_mid_session_sends_earlier_calls_back_with_empty(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    agent = await make_agent(thinking=False)
    mock_server.queue({"name": "tool-loop", "steps": 1})
    agent.send("first, without thinking")
    await agent.wait_idle()
    agent.options = attrs.evolve(agent.options, thinking=True)
    agent.send("now think")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnCompleted(), TurnCompleted()]
    last = mock_server.requests[-1].body
    assert last["thinking"] == {"type": "enabled"}
    (called,) = [m for m in last["messages"] if m.get("tool_calls")]
    assert called["reasoning_content"] == ""


def test_passback_the_mock_rejects_a_missing_one_as_the_api_does() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "r"},
    ]
    models = ("deepseek-v4-pro",)
    for thinking in ({"type": "enabled"}, None):
        body: dict[str, Any] = {"model": "deepseek-v4-pro", "messages": messages}
        body |= {"thinking": thinking} if thinking else {}
        refused = validate(body, beta=False, models=models)
        assert refused is not None
        assert (refused.status, REASONING_NOT_PASSED_BACK in refused.body) == (400, True)
    off = {"model": "deepseek-v4-pro", "messages": messages, "thinking": {"type": "disabled"}}
    assert validate(off, beta=False, models=models) is None


# -- 2. queued requests --------------------------------------------------------------------------


async def test_queued_keep_alives_before_the_first_data_wait_past_the_idle_timeout(
    mock_server: MockServer,
) -> None:
    # Keep-alives 50 ms apart for longer than the idle timeout, which they never come near.
    mock_server.queue({"name": "queued", "wait_s": 0.75, "interval_s": 0.05})
    adapter = adapter_for(mock_server, idle_timeout_s=5.0)
    chunks = await collect(adapter)
    await adapter.aclose()
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Served after the queue."


async def test_queued_too_long_times_out_after_first_data_timeout_s(
    mock_server: MockServer,
) -> None:
    # Keep-alives 50 ms apart forever: only the first-data deadline can end the stream.
    mock_server.queue({"name": "queued-stall", "interval_s": 0.05})
    adapter = adapter_for(mock_server, idle_timeout_s=2.0, first_data_timeout_s=3.0)
    started = time.monotonic()
    error = await failure(adapter)
    assert time.monotonic() - started >= 3.0
    assert error.failure.code == "TIMEOUT"
    assert "no data within 3.0 s: the request stayed queued" in error.failure.message


async def test_queued_silence_before_the_first_data_is_still_a_stall(
    mock_server: MockServer,
) -> None:
    mock_server.queue(Scenario("silent", (KEEP_ALIVE,), ending="stall"))
    # 2 s: the headers come under the same deadline, and a loaded machine may take a while to
    # send them (the stall after them never ends by itself).
    adapter = adapter_for(mock_server, idle_timeout_s=2.0, first_data_timeout_s=30.0)
    started = time.monotonic()
    error = await failure(adapter)
    assert time.monotonic() - started < 20.0  # long before the first-data deadline
    assert error.failure.message == "the stream made no progress for 2.0 s"


async def test_queued_keep_alives_after_data_started_do_not_extend_the_idle_timeout(
    mock_server: MockServer,
) -> None:
    mock_server.queue("keep-alive-stall")
    adapter = adapter_for(mock_server, idle_timeout_s=2.0, first_data_timeout_s=30.0)
    started = time.monotonic()
    error = await failure(adapter)
    assert time.monotonic() - started < 20.0  # long before the first-data deadline
    assert error.failure.message == "the stream made no progress for 2.0 s"


def test_queued_first_data_timeout_defaults_to_the_api_s_ten_minutes() -> None:
    assert DeepSeekConfig().first_data_timeout_s == 600.0


# -- 3. the trace id -----------------------------------------------------------------------------


async def test_trace_id_of_the_mock_becomes_the_request_id(mock_server: MockServer) -> None:
    mock_server.queue("overloaded")
    assert (await failure(adapter_for(mock_server))).failure.request_id == "mock-1"


async def test_trace_id_wins_over_a_gateway_s_request_id(
    raw_server: Callable[[RawHandler], Awaitable[str]],
) -> None:
    head = b"HTTP/1.1 500 Internal Server Error\r\nx-request-id: gw-1\r\nx-ds-trace-id: ds-1\r\n"
    url = await raw_server(answering(head, b"down"))
    error = await failure(DeepSeekAdapter(DeepSeekConfig(base_url=url, api_key="k")))
    assert error.failure.request_id == "ds-1"


def test_trace_id_falls_back_to_the_other_names() -> None:
    assert request_id(CIMultiDict({"X-Request-Id": "gw"})) == "gw"
    assert request_id(CIMultiDict({"x-deepseek-request-id": "d"})) == "d"
    assert request_id(CIMultiDict()) is None


# -- 4. HTTP 200 that is not an event stream -----------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "code", "says"),
    [
        ("json-error-200", "RATE_LIMIT", "DeepSeek answered HTTP 200: Rate Limit Reached"),
        ("completion-200", "MALFORMED_RESPONSE", '{"id":"8c1f2e3d-4b5a-4c6d-9e8f-7a6b5c4d3e2f"'),
        ("html-200", "MALFORMED_RESPONSE", HTML_PAGE[:100]),
        ("empty-200", "MALFORMED_RESPONSE", "application/json; charset=utf-8 body (an empty"),
    ],
)
async def test_not_sse_200_keeps_the_server_s_words(
    scenario: str, code: str, says: str, mock_server: MockServer
) -> None:
    mock_server.queue(scenario)
    error = (await failure(adapter_for(mock_server))).failure
    assert (error.code, error.status, error.request_id) == (code, 200, "mock-1")
    assert says in error.message
    if code == "MALFORMED_RESPONSE":
        assert error.message.startswith("DeepSeek answered HTTP 200 without an event stream: ")


async def test_not_sse_200_a_huge_untyped_body_is_quoted_by_its_start(
    raw_server: Callable[[RawHandler], Awaitable[str]],
) -> None:
    url = await raw_server(answering(b"HTTP/1.1 200 OK\r\n", b"<p>" + b"x" * 100_000))
    error = (await failure(DeepSeekAdapter(DeepSeekConfig(base_url=url, api_key="k")))).failure
    assert error.code == "MALFORMED_RESPONSE"
    assert error.message.endswith("no type body <p>" + "x" * 197)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"message": "m", "type": "authentication_error"}, "AUTH"),
        ({"message": "m", "type": "permission_denied"}, "AUTH"),
        (
            {"message": "m", "type": "unknown_error", "code": "insufficient_balance"},
            "INSUFFICIENT_BALANCE",
        ),
        ({"message": "m", "code": "insufficient_quota"}, "INSUFFICIENT_BALANCE"),
        ({"message": "m", "type": "rate_limit_reached_error"}, "RATE_LIMIT"),
        ({"message": "m", "type": "server_error", "code": "invalid_request_error"}, "SERVER"),
        ({"message": "m", "type": "service_unavailable_error"}, "SERVER"),
        ({"message": "bad field", "type": "invalid_request_error"}, "INVALID_REQUEST"),
        (
            {"message": "maximum context length is 131072", "type": "invalid_request_error"},
            "CONTEXT_WINDOW_EXCEEDED",
        ),
        ({"message": "m"}, "SERVER"),
    ],
)
def test_not_sse_200_a_json_error_s_type_gives_its_code(error: dict[str, Any], code: str) -> None:
    assert error_type_code(error) == code


def test_not_sse_200_an_error_that_is_only_a_string_keeps_it() -> None:
    said = not_event_stream_failure("application/json", {}, b'{"error": "upstream down"}')
    assert (said.code, said.message) == ("SERVER", "DeepSeek answered HTTP 200: upstream down")
    empty_error = not_event_stream_failure("application/json", {}, b'{"error": null}')
    assert empty_error.code == "MALFORMED_RESPONSE"


# -- 5. finish reasons ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("insufficient_system_resource", "SERVER"),
        ("content_filter", "CONTENT_FILTER"),
        ("model_overheated", "UNKNOWN_FINISH"),
    ],
)
def test_finish_reasons_map_to_documented_codes_keeping_the_raw_reason(
    reason: str, code: str
) -> None:
    mapped = finish_reason(reason, True)
    assert isinstance(mapped, FinishError)
    assert mapped.failure.code == code
    assert mapped.failure.message.startswith(f"the model stopped: {reason} (")


def test_finish_reasons_every_code_is_one_streamchunk_md_lists() -> None:
    from pathlib import Path

    listed = Path(__file__).parents[3].joinpath("docs", "streamchunk.md").read_text()
    codes = {"SERVER", "CONTENT_FILTER", "UNKNOWN_FINISH", "EMPTY_RESPONSE"}
    assert all(f"`{code}`" in listed for code in codes)


async def test_finish_reasons_unknown_over_http(mock_server: MockServer) -> None:
    mock_server.queue("unknown-finish")
    adapter = adapter_for(mock_server)
    chunks = await collect(adapter)
    await adapter.aclose()
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishError)
    assert last.reason.failure.code == "UNKNOWN_FINISH"
    assert "model_overheated" in last.reason.failure.message


# -- 7. strict tools -----------------------------------------------------------------------------


def test_strict_closes_nested_objects_and_arrays_of_objects() -> None:
    closed = close_schema(STRICT_TOOLS[1].parameters)
    assert closed["required"] == ["route", "passengers", "note"]
    assert closed["additionalProperties"] is False
    route = closed["properties"]["route"]
    assert (route["required"], route["additionalProperties"]) == (["from", "to"], False)
    passenger = closed["properties"]["passengers"]["items"]
    assert (passenger["required"], passenger["additionalProperties"]) == (["name", "age"], False)
    assert closed["properties"]["note"] == {"type": "string"}


def test_strict_closes_every_place_a_schema_nests_and_keeps_the_rest() -> None:
    schema = {
        "$defs": {"point": {"properties": {"x": {"type": "number"}}}},
        "type": ["object", "null"],
        "properties": {
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "object"}, {"$ref": "#/$defs/point"}],
            },
            "either": {"anyOf": [{"type": "object", "additionalProperties": {"type": "string"}}]},
            "not_this": {"not": {"type": "object"}},
            "tuple": {"items": [{"type": "object"}]},
        },
        "description": "kept",
    }
    closed = close_schema(schema)
    assert closed["$defs"]["point"] == {
        "properties": {"x": {"type": "number"}},
        "required": ["x"],
        "additionalProperties": False,
    }
    properties = closed["properties"]
    assert properties["pair"]["prefixItems"][0] == {
        "type": "object",
        "required": [],
        "additionalProperties": False,
    }
    assert properties["pair"]["prefixItems"][1] == {"$ref": "#/$defs/point"}
    assert properties["either"]["anyOf"][0]["additionalProperties"] is False
    assert properties["not_this"]["not"]["additionalProperties"] is False
    assert properties["tuple"]["items"][0]["required"] == []
    assert closed["description"] == "kept"
    assert close_schema(True) is True


def test_strict_tools_go_to_beta_all_strict_and_closed(mock_server: MockServer) -> None:
    body = request_body(LlmRequest("m", (), tools=STRICT_TOOLS), "deepseek-v4-pro")
    functions = [tool["function"] for tool in body["tools"]]
    assert [f["strict"] for f in functions] == [True, True]
    assert functions[0]["parameters"]["additionalProperties"] is False
    assert STRICT_TOOLS[1].parameters["required"] == ["route"]  # the caller's schema is untouched
    body["messages"] = [{"role": "user", "content": "hi"}]
    assert validate(body, beta=True, models=("deepseek-v4-pro",)) is None


async def test_strict_tools_are_served_by_the_mock_s_beta_endpoint(mock_server: MockServer) -> None:
    adapter = adapter_for(mock_server)
    request = attrs.evolve(HELLO, tools=STRICT_TOOLS, thinking=False)
    chunks = await collect(adapter, request)
    await adapter.aclose()
    assert isinstance(chunks[-1], Finish) and not isinstance(chunks[-1].reason, FinishError)
    assert mock_server.requests[0].path == "/beta/chat/completions"


_NAMES = st.sampled_from(["a", "b", "c", "d"])
_LEAVES = st.sampled_from(
    [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"enum": ["x", "y"]}, {}]
)


def _object(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        schema: dict[str, Any] = {}
        kind = draw(st.sampled_from(["object", ["object", "null"], None]))
        if kind is not None:
            schema["type"] = kind
        properties = draw(st.dictionaries(_NAMES, children, max_size=3))
        if properties or kind is None:
            schema["properties"] = properties
        if draw(st.booleans()):
            # In the order of the properties, as closure writes it; sometimes a stray name.
            named = [name for name in properties if draw(st.booleans())]
            schema["required"] = named + (["z"] if draw(st.booleans()) else [])
        extra = draw(st.sampled_from([None, True, False, {"type": "string"}]))
        if extra is not None:
            schema["additionalProperties"] = extra
        return schema

    return build()


_SCHEMAS = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        _object(children),
        st.builds(lambda item: {"type": "array", "items": item}, children),
        st.builds(lambda options: {"anyOf": options}, st.lists(children, min_size=1, max_size=3)),
        st.builds(
            lambda defs: {"$defs": defs, "type": "object"},
            st.dictionaries(_NAMES, children, max_size=2),
        ),
    ),
    max_leaves=12,
)


@given(_SCHEMAS)
def test_strict_closure_always_satisfies_the_api_s_rules(schema: Any) -> None:
    before = copy.deepcopy(schema)
    closed = close_schema(schema)
    assert schema == before
    assert close_schema(closed) == closed
    tool = ToolSchema("f", "d", {"type": "object", "properties": {"arg": closed}}, strict=True)
    body = request_body(LlmRequest("m", (), tools=(tool,)), "deepseek-v4-pro")
    body["messages"] = [{"role": "user", "content": "hi"}]
    assert validate(body, beta=True, models=("deepseek-v4-pro",)) is None


@given(_SCHEMAS)
def test_strict_the_mock_refuses_what_closure_would_change(schema: Any) -> None:
    wrapped = {
        "type": "object",
        "properties": {"arg": schema},
        "required": ["arg"],
        "additionalProperties": False,
    }
    strict = {"type": "function", "function": {"name": "f", "parameters": wrapped, "strict": True}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [strict]}
    refused = validate(body, beta=True, models=("m",))
    # Closing only adds `required: []` to an object without properties: the API reads an
    # absent `required` as empty, so that change alone is not a refusal.
    if _without_empty_required(close_schema(wrapped)) == _without_empty_required(wrapped):
        assert refused is None
    else:
        assert refused is not None and "Invalid strict schema at tools[0]" in refused.body


def _without_empty_required(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_empty_required(v) for k, v in value.items() if (k, v) != ("required", [])
        }
    if isinstance(value, list):
        return [_without_empty_required(item) for item in value]
    return value


# -- 8. framing only proxies send ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLAIN_FORMS))
async def test_framing_each_variant_gives_the_chunks_of_its_plain_form(
    name: str, mock_server: MockServer
) -> None:
    variant, plain = SCENARIOS[name]({}), PLAIN_FORMS[name]()
    assert translate(variant) == translate(plain)
    mock_server.queue(variant, plain)
    adapter = adapter_for(mock_server)
    assert await collect(adapter) == await collect(adapter)
    await adapter.aclose()


async def test_framing_an_event_over_max_event_bytes_fails_as_malformed(
    mock_server: MockServer,
) -> None:
    mock_server.queue({"name": "long-text", "chunks": 5})
    error = await failure(adapter_for(mock_server, max_event_bytes=64))
    assert error.failure.code == "MALFORMED_RESPONSE"
    assert "max_event_bytes" in error.failure.message
    assert DeepSeekConfig().max_event_bytes == 4 * 1024 * 1024
