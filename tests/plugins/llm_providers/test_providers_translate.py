"""The translator alone: payloads in, StreamChunks out, for each reasoning field and usage
placement; a property test splits the wire anywhere and checks the StreamChunk contract."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm._assembler import BlockAssembler
from dsh.llm._sse import SseParser
from dsh.testing.conformance import check_stream
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishError,
    FinishMaxTokens,
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
from dsh.values._errors import LlmError
from dsh_plugins.llm_providers import Translator
from dsh_plugins.llm_providers.config import ReasoningField
from dsh_plugins.llm_providers.stream import usage_of
from tests.plugins.llm_providers.support import DIALECTS, Reply, _events


def run(*payloads: Any, field: ReasoningField = "reasoning_content") -> list[StreamChunk]:
    translator = Translator("p", field)
    out: list[StreamChunk] = []
    for payload in payloads:
        out += translator.feed(payload)
    return out + translator.done()


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def test_reasoning_then_text_then_usage_then_finish() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 5}
    chunks = run(
        delta(reasoning_content="hm"),
        delta(content="hi"),
        delta("stop"),
        {"choices": [], "usage": usage},
    )
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "hm"),
        BlockEnd(0, Reasoning("hm")),
        BlockStart(1, "text"),
        TextDelta(1, "hi"),
        BlockEnd(1, Text("hi")),
        UsageChunk(TokenUsage(10, 5)),
        Finish(FinishStop()),
    ]


def test_auto_reads_one_reasoning_field_per_chunk() -> None:
    chunks = run(
        delta(reasoning_content="a", reasoning="a"),
        delta(reasoning="b"),
        delta("stop"),
        field="auto",
    )
    assert chunks[-2] == BlockEnd(0, Reasoning("ab"))


def test_none_ignores_reasoning_fields() -> None:
    chunks = run(delta(reasoning="x", content="y"), delta("length"), field="none")
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "y"),
        BlockEnd(0, Text("y")),
        Finish(FinishMaxTokens()),
    ]


def test_tool_calls_interleave_by_wire_index_and_name_may_come_late() -> None:
    chunks = run(
        delta(tool_calls=[{"index": 0, "id": "a", "function": {"arguments": "{"}}]),
        delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}}]),
        delta(tool_calls=[{"index": 0, "function": {"name": "f", "arguments": "}"}}]),
        delta(tool_calls=[{"index": 1, "function": {"arguments": "{}"}}, "junk"]),
        delta(tool_calls=[{"function": {"name": "h", "arguments": "1"}}]),
        delta(tool_calls=[{"index": 1, "function": {}}]),
        delta("tool_calls"),
    )
    assert check_stream(chunks) == []
    assert [c for c in chunks if isinstance(c, BlockEnd)] == [
        BlockEnd(0, ToolCall("a", "f", "{}")),
        BlockEnd(1, ToolCall("b", "g", "{}")),
        BlockEnd(2, ToolCall("call-2", "h", "1")),
    ]
    assert ToolCallDelta(0, "a", "{", None) in chunks
    assert chunks[-1] == Finish(FinishToolCalls())


def test_a_finish_reason_counts_once_and_usage_may_come_with_it() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    chunks = run(delta(content="x"), {**delta("stop"), "usage": usage}, delta("length"))
    assert chunks[-2:] == [UsageChunk(TokenUsage(3, 1)), Finish(FinishStop())]


def test_failed_finishes() -> None:
    [*_, filtered] = run(delta(content="x"), delta("content_filter"))
    assert isinstance(filtered, Finish) and isinstance(filtered.reason, FinishError)
    assert filtered.reason.failure.code == "CONTENT_FILTER"
    [*_, odd] = run(delta(content="x"), delta("sleepy"))
    assert isinstance(odd.reason, FinishError)  # type: ignore[union-attr]
    assert odd.reason.failure.code == "UNKNOWN_FINISH"  # type: ignore[union-attr]
    [*_, busy] = run(delta(content="x"), delta("insufficient_system_resource"))
    assert busy.reason.failure.code == "SERVER"  # type: ignore[union-attr]
    [*_, none] = run(delta(content="x"))
    assert none.reason.failure.code == "MALFORMED_RESPONSE"  # type: ignore[union-attr]


def test_an_error_object_ends_the_stream_and_nothing_follows() -> None:
    translator = Translator("p", "none")
    assert translator.feed(delta(content="x"))[-1] == TextDelta(0, "x")
    [end] = translator.feed({"error": {"message": "overloaded", "type": "server_error"}})
    assert isinstance(end, Finish) and isinstance(end.reason, FinishError)
    assert end.reason.failure.code == "SERVER"
    assert translator.feed(delta(content="y")) == [] and translator.done() == []


def test_openrouter_finish_error_carries_its_error() -> None:
    choice = {"index": 0, "delta": {}, "finish_reason": "error"}
    error = {"code": 429, "message": "rate limited upstream"}
    chunks = run({"choices": [{**choice, "error": error}]}, delta("stop"))
    [end] = chunks
    assert end.reason.failure.code == "RATE_LIMIT"  # type: ignore[union-attr]
    [bare] = run({"choices": [choice]})
    assert bare.reason.failure.code == "SERVER"  # type: ignore[union-attr]


def test_odd_payloads_are_ignored() -> None:
    chunks = run({"choices": "x"}, {"choices": [1]}, delta(content=5), delta("stop"))
    assert chunks == [Finish(FinishStop())]
    assert run({"choices": [{"delta": None, "finish_reason": "stop"}]}) == [Finish(FinishStop())]


def test_a_payload_that_is_not_an_object_is_malformed() -> None:
    with pytest.raises(LlmError) as raised:
        Translator("p", "none").feed([1, 2])
    assert raised.value.failure.code == "MALFORMED_RESPONSE"


def test_usage_is_disjoint() -> None:
    wire = {
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 10},
        "completion_tokens_details": {"reasoning_tokens": 70},
    }
    assert usage_of(wire, True) == TokenUsage(60, 50, 30, 10, 50)
    assert usage_of(wire, False) == TokenUsage(100, 50, 0, 0, 50)
    assert usage_of({"prompt_tokens": True, "completion_tokens": -1}, True) == TokenUsage()
    assert usage_of({"prompt_tokens_details": None}, True) == TokenUsage()


_text = st.text(st.characters(codec="utf-8"), max_size=30)
_calls = st.lists(
    st.tuples(
        st.from_regex(r"call_[a-z0-9]{1,6}", fullmatch=True), st.sampled_from(["f", "g"]), _text
    ),
    max_size=3,
    unique_by=lambda call: call[0],
)


@settings(max_examples=150, deadline=None)
@given(
    profile=st.sampled_from(sorted(DIALECTS)),
    text=_text,
    reasoning=_text,
    calls=_calls,
    cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=8),
)
def test_any_split_of_any_answer_keeps_the_contract(
    profile: str, text: str, reasoning: str, calls: list[tuple[str, str, str]], cuts: list[int]
) -> None:
    dialect = DIALECTS[profile]
    reply = Reply(text=text or "t", reasoning=reasoning, calls=tuple(calls))
    body = {"model": "m", "stream_options": {"include_usage": True}}
    wire = "".join(_events(dialect, body, reply)).encode()
    parser = SseParser()
    field: ReasoningField = "auto" if dialect.reasoning_field else "none"
    translator = Translator(profile, field)
    chunks: list[StreamChunk] = []
    start = 0
    for cut in [*sorted({min(c, len(wire)) for c in cuts}), len(wire)]:
        for event in parser.feed(wire[start:cut]):
            chunks += translator.feed(json.loads(event.data))
        start = cut
    assert parser.done
    chunks += translator.done()
    assert check_stream(chunks) == []
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    result = assembler.result()
    expected = [
        *([Reasoning(reasoning)] if reasoning and dialect.reasoning_field else []),
        Text(text or "t"),
        *(ToolCall(i, n, a) for i, n, a in calls),
    ]
    assert list(result.message.content) == expected
    assert result.usage == TokenUsage(20, 7)
