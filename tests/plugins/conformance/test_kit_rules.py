"""The kit's StreamChunk rules, what it reads from a scenario, and its catalogue of cases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given

from dsh.testing import reasoning_response, text_response, tool_call_response
from dsh.testing.conformance import (
    CASES,
    Endpoint,
    check_stream,
    expected_answer,
    headline,
)
from dsh.testing.mockserver import SCENARIOS, Scenario, reply
from dsh.testing.mockserver.wire import DONE_FRAME, ChunkStyle, usage_json
from dsh.testing.strategies import chunk_streams
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Image, Message, Reasoning, Text, ToolCall, ToolResult

STOP = Finish(FinishStop())
FAILED = LlmFailure("down", "SERVER")


@pytest.mark.parametrize(
    "chunks",
    [
        text_response("hi"),
        reasoning_response("think", "answer"),
        tool_call_response("c1", "echo", {"x": 1}, text="calling"),
        [BlockEnd(0, Text("end only")), STOP],
        [
            BlockStart(0, "reasoning"),
            BlockStart(1, "text"),
            TextDelta(1, "b"),
            ReasoningDelta(0, "a"),
            BlockEnd(1, Text("b")),
            BlockEnd(0, Reasoning("a")),
            STOP,
        ],
        [BlockStart(0, "text"), TextDelta(0, "cut"), Finish(FinishError(FAILED))],
        [Finish(FinishAborted(LlmFailure("stop", "ABORTED")))],
    ],
    ids=["text", "reasoning", "tool-call", "end-only", "interleaved", "error", "aborted"],
)
def test_well_formed_streams_break_no_rule(chunks: list[StreamChunk]) -> None:
    assert check_stream(chunks) == []


@pytest.mark.parametrize(
    ("chunks", "problem"),
    [
        (["text"], "chunk 0: 'text' is not a StreamChunk"),
        ([STOP, UsageChunk(TokenUsage())], "chunk 1: usage after finish"),
        ([BlockStart(0, "text"), BlockStart(0, "text"), STOP], "which already began"),
        ([TextDelta(0, "a"), BlockStart(0, "text"), STOP], "which already began"),
        ([TextDelta(-1, "a"), STOP], "index -1 is not a non-negative int"),
        ([BlockStart(0, "reasoning"), TextDelta(0, "a"), STOP], "a text chunk for block 0"),
        ([BlockEnd(0, Text("a")), TextDelta(0, "b"), STOP], "after its block-end"),
        ([TextDelta(0, None), STOP], "is not a string"),  # type: ignore[arg-type]
        (
            [ToolCallDelta(0, "a", "{"), ToolCallDelta(0, "b", "}"), STOP],
            "the tool-call deltas of block 0 change id",
        ),
        ([BlockEnd(0, Text("a")), BlockEnd(0, Text("a")), STOP], "a second block-end"),
        ([BlockEnd(0, Image("u")), STOP], "block-end carries Image"),
        ([BlockEnd(0, ToolResult("c", ())), STOP], "block-end carries ToolResult"),
        ([TextDelta(0, "a"), BlockEnd(0, Reasoning("a")), STOP], "a reasoning chunk for block 0"),
        ([TextDelta(0, "ab"), BlockEnd(0, Text("a")), STOP], "text 'a', the deltas said 'ab'"),
        (
            [ToolCallDelta(0, "c", "{}", name="f"), BlockEnd(0, ToolCall("d", "g", "{"))],
            "arguments '{'",
        ),
        ([ToolCallDelta(0, "c", "", name="f"), BlockEnd(0, ToolCall("d", "f", ""))], "id 'd'"),
        ([ToolCallDelta(0, "c", "", name="f"), BlockEnd(0, ToolCall("c", "g", ""))], "name 'g'"),
        ([UsageChunk("many"), STOP], "is not a TokenUsage"),  # type: ignore[arg-type]
        ([UsageChunk(TokenUsage(input_tokens=-1)), STOP], "input_tokens are not"),
        ([UsageChunk(TokenUsage(output_tokens=1, reasoning_tokens=2)), STOP], "inside output"),
        ([Finish("stop")], "is not a FinishReason"),  # type: ignore[arg-type]
        ([Finish(FinishError(LlmFailure("x", "ABORTED")))], "finish{error} with code 'ABORTED'"),
        ([Finish(FinishAborted(FAILED))], "finish{aborted} with code 'SERVER'"),
        ([Finish(FinishError(LlmFailure("x", "rate limit")))], "not a canonical UPPER_SNAKE"),
        ([Finish(FinishError(LlmFailure("", "SERVER")))], "the failure has no message"),
        ([TextDelta(0, "a")], "the stream ended without finish"),
        ([TextDelta(0, "a"), Finish(FinishToolCalls())], "block 0 never ended"),
        ([TextDelta(0, "delta only"), STOP], "block 0 never ended"),
    ],
)
def test_each_rule_catches_its_breach(chunks: list[Any], problem: str) -> None:
    assert any(problem in found for found in check_stream(chunks)), check_stream(chunks)


def test_a_raise_ends_a_stream_but_never_follows_a_finish() -> None:
    assert check_stream([TextDelta(0, "a")], FAILED) == []
    assert check_stream([STOP], FAILED) == ["the adapter raised after finish"]
    assert check_stream([], LlmFailure("x", "lower")) == [
        "failure code 'lower' is not a canonical UPPER_SNAKE code"
    ]


def test_a_stream_the_consumer_left_early_need_not_end() -> None:
    assert check_stream([BlockStart(0, "text"), TextDelta(0, "a")], complete=False) == []


@given(chunk_streams())
def test_the_rules_never_crash_on_a_messy_stream(case: Any) -> None:
    assert isinstance(check_stream(case.chunks), list)


def test_an_answer_is_read_from_the_wire() -> None:
    thinking = expected_answer(SCENARIOS["tool-call-thinking"]({}))
    assert thinking.message == Message(
        "assistant",
        (
            Reasoning("The user wants the weather in Hangzhou."),
            ToolCall("call_00_IhCAliIHtM9gKpgfqbBV9873", "weather", '{"city":"Hangzhou"}'),
        ),
    )
    assert thinking.usage == TokenUsage(118, 61, cache_read_tokens=256, reasoning_tokens=17)
    assert thinking.finish == FinishToolCalls()
    running = expected_answer(SCENARIOS["usage-running"]({}))
    assert running.usage == TokenUsage(10, 3)


def test_tool_calls_cut_by_the_output_limit_are_not_expected() -> None:
    cut = reply(text="a", tool_calls=[("c", "f", "{")], finish="length")
    answer = expected_answer(cut)
    assert answer.message.content == (Text("a"),)
    assert answer.finish == FinishMaxTokens()


def test_usage_is_read_disjoint_and_may_be_absent() -> None:
    details = {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": None}
    assert expected_answer(reply(text="a", usage=details)).usage == TokenUsage(9, 1)
    hits = usage_json(9, 1, hits=4)
    assert expected_answer(reply(text="a", usage=hits)).usage == TokenUsage(5, 1, 4)
    style = ChunkStyle("x", "deepseek-v4-flash", 0, "fp", usage_null=False)
    frames = (style.chunk({"content": "a"}), style.chunk({}, "stop"), DONE_FRAME)
    assert expected_answer(Scenario("no-usage", frames)).usage is None


def test_every_scenario_of_the_mock_server_is_a_case() -> None:
    served = {
        case.scenario if isinstance(case.scenario, str) else case.scenario["name"]
        for case in CASES
        if case.kind != "abort" and isinstance(case.scenario, str | Mapping)
    }
    assert served == set(SCENARIOS)
    assert [str(case) for case in CASES] == [case.name for case in CASES]
    assert len({case.name for case in CASES}) == len(CASES)


def test_headlines_and_config_sections() -> None:
    assert (
        headline("DeepSeek answered HTTP 429: Rate Limit Reached") == "DeepSeek answered HTTP 429"
    )
    assert headline("the stream ended without [DONE]") == "the stream ended without [DONE]"
    endpoint = Endpoint("http://127.0.0.1:1", "sk", 0.5)
    assert endpoint.section(models=["m"]) == {
        "base_url": "http://127.0.0.1:1",
        "api_key": "sk",
        "idle_timeout_s": 0.5,
        "models": ["m"],
    }
