"""The edge cases of deepseek-wire.md §6, one named test each (``test_edge_NN_...``).

Not applicable to this adapter: §6.23 (thinking mode ignores sampling parameters: nothing for a
client to do), §6.24 (model aliases: reasoning is always passed back) and §6.26 (non-streaming
keep-alive lines: the adapter always streams; the mock server's non-streaming answers are tested
in tests/plugins/mock_server).
"""

from __future__ import annotations

import pytest

from dsh.testing.mockserver import SCENARIOS, MockServer, reply
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._errors import LlmError
from dsh.values._events import TurnError, TurnMaxTokens
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_deepseek import ChunkTranslator, DeepSeekAdapter
from dsh_plugins.llm_deepseek.request import request_body
from dsh_plugins.llm_deepseek.stream import usage_from_wire

from .conftest import MakeAgent
from .support import (
    choice,
    collect,
    collect_into,
    quick_adapter,
    translate,
    translate_payloads,
    turn_ends,
)


def test_edge_01_the_empty_first_reasoning_chunk_opens_no_block() -> None:
    first = choice({"role": "assistant", "content": None, "reasoning_content": ""})
    assert ChunkTranslator().feed(first) == []


def test_edge_02_an_absent_reasoning_content_means_non_thinking() -> None:
    chunks = translate(SCENARIOS["text-v4"]({}))
    assert not any(isinstance(c, ReasoningDelta) for c in chunks)
    assert chunks[0] == BlockStart(0, "text")


@pytest.mark.parametrize("value", [None, "", "absent"])
def test_edge_03_null_empty_and_absent_all_mean_no_text(value: str | None) -> None:
    delta = {} if value == "absent" else {"content": value, "reasoning_content": value}
    assert ChunkTranslator().feed(choice(delta)) == []


def test_edge_04_the_finish_chunk_may_carry_content_and_it_comes_first() -> None:
    chunks = translate(SCENARIOS["finish-with-content"]({}))
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "Once upon"),
        TextDelta(0, " a time"),
        BlockEnd(0, Text("Once upon a time")),
        UsageChunk(TokenUsage(input_tokens=30, output_tokens=4)),
        Finish(FinishMaxTokens()),
    ]


def test_edge_05_the_finish_chunk_may_have_no_delta() -> None:
    chunks = translate(SCENARIOS["finish-without-delta"]({}))
    assert chunks[-4:] == [
        TextDelta(0, "OK"),
        BlockEnd(0, Text("OK")),
        UsageChunk(TokenUsage(input_tokens=5, output_tokens=1)),
        Finish(FinishStop()),
    ]


def test_edge_06_id_and_name_come_only_with_the_first_fragment() -> None:
    head = {"index": 0, "id": "call_00_x", "type": "function", "function": {"name": "f"}}
    chunks = translate_payloads(
        choice({"tool_calls": [head]}),
        choice({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "tool_calls"),
    )
    assert chunks[:3] == [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, "call_00_x", "", name="f"),
        ToolCallDelta(0, "call_00_x", "{}"),
    ]
    assert chunks[3] == BlockEnd(0, ToolCall("call_00_x", "f", "{}"))


def test_edge_07_argument_fragments_are_joined_raw_and_never_parsed() -> None:
    pieces = ['{"a', '": "', '\\"', 'x"', "}"]
    head = {"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}
    payloads = [choice({"tool_calls": [head]})]
    payloads += [
        choice({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces
    ]
    chunks = translate_payloads(*payloads, choice({}, "tool_calls"))
    assert BlockEnd(0, ToolCall("c", "f", "".join(pieces))) in chunks


def test_edge_08_calls_are_keyed_by_wire_index_gaps_are_harmless() -> None:
    def fragment(index: int, **extra: object) -> dict[str, object]:
        return {"tool_calls": [{"index": index, **extra}]}

    chunks = translate_payloads(
        choice(fragment(3, id="c3", function={"name": "a", "arguments": "{"})),
        choice(fragment(7, id="c7", function={"name": "b", "arguments": "{"})),
        choice(fragment(3, function={"arguments": "}"})),
        choice(fragment(7, function={"arguments": "}"}), "tool_calls"),
    )
    ends = [c for c in chunks if isinstance(c, BlockEnd)]
    assert ends == [BlockEnd(0, ToolCall("c3", "a", "{}")), BlockEnd(1, ToolCall("c7", "b", "{}"))]


def test_edge_08_without_a_wire_index_fragments_follow_the_id_or_the_last_call() -> None:
    chunks = translate_payloads(
        choice({"tool_calls": [{"id": "c1", "function": {"name": "a", "arguments": "{"}}]}),
        choice({"tool_calls": [{"function": {"arguments": "}"}}]}),
        choice({"tool_calls": [{"id": "c2", "function": {"name": "b", "arguments": "[]"}}]}),
        choice({}, "tool_calls"),
    )
    ends = [c for c in chunks if isinstance(c, BlockEnd)]
    assert ends == [BlockEnd(0, ToolCall("c1", "a", "{}")), BlockEnd(1, ToolCall("c2", "b", "[]"))]


def test_edge_09_an_empty_id_or_name_never_overwrites_a_known_one() -> None:
    head = {"index": 0, "id": "call_00_x", "function": {"name": "f", "arguments": ""}}
    blank = {"index": 0, "id": "", "function": {"name": "", "arguments": "{}"}}
    other = {"index": 0, "id": "call_99", "function": {"name": "g", "arguments": ""}}
    chunks = translate_payloads(
        choice({"tool_calls": [head]}),
        choice({"tool_calls": [blank]}),
        choice({"tool_calls": [other]}, "tool_calls"),
    )
    assert ToolCallDelta(0, "call_00_x", "{}") in chunks
    assert BlockEnd(0, ToolCall("call_00_x", "f", "{}")) in chunks


def test_edge_09_a_name_learnt_late_is_streamed_once() -> None:
    chunks = translate_payloads(
        choice({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": ""}}]}),
        choice({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}),
        choice({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}, "tool_calls"),
    )
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert deltas == [ToolCallDelta(0, "c", ""), ToolCallDelta(0, "c", "", name="f")]


def test_edge_09_a_call_without_any_id_gets_one_from_its_block_index() -> None:
    chunks = translate_payloads(
        choice({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}),
        choice({}, "tool_calls"),
    )
    assert BlockEnd(0, ToolCall("call_0", "f", "{}")) in chunks


def test_edge_10_tool_call_ids_are_echoed_exactly() -> None:
    call_id = "call_00_kw66qNnNto11bSfJVIdlV5Oo"
    request = LlmRequest(
        "deepseek-v4-pro",
        (
            Message("user", (Text("q"),)),
            Message("assistant", (ToolCall(call_id, "get_date", "{}"),)),
            Message("user", (ToolResult(call_id, (Text("2026-04-19"),)),)),
        ),
    )
    messages = request_body(request, "deepseek-v4-pro")["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call_id
    assert messages[2] == {"role": "tool", "tool_call_id": call_id, "content": "2026-04-19"}


def test_edge_11_text_before_tool_calls_is_kept_in_order() -> None:
    chunks = translate(SCENARIOS["tool-calls-parallel"]({}))
    starts = [c for c in chunks if isinstance(c, BlockStart)]
    assert [s.block_type for s in starts] == ["text", "tool-call", "tool-call"]


async def test_edge_12_tool_calls_cut_by_length_are_never_run(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    truncated = reply(tool_calls=[("call_00_t", "word_count", '{"text": "a b')], finish="length")
    mock_server.queue(truncated)
    agent = await make_agent()
    agent.send("count")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnMaxTokens()]
    assert not any(e.type == "tool/call" for e in agent.session.events)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("content-filter", "CONTENT_FILTER"),
        ("insufficient-resource", "SERVER"),
    ],
)
def test_edge_13_content_filter_and_insufficient_resource_are_errors(name: str, code: str) -> None:
    finish = translate(SCENARIOS[name]({}))[-1]
    assert isinstance(finish, Finish)
    assert isinstance(finish.reason, FinishError)
    assert finish.reason.failure.code == code


def test_edge_14_a_stop_with_nothing_in_it_is_an_empty_response() -> None:
    finish = translate(SCENARIOS["empty"]({}))[-1]
    assert finish == Finish(
        FinishError(LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE"))
    )


def test_edge_14_a_reasoning_only_answer_is_a_success_replayed_with_empty_content() -> None:
    chunks = translate(SCENARIOS["reasoning-only"]({}))
    assert chunks[-1] == Finish(FinishStop())
    request = LlmRequest("deepseek-v4-flash", (Message("assistant", (Reasoning("hi"),)),))
    assistant = request_body(request, "deepseek-v4-flash")["messages"][0]
    assert assistant == {"role": "assistant", "content": "", "reasoning_content": "hi"}


def test_edge_15_usage_placement_the_last_one_wins_and_none_is_fine() -> None:
    def usage(prompt: int) -> dict[str, int]:
        return {"prompt_tokens": prompt, "completion_tokens": 1}

    both = translate_payloads(
        {**choice({"content": "x"}, "stop"), "usage": usage(5)},
        {"choices": [], "usage": usage(7)},
    )
    assert both[-2] == UsageChunk(TokenUsage(input_tokens=7, output_tokens=1))
    none = translate_payloads(choice({"content": "x"}, "stop"))
    assert not any(isinstance(c, UsageChunk) for c in none)
    assert translate(SCENARIOS["usage-trailing"]({}))[-2] == UsageChunk(TokenUsage(9, 1))


def test_edge_16_cache_accounting_is_disjoint() -> None:
    wire = {"prompt_tokens": 491, "completion_tokens": 129, "prompt_cache_hit_tokens": 448}
    assert usage_from_wire(wire) == TokenUsage(43, 129, cache_read_tokens=448)
    details_only = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}
    assert usage_from_wire(details_only) == TokenUsage(36, 0, cache_read_tokens=64)
    assert usage_from_wire({}) == TokenUsage()


def test_edge_17_reasoning_tokens_stay_inside_output_tokens() -> None:
    wire = {
        "prompt_tokens": 87,
        "completion_tokens": 21,
        "completion_tokens_details": {"reasoning_tokens": 14},
    }
    assert usage_from_wire(wire) == TokenUsage(87, 21, reasoning_tokens=14)


async def test_edge_18_keep_alives_never_extend_the_idle_timeout(
    mock_server: MockServer,
) -> None:
    adapter = quick_adapter(mock_server)
    mock_server.queue({"name": "keep-alive-stall", "interval_s": 0.01})
    received: list[StreamChunk] = []
    with pytest.raises(LlmError) as caught:
        await collect_into(received, adapter)
    await adapter.aclose()
    assert caught.value.failure.code == "TIMEOUT"
    assert received[:2] == [BlockStart(0, "text"), TextDelta(0, "Partial")]


async def test_edge_19_a_stall_times_out_and_a_missing_done_is_stream_closed(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("missing-done", "stall")
    with pytest.raises(LlmError) as closed:
        await collect(adapter)
    assert closed.value.failure.code == "STREAM_CLOSED"
    quick = quick_adapter(mock_server)
    with pytest.raises(LlmError) as stalled:
        await collect(quick)
    assert stalled.value.failure.code == "TIMEOUT"
    await quick.aclose()


async def test_edge_20_data_after_done_is_ignored(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("data-after-done")
    chunks = await collect(adapter)
    assert chunks[-4:] == [
        TextDelta(0, "Bye"),
        BlockEnd(0, Text("Bye")),
        UsageChunk(TokenUsage(5, 1)),
        Finish(FinishStop()),
    ]


def test_edge_21_assistant_content_is_a_string_never_null() -> None:
    call = ToolCall("c", "f", "{}")
    request = LlmRequest("deepseek-v4-flash", (Message("assistant", (call,)),))
    assistant = request_body(request, "deepseek-v4-flash")["messages"][0]
    assert assistant["content"] == ""


def test_edge_22_tool_choice_is_never_forced() -> None:
    request = LlmRequest(
        "deepseek-v4-flash",
        (Message("user", (Text("q"),)),),
        tools=(ToolSchema("f", "d"),),
        thinking=True,
    )
    assert "tool_choice" not in request_body(request, "deepseek-v4-flash")


async def test_edge_25_an_error_body_may_be_plain_text(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("unprocessable")
    with pytest.raises(LlmError) as caught:
        await collect(adapter)
    failure = caught.value.failure
    assert (failure.code, failure.status) == ("INVALID_REQUEST", 422)
    assert "missing field `messages`" in failure.message


async def test_edge_13_errors_reach_an_agent_as_turn_errors(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    mock_server.queue("content-filter")
    agent = await make_agent()
    agent.send("hi")
    await agent.wait_idle()
    (end,) = turn_ends(agent.session.events)
    assert isinstance(end, TurnError)
    assert end.failure.code == "CONTENT_FILTER"
