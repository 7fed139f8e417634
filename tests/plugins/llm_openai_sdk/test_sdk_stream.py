"""The SDK stream helper's events → StreamChunks: transcripts of the wire reference as exact
vectors, the shapes gateways produce and the finish reasons (point 5), sent over HTTP from the
mock server."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.testing.mockserver import MockServer, Scenario
from dsh.testing.mockserver.wire import DONE_FRAME, ChunkStyle, data_frame, usage_json
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    FinishToolCalls,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Reasoning, Text, ToolCall
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter

from .support import collect, failure_of

STYLE = ChunkStyle("id-1", "deepseek-v4-flash", 1786782779, "fp")


def frames(*chunks: str) -> Scenario:
    """A scenario of these chunk frames, then ``[DONE]``."""
    return Scenario("custom", (*chunks, DONE_FRAME))


def tool(index: int | None, **fields: Any) -> dict[str, Any]:
    fragment: dict[str, Any] = {} if index is None else {"index": index}
    function = {key: fields.pop(key) for key in ("name", "arguments") if key in fields}
    return {**fragment, **fields, "function": function}


async def test_a_thinking_transcript_gives_the_exact_chunks(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("thinking")
    assert await collect(adapter) == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "We"),
        ReasoningDelta(0, " need"),
        ReasoningDelta(0, " to compare 9.11 and 9.8."),
        BlockStart(1, "text"),
        TextDelta(1, "9.8"),
        TextDelta(1, " is greater."),
        BlockEnd(0, Reasoning("We need to compare 9.11 and 9.8.")),
        BlockEnd(1, Text("9.8 is greater.")),
        UsageChunk(TokenUsage(input_tokens=87, output_tokens=21, reasoning_tokens=14)),
        Finish(FinishStop()),
    ]


async def test_cache_hits_leave_the_input_count(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("tool-call-thinking")
    chunks = await collect(adapter)
    assert chunks[-2] == UsageChunk(
        TokenUsage(input_tokens=118, output_tokens=61, cache_read_tokens=256, reasoning_tokens=17)
    )
    assert chunks[-1] == Finish(FinishToolCalls())


async def test_openai_style_cached_tokens_count_when_deepseek_s_field_is_absent(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    usage = {
        "prompt_tokens": 50,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": None,
    }
    mock_server.queue(frames(STYLE.chunk({"content": "ok"}), STYLE.chunk({}, "stop", usage)))
    assert (await collect(adapter))[-2] == UsageChunk(TokenUsage(20, 7, cache_read_tokens=30))
    bare = {"prompt_tokens": None, "completion_tokens": None}
    mock_server.queue(frames(STYLE.chunk({"content": "ok"}), STYLE.chunk({}, "stop", bare)))
    assert (await collect(adapter))[-2] == UsageChunk(TokenUsage())


async def test_calls_without_a_wire_index_are_told_apart_by_id_then_by_order(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(
        frames(
            STYLE.chunk({"tool_calls": [tool(None, id="a", name="one", arguments='{"x"')]}),
            STYLE.chunk({"tool_calls": [tool(None, arguments=": 1}")]}),
            STYLE.chunk({"tool_calls": [tool(None, id="b", name="two", arguments="{}")]}),
            STYLE.chunk({"tool_calls": [tool(None, id="a", name="one", arguments="")]}),
            STYLE.chunk({}, "tool_calls"),
        )
    )
    assert await collect(adapter) == [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, "a", '{"x"', name="one"),
        ToolCallDelta(0, "a", ": 1}"),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "b", "{}", name="two"),
        BlockEnd(0, ToolCall("a", "one", '{"x": 1}')),
        BlockEnd(1, ToolCall("b", "two", "{}")),
        Finish(FinishToolCalls()),
    ]


async def test_an_id_or_name_fills_a_gap_but_never_overwrites(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(
        frames(
            STYLE.chunk({"tool_calls": [tool(0, arguments="{")]}),
            STYLE.chunk({"tool_calls": [tool(0, id="late", name="named", arguments="")]}),
            STYLE.chunk({"tool_calls": [tool(0, id="other", name="renamed", arguments="}")]}),
            STYLE.chunk({"tool_calls": [tool(1, arguments="[]")]}),
            STYLE.chunk({}, "tool_calls", usage_json(3, 2)),
        )
    )
    assert await collect(adapter) == [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, "", "{"),
        ToolCallDelta(0, "late", "", name="named"),
        ToolCallDelta(0, "late", "}"),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "", "[]"),
        BlockEnd(0, ToolCall("late", "named", "{}")),
        BlockEnd(1, ToolCall("call_1", "", "[]")),
        UsageChunk(TokenUsage(3, 2)),
        Finish(FinishToolCalls()),
    ]


@pytest.mark.parametrize(
    ("reason", "code", "meaning"),
    [
        ("insufficient_system_resource", "SERVER", "DeepSeek ran out of inference resources"),
        ("content_filter", "CONTENT_FILTER", "the content filter stopped the answer"),
        ("sleepy", "UNKNOWN_FINISH", "a reason dsh does not know"),
    ],
)
async def test_point5_failed_finish_reasons_map_to_listed_codes_keeping_the_reason(
    reason: str, code: str, meaning: str, adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    """``insufficient_system_resource`` is the in-stream 503: SERVER, so retry retries it."""
    mock_server.queue(frames(STYLE.chunk({"content": "x"}), STYLE.chunk({}, reason)))
    chunks = await collect(adapter)
    assert chunks[:3] == [BlockStart(0, "text"), TextDelta(0, "x"), BlockEnd(0, Text("x"))]
    failure = failure_of(chunks)
    assert failure.code == code
    assert failure.message == f"the model stopped: {reason} ({meaning})"


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"choices": [{"index": 0, "delta": {"content": 5}}]}, "content is int"),
        ({"choices": [{"delta": {"reasoning_content": [1]}}]}, "reasoning is list"),
        ({"choices": [{"delta": {}, "finish_reason": 7}]}, "finish_reason is int"),
        ({"choices": [{"delta": {"tool_calls": [{"id": 3}]}}]}, "a tool call id is int"),
        ({"choices": [{"delta": {"tool_calls": [{"function": {"name": 3}}]}}]}, "name is int"),
        ({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": 3}}]}}]}, "unexpected"),
        ({"choices": [{"index": 0, "delta": {"tool_calls": [{"function": 3}]}}]}, "unexpected"),
        ({"choices": {"0": {}}}, "unexpected chunk"),
        ({"choices": ["x"]}, "unexpected chunk"),
        ({"choices": [{"index": 0, "delta": {"content": "x"}}]}, "without a finish_reason"),
    ],
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic, on the helper's wrong-typed dump
async def test_chunks_of_the_wrong_shape_are_malformed(
    payload: dict[str, Any], says: str, adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(frames(data_frame({"id": "x", "object": "chat.completion.chunk", **payload})))
    failure = failure_of(await collect(adapter))
    assert failure.code == "MALFORMED_RESPONSE"
    assert says in failure.message


async def test_an_answer_without_any_content_is_empty(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(frames(STYLE.chunk({"content": "", "reasoning_content": ""}, "stop")))
    chunks: list[StreamChunk] = await collect(adapter)
    assert len(chunks) == 1
    assert failure_of(chunks).code == "EMPTY_RESPONSE"


def test_usage_details_left_as_plain_dicts_by_older_sdks_are_read_too() -> None:
    from types import SimpleNamespace

    from dsh_plugins.llm_openai_sdk.stream import usage_of

    usage: Any = SimpleNamespace(
        prompt_tokens=10,
        completion_tokens=5,
        prompt_tokens_details={"cached_tokens": 4},
        completion_tokens_details={"reasoning_tokens": 3},
    )
    assert usage_of(usage) == TokenUsage(6, 5, cache_read_tokens=4, reasoning_tokens=3)
