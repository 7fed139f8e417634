"""One converter for every value: tagged unions, omitted optionals, exact round trips."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Literal

import attrs
import pytest
from attrs import frozen
from hypothesis import example, given
from hypothesis import strategies as st

from dsh.session._codec import (
    EventCodec,
    _plain_value,
    _Unsure,
    converter,
    structure,
    unstructure,
)
from dsh.session._log import pack
from dsh.testing import strategies as ds
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishError,
    FinishReason,
    FinishToolCalls,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Block, Message, MessageSource, PluginSource, Text
from dsh.values._errors import DshError
from dsh.values._events import (
    CORE_EVENT_TYPES,
    AssistantChunk,
    AssistantMessage,
    ErrorEvent,
    RawEventData,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnEnd,
    TurnEndReason,
    TurnError,
    TurnInterrupted,
    TurnMaxTokens,
    TurnStart,
    UserMessage,
    event_type_of,
)
from dsh.values._rare_events import ContextMessage, OutputResult, SteeringMessage
from dsh.values._request import LlmRequest, ToolSchema

ints = st.integers(0, 1000)
content = st.lists(ds.blocks, max_size=3).map(tuple)
turn_end_reasons: st.SearchStrategy[TurnEndReason] = st.one_of(
    st.just(TurnCompleted()),
    st.builds(TurnAborted, st.none() | st.text()),
    st.builds(TurnError, ds.failures),
    st.just(TurnMaxTokens()),
    st.just(TurnDisposed()),
    st.just(TurnInterrupted()),
)
event_data = st.one_of(
    st.builds(UserMessage, content, ds.message_sources),
    st.builds(ContextMessage, content, ds.message_sources),
    st.builds(SteeringMessage, ints, content, ds.message_sources),
    st.builds(TurnStart, ints, ds.message_sources),
    st.builds(TurnEnd, ints, turn_end_reasons),
    st.builds(StepStart, ints, ints),
    st.builds(StepEnd, ints, ints),
    st.builds(AssistantChunk, ints, ints, ds.stream_chunks),
    st.builds(AssistantMessage, ints, ints, content, st.none() | ds.token_usages),
    st.builds(ToolCallEvent, ints, ints, st.text(), st.text(), st.text()),
    st.builds(ToolResultEvent, ints, ints, st.text(), ds.result_content, st.booleans()),
    st.builds(ErrorEvent, ints, ints, st.text(), st.none() | st.text()),
)
CASES: list[tuple[Any, Any]] = [
    (ds.blocks, Block),
    (ds.messages, Message),
    (ds.message_sources, MessageSource),
    (ds.token_usages, TokenUsage),
    (ds.failures, LlmFailure),
    (ds.finish_reasons, FinishReason),
    (ds.stream_chunks, StreamChunk),
    (ds.llm_requests, LlmRequest),
    (ds.tool_schemas, ToolSchema),
    (turn_end_reasons, TurnEndReason),
]


@pytest.mark.parametrize(
    ("strategy", "cls"),
    CASES,
    ids=[c[1].__name__ if hasattr(c[1], "__name__") else str(i) for i, c in enumerate(CASES)],
)
@given(data=st.data())
def test_round_trip_through_json(strategy: Any, cls: Any, data: st.DataObject) -> None:
    value = data.draw(strategy)
    raw = json.loads(json.dumps(unstructure(value)))
    assert structure(raw, cls) == value


@given(data=event_data, seq=ints, time=st.floats(0, 2e9))
def test_session_events_round_trip(data: Any, seq: int, time: float) -> None:
    codec = EventCodec()
    name = event_type_of(data, codec.types)
    event = SessionEvent(name, seq, time, data)
    assert codec.decode(json.loads(json.dumps(codec.encode(event)))) == event


packed_chunks = st.one_of(
    st.builds(TextDelta, ints, st.text()),
    st.builds(ReasoningDelta, ints, st.text()),
    st.builds(ToolCallDelta, ints, st.text(), st.text(), st.none() | st.text()),
    st.builds(BlockStart, ints, st.sampled_from(["text", "reasoning", "tool-call"])),
)


@given(chunk=packed_chunks | ds.stream_chunks, turn=ints, step=ints, seq=ints, time=st.floats())
@example(chunk=UsageChunk(TokenUsage(3, 0, 2)), turn=1, step=2, seq=3, time=1.5)
@example(chunk=UsageChunk(TokenUsage()), turn=1, step=2, seq=3, time=1.5)
@example(chunk=Finish(FinishToolCalls()), turn=1, step=2, seq=3, time=1.5)
def test_a_packed_chunk_event_is_encoded_as_the_event_it_stands_for(
    chunk: StreamChunk, turn: int, step: int, seq: int, time: float
) -> None:
    """A store writes a chunk event kept packed from its tuple: the same row, field for field
    and in the same order (a JSON line's text follows the order), as the event built again."""
    event = SessionEvent(AssistantChunk.type, seq, time, AssistantChunk(turn, step, chunk))
    kept = pack(event)
    if not isinstance(kept, tuple):
        return  # not a packed class: written as the event it is
    codec = EventCodec()
    row, expected = codec._encode_packed(seq, kept), codec.encode(event)
    assert json.dumps(row) == json.dumps(expected)  # same keys in the same order, same values


@given(data=ds.packed_event_data, seq=ints, time=st.floats())
def test_a_packed_event_is_encoded_as_the_event_it_stands_for(
    data: Any, seq: int, time: float
) -> None:
    """A step's start and end, a tool call, an error or a retry is kept packed too, and written
    from its tuple: the same row as the event built again."""
    event = SessionEvent(data.type, seq, time, data)
    kept = pack(event)
    assert isinstance(kept, tuple)
    codec = EventCodec()
    row, expected = codec._encode_packed(seq, kept), codec.encode(event)
    assert json.dumps(row) == json.dumps(expected)


def test_unions_are_tagged_with_the_seeds_hyphenated_names() -> None:
    chunk = Finish(FinishError(LlmFailure("boom", "SERVER")))
    assert unstructure(chunk) == {
        "type": "finish",
        "reason": {"type": "error", "failure": {"message": "boom", "code": "SERVER"}},
    }
    assert unstructure(ToolCallDelta(1, "c", "{")) == {
        "type": "tool-call-delta",
        "index": 1,
        "id": "c",
        "arguments_delta": "{",
    }
    assert unstructure(PluginSource("x")) == {"type": "plugin", "name": "x"}
    assert unstructure(TurnMaxTokens()) == {"type": "max-tokens"}


def test_unset_optionals_are_omitted_never_null() -> None:
    raw = unstructure(LlmRequest("m", (Message("user", (Text("hi"),)),)))
    assert raw == {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert "null" not in json.dumps(unstructure(BlockEnd(0, Text("x"))))


def test_a_bad_tag_is_a_clear_error() -> None:
    with pytest.raises(Exception, match="tagged by 'type'"):
        structure({"type": "nope"}, StreamChunk)
    with pytest.raises(Exception, match="tagged by 'type'"):
        structure("not a mapping", Block)


def test_unknown_event_types_keep_their_raw_data() -> None:
    codec = EventCodec()
    raw = {"type": "gone/plugin", "seq": 3, "time": 1.0, "data": {"x": 1}}
    event = codec.decode(raw)
    assert event.data == RawEventData({"x": 1})
    assert codec.encode(event) == raw
    assert unstructure(event.data) == {"x": 1}
    assert structure({"x": 1}, RawEventData) == event.data


def test_event_types_register_once() -> None:
    codec = EventCodec()
    codec.register("user/message", UserMessage)
    with pytest.raises(DshError, match="already registered"):
        codec.register("user/message", ContextMessage)


def test_dumps_is_compact_ascii_json() -> None:
    from dsh.session._codec import dumps

    assert dumps({"a": [1, "é", None], "b": True}) == '{"a":[1,"\\u00e9",null],"b":true}'


def test_a_subclass_of_a_union_member_is_written_as_that_member() -> None:
    @frozen
    class Shouted(Text):
        loud: bool = True

    assert unstructure(Shouted("hi")) == {"type": "text", "text": "hi"}


def test_writing_values_imports_no_cattrs_until_one_is_read() -> None:
    code = (
        "import sys\n"
        "from dsh.session._codec import EventCodec, structure, unstructure\n"
        "from dsh.values._chunks import TextDelta\n"
        "from dsh.values._content import Text\n"
        "from dsh.values._events import SessionEvent, TurnStart, UserMessage\n"
        "codec = EventCodec()\n"
        "raw = codec.encode(SessionEvent('user/message', 0, 1.0, UserMessage((Text('go'),))))\n"
        "codec.encode(SessionEvent('turn/start', 1, 1.0, TurnStart(1)))\n"
        "unstructure(TextDelta(0, 'x'))\n"
        "before = 'cattrs' in sys.modules\n"
        "event = codec.decode(raw)\n"
        "print(before, 'cattrs' in sys.modules, event.data.content[0].text)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "go"]


def same(written: Any, expected: Any) -> bool:
    """Equal, and of the same types all the way down (a list is not a tuple, 1.0 not 1)."""
    if type(written) is not type(expected):
        return False
    if isinstance(expected, dict):
        return list(written) == list(expected) and all(
            same(written[key], expected[key]) for key in expected
        )
    if isinstance(expected, list):
        return len(written) == len(expected) and all(map(same, written, expected))
    return bool(written == expected or (written != written and expected != expected))


def _plugin_event_classes() -> list[type]:
    from dsh import Harness

    harness = Harness()
    harness.load()
    return sorted(
        (cls for cls in harness.events.types.values() if cls not in CORE_EVENT_TYPES.values()),
        key=lambda cls: cls.__qualname__,
    )


#: Every event type, the core's and the built-in plugins', but typed output's result (its
#: ``value`` is declared ``Any``: the converter writes it, tested below).
WRITTEN = [
    *sorted(
        (cls for cls in CORE_EVENT_TYPES.values() if cls is not OutputResult),
        key=lambda cls: cls.__qualname__,
    ),
    *_plugin_event_classes(),
]


@pytest.mark.parametrize("cls", WRITTEN, ids=[cls.__qualname__ for cls in WRITTEN])
@given(data=st.data())
def test_values_are_written_without_cattrs_exactly_as_the_converter_writes_them(
    cls: type, data: st.DataObject
) -> None:
    value = data.draw(st.from_type(cls))
    expected = converter().unstructure(value)
    assert same(_plain_value(value), expected)
    assert same(unstructure(value), expected)


@pytest.mark.parametrize(
    ("strategy", "cls"),
    CASES,
    ids=[c[1].__name__ if hasattr(c[1], "__name__") else str(i) for i, c in enumerate(CASES)],
)
@given(data=st.data())
def test_every_value_is_written_as_the_converter_writes_it(
    strategy: Any, cls: Any, data: st.DataObject
) -> None:
    value = data.draw(strategy | event_data | ds.packed_event_data)
    assert same(unstructure(value), converter().unstructure(value))


@frozen
class _Base:
    name: str


@frozen
class _Derived(_Base):
    extra: int = 0


@frozen
class _Holder:
    held: _Base


@frozen
class _Odd:
    every: tuple[int, ...] = attrs.Factory(tuple)


@frozen
class _Later:
    kept: str
    made: int = attrs.field(init=False, default=3)


@frozen
class _Shapes:
    flags: Literal["a", "b"] = "a"
    number: int | float = 1
    maybe: dict[str, int] | None = None


@frozen
class _Either:
    one: _Base | _Later


def test_what_the_plain_writer_is_unsure_of_the_converter_writes() -> None:
    # A field declared as one class holding a subclass (the converter writes the declared
    # class's fields), a factory default, a type it does not know: all the converter's.
    for value in (
        _Holder(_Derived("x", 2)),
        _Odd((1,)),
        _Shapes(maybe={"a": 1}),
        _Either(_Base("x")),
        UserMessage(("not a block",)),  # type: ignore[arg-type]  # a union slot: the converter's
    ):
        with pytest.raises(_Unsure):
            _plain_value(value)
        assert unstructure(value) == converter().unstructure(value)
    assert same(unstructure(_Holder(_Base("x"))), {"held": {"name": "x"}})
    assert same(unstructure(_Later("k")), converter().unstructure(_Later("k")))
    assert unstructure(OutputResult(1, {"a": [1, (2,)]})) == converter().unstructure(
        OutputResult(1, {"a": [1, (2,)]})
    )
    assert unstructure(RawEventData({"kept": [1]})) == {"kept": [1]}
    assert unstructure([TextDelta(0, "x")]) == [{"index": 0, "text": "x", "type": "text-delta"}]


def test_a_class_whose_annotations_do_not_resolve_is_left_to_the_converter() -> None:
    namespace: dict[str, Any] = {}
    exec(
        "from __future__ import annotations\n"
        "from attrs import frozen\n"
        "@frozen\n"
        "class Lost:\n"
        "    thing: Nowhere\n",
        namespace,
    )
    lost = namespace["Lost"](1)
    with pytest.raises(_Unsure):
        _plain_value(lost)
