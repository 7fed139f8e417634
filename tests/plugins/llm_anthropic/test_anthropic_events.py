"""The Messages API event translator: every event, block and delta type, usage, stop reasons,
errors, and properties over generated streams."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.llm._assembler import assemble
from dsh.session._codec import structure, unstructure
from dsh.testing.conformance import CASES, check_stream
from dsh.testing.mockserver import SCENARIOS, reply
from dsh.testing.mockserver.anthropic import encode
from dsh.testing.mockserver.transcripts import thinking
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
from dsh.values._content import Block, Reasoning, Text, ToolCall
from dsh.values._errors import LlmError
from dsh_plugins.llm_anthropic import EventTranslator
from dsh_plugins.llm_anthropic.stream import stop_reason

from ..llm_deepseek.support import translate as deepseek_translate
from .support import (
    MESSAGE_START,
    MESSAGE_STOP,
    delta,
    message_delta,
    start,
    stop,
    translate,
    translate_frames,
)


def test_thinking_text_and_a_tool_call_become_blocks_ended_at_message_stop() -> None:
    chunks = translate(
        MESSAGE_START,
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="Hmm"),
        delta(0, type="signature_delta", signature="c2ln"),
        stop(0),
        start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="Hi"),
        stop(1),
        start(2, {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}),
        delta(2, type="input_json_delta", partial_json=""),
        delta(2, type="input_json_delta", partial_json='{"a":'),
        delta(2, type="input_json_delta", partial_json="1}"),
        stop(2),
        message_delta("tool_use", output_tokens=7),
        MESSAGE_STOP,
    )
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Hmm"),
        BlockStart(1, "text"),
        TextDelta(1, "Hi"),
        BlockStart(2, "tool-call"),
        ToolCallDelta(2, "toolu_1", "", name="read"),
        ToolCallDelta(2, "toolu_1", '{"a":'),
        ToolCallDelta(2, "toolu_1", "1}"),
        BlockEnd(0, Reasoning("Hmm", "c2ln")),
        BlockEnd(1, Text("Hi")),
        BlockEnd(2, ToolCall("toolu_1", "read", '{"a":1}')),
        UsageChunk(TokenUsage(input_tokens=10, output_tokens=7)),
        Finish(FinishToolCalls()),
    ]
    assert check_stream(chunks) == []


def test_a_signature_may_come_with_the_start_and_in_several_deltas() -> None:
    chunks = translate(
        start(0, {"type": "thinking", "thinking": "So", "signature": "ab"}),
        delta(0, type="signature_delta", signature="cd"),
        delta(0, type="signature_delta", signature="ef"),
        message_delta("end_turn"),
        MESSAGE_STOP,
    )
    assert chunks[:2] == [BlockStart(0, "reasoning"), ReasoningDelta(0, "So")]
    assert chunks[2] == BlockEnd(0, Reasoning("So", "abcdef"))


def test_an_empty_signed_thinking_block_is_kept_to_be_passed_back() -> None:
    chunks = translate(
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="signature_delta", signature="sig"),
        start(1, {"type": "tool_use", "id": "t", "name": "f", "input": {}}),
        delta(1, type="input_json_delta", partial_json="{}"),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    assert assemble(chunks).message.content == (Reasoning("", "sig"), ToolCall("t", "f", "{}"))


def test_a_present_but_empty_signature_is_kept_as_a_signature() -> None:
    """What gateways send for thinking made from another format's reasoning (LiteLLM over an
    OpenAI-format upstream): ``"signature": ""`` and no ``signature_delta``. It is still a
    signed block, to be passed back; a start with no signature field at all is unsigned."""
    chunks = translate(
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="0 results so far"),
        stop(0),
        start(1, {"type": "thinking", "thinking": "foreign"}),
        stop(1),
        start(2, {"type": "tool_use", "id": "call_0", "name": "f", "input": {}}),
        stop(2),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    assert assemble(chunks).message.content == (
        Reasoning("0 results so far", ""),
        Reasoning("foreign"),
        ToolCall("call_0", "f", "{}"),
    )


def test_a_signature_that_is_not_a_string_is_a_malformed_event() -> None:
    with pytest.raises(LlmError) as caught:
        translate(start(0, {"type": "thinking", "thinking": "", "signature": 7}))
    assert caught.value.failure.code == "MALFORMED_RESPONSE"


def test_redacted_thinking_keeps_its_data_as_the_signature() -> None:
    chunks = translate(
        start(0, {"type": "redacted_thinking", "data": "ENCRYPTED"}),
        stop(0),
        start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="ok"),
        message_delta("end_turn"),
        MESSAGE_STOP,
    )
    assert chunks[0] == BlockStart(0, "reasoning")
    assert BlockEnd(0, Reasoning("", "ENCRYPTED", redacted=True)) in chunks
    assert check_stream(chunks) == []


@pytest.mark.parametrize(("start_input", "arguments"), [({}, "{}"), ({"x": 1}, '{"x": 1}')])
def test_a_tool_call_without_input_deltas_gets_its_start_input(
    start_input: dict[str, Any], arguments: str
) -> None:
    chunks = translate(
        start(0, {"type": "tool_use", "id": "t", "name": "now", "input": start_input}),
        stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    assert ToolCallDelta(0, "t", arguments) in chunks
    assert BlockEnd(0, ToolCall("t", "now", arguments)) in chunks
    assert check_stream(chunks) == []


def test_server_tool_blocks_unknown_deltas_and_unknown_events_are_skipped() -> None:
    chunks = translate(
        {"type": "ping"},
        start(0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
        delta(0, type="input_json_delta", partial_json="{}"),
        stop(0),
        start(1, {"type": "text", "text": ""}),
        delta(1, type="citations_delta", citation={}),
        delta(1, type="text_delta", text="found"),
        {"type": "some_future_event"},
        stop(1),
        message_delta("end_turn"),
        MESSAGE_STOP,
        delta(1, type="text_delta", text="after the end"),
    )
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "found"),
        BlockEnd(0, Text("found")),
        Finish(FinishStop()),
    ]


def test_usage_counts_are_disjoint_and_later_counts_replace_earlier_ones() -> None:
    chunks = translate(
        {
            "type": "message_start",
            "message": {
                "usage": {
                    "input_tokens": 5,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 20,
                    "output_tokens": 1,
                }
            },
        },
        start(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="x"),
        {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 3}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 9, "input_tokens": None},
        },
        MESSAGE_STOP,
    )
    assert UsageChunk(TokenUsage(5, 9, cache_read_tokens=100, cache_write_tokens=20)) in chunks


def test_a_stream_without_usage_sends_no_usage_chunk() -> None:
    chunks = translate(
        start(0, {"type": "text", "text": "whole"}),
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        MESSAGE_STOP,
    )
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "whole"),
        BlockEnd(0, Text("whole")),
        Finish(FinishStop()),
    ]


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("refusal", "CONTENT_FILTER"),
        ("model_context_window_exceeded", "CONTEXT_WINDOW_EXCEEDED"),
        ("pause_turn", "UNKNOWN_FINISH"),
        ("model_overheated", "UNKNOWN_FINISH"),
    ],
)
def test_stop_reasons_that_are_not_success_are_failures(reason: str, code: str) -> None:
    finish = stop_reason(reason, has_content=True)
    assert isinstance(finish, FinishError)
    assert finish.failure.code == code
    assert reason in finish.failure.message


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", FinishStop()),
        ("stop_sequence", FinishStop()),
        ("tool_use", FinishToolCalls()),
        ("max_tokens", FinishMaxTokens()),
    ],
)
def test_success_stop_reasons(reason: str, finish: object) -> None:
    assert stop_reason(reason, has_content=True) == finish


def test_an_answer_with_nothing_in_it_is_an_empty_response() -> None:
    chunks = translate(
        start(0, {"type": "thinking", "thinking": "", "signature": "s"}),
        start(1, {"type": "text", "text": ""}),
        message_delta("end_turn"),
        MESSAGE_STOP,
    )
    finish = chunks[-1]
    assert isinstance(finish, Finish) and isinstance(finish.reason, FinishError)
    assert finish.reason.failure.code == "EMPTY_RESPONSE"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"type": "overloaded_error", "message": "Overloaded"}, "SERVER"),
        ({"type": "rate_limit_error", "message": "slow down"}, "RATE_LIMIT"),
        ({"type": "api_error", "message": "oops"}, "SERVER"),
        ({"type": "brand_new_error", "message": "?"}, "SERVER"),
        ("a bare string", "SERVER"),
    ],
)
def test_an_error_event_raises_with_the_code_of_its_type(error: object, code: str) -> None:
    with pytest.raises(LlmError) as raised:
        translate(MESSAGE_START, {"type": "error", "error": error})
    assert raised.value.failure.code == code
    assert "mid-stream" in raised.value.failure.message


@pytest.mark.parametrize(
    "event",
    [
        {"no": "type"},
        {"type": 3},
        "not an object",
        delta(7, type="text_delta", text="for a block that never started"),
        start(0, {"type": "text", "text": 5}),
        {"type": "message_start", "message": {"usage": {"input_tokens": "many"}}},
        {"type": "message_delta", "delta": {"stop_reason": 1}},
    ],
)
def test_a_malformed_event_is_malformed_response(event: Any) -> None:
    with pytest.raises(LlmError) as raised:
        translate(event)
    assert raised.value.failure.code == "MALFORMED_RESPONSE"


def test_message_stop_without_a_stop_reason_is_malformed() -> None:
    with pytest.raises(LlmError) as raised:
        translate(start(0, {"type": "text", "text": "x"}), MESSAGE_STOP)
    assert raised.value.failure.code == "MALFORMED_RESPONSE"
    assert "stop_reason" in raised.value.failure.message


def test_the_translator_is_done_only_at_message_stop() -> None:
    translator = EventTranslator()
    translator.feed(message_delta("end_turn"))
    assert not translator.done
    translator.feed(MESSAGE_STOP)
    assert translator.done


# -- properties --------------------------------------------------------------------------------

_text = st.text(min_size=1, max_size=12)
_blocks = st.lists(
    st.one_of(
        st.builds(Text, _text),
        st.builds(Reasoning, st.text(max_size=12), st.text(min_size=1, max_size=8)),
        st.builds(
            ToolCall,
            st.from_regex(r"toolu_[a-z0-9]{4}", fullmatch=True),
            st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
            st.dictionaries(st.text(max_size=4), st.integers(), max_size=3).map(json.dumps),
        ),
    ),
    max_size=5,
)


def _events_of(blocks: list[Text | Reasoning | ToolCall], size: int) -> list[dict[str, Any]]:
    """The Messages API stream of ``blocks``, each text cut into pieces of ``size``."""
    events: list[dict[str, Any]] = [MESSAGE_START]
    for index, block in enumerate(blocks):
        if isinstance(block, Text):
            events.append(start(index, {"type": "text", "text": ""}))
            pieces = [("text_delta", "text", block.text)]
        elif isinstance(block, Reasoning):
            events.append(start(index, {"type": "thinking", "thinking": "", "signature": ""}))
            pieces = [("thinking_delta", "thinking", block.text)]
            pieces.append(("signature_delta", "signature", block.signature or ""))
        else:
            events.append(start(index, {"type": "tool_use", "id": block.id, "name": block.name}))
            pieces = [("input_json_delta", "partial_json", block.arguments)]
        for kind, name, text in pieces:
            cut = len(text) if kind == "signature_delta" else size
            for at in range(0, len(text), cut):
                events.append(delta(index, **{"type": kind, name: text[at : at + cut]}))
        events.append(stop(index))
    events += [message_delta("end_turn", output_tokens=3), MESSAGE_STOP]
    return events


@given(_blocks, st.integers(1, 5))
def test_any_stream_of_blocks_translates_to_exactly_those_blocks(
    blocks: list[Text | Reasoning | ToolCall], size: int
) -> None:
    chunks = translate(*_events_of(blocks, size))
    assert check_stream(chunks) == []
    assert assemble(chunks).message.content == tuple(blocks)


#: The answer cases of the conformance kit that exist on the Messages wire.
_ANSWERS = [
    case.scenario
    for case in CASES
    if case.kind == "answer"
    and "anthropic" in case.wires
    and isinstance(case.scenario, str)
    and case.scenario != "scripted"
]


@given(st.lists(st.integers(1, 40), max_size=30))
def test_reads_of_any_size_give_the_same_chunks(pieces: list[int]) -> None:
    scenario = encode(thinking())
    assert translate_frames(scenario, pieces) == translate_frames(scenario)


@pytest.mark.parametrize("name", _ANSWERS)
def test_every_encoded_answer_translates_under_the_stream_rules(name: str) -> None:
    chunks = translate_frames(encode(SCENARIOS[name]({})))
    assert check_stream(chunks) == []


# -- the signature on Reasoning ------------------------------------------------------------------


def test_a_signature_survives_the_session_log_and_is_absent_when_unset() -> None:
    signed = Reasoning("hm", "c2ln")
    redacted = Reasoning("", "ENC", redacted=True)
    for block in (signed, redacted):
        assert structure(unstructure(block), Block) == block
    assert unstructure(Reasoning("plain")) == {"type": "reasoning", "text": "plain"}


def test_reasoning_shows_only_what_is_set() -> None:
    assert repr(Reasoning("hm")) == "Reasoning(text='hm')"
    assert repr(Reasoning("hm", "s")) == "Reasoning(text='hm', signature='s')"
    assert (
        repr(Reasoning("", "d", redacted=True))
        == "Reasoning(text='', signature='d', redacted=True)"
    )


# -- the same answer on both wires -----------------------------------------------------------------


def _comparable(chunk: StreamChunk) -> StreamChunk:
    """What both wires carry: no signature (Messages only), no reasoning count (chat
    completions only), no failure wording (each adapter words its own)."""
    if isinstance(chunk, BlockEnd) and isinstance(chunk.block, Reasoning):
        return BlockEnd(chunk.index, Reasoning(chunk.block.text))
    if isinstance(chunk, UsageChunk):
        return UsageChunk(attrs.evolve(chunk.usage, reasoning_tokens=0))
    if isinstance(chunk, Finish) and isinstance(chunk.reason, FinishError):
        return Finish(FinishError(attrs.evolve(chunk.reason.failure, message="")))
    return chunk


_calls = st.lists(
    st.tuples(
        st.from_regex(r"call_[a-z0-9]{4}", fullmatch=True),
        st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
        st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3).map(json.dumps),
    ),
    max_size=3,
    unique_by=lambda call: call[0],
)


@given(
    st.none() | st.text(min_size=1, max_size=30).filter(str.strip),
    st.none() | st.text(max_size=30),
    _calls,
    st.sampled_from([None, "stop", "length", "content_filter"]),
)
def test_an_answer_gives_the_same_chunks_on_both_wires(
    reasoning: str | None,
    text: str | None,
    calls: list[tuple[str, str, str]],
    finish: str | None,
) -> None:
    scenario = reply(reasoning=reasoning, text=text, tool_calls=calls, finish=finish)
    openai = [_comparable(chunk) for chunk in deepseek_translate(scenario)]
    messages = [_comparable(chunk) for chunk in translate_frames(encode(scenario))]
    assert messages == openai
