"""The in-memory log: chunk events and plain events kept packed, read back equal through
EventLog views."""

from __future__ import annotations

import gc
import itertools
import pickle
from typing import Any, get_args

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm._batches import Deltas
from dsh.session import _log as eventlog
from dsh.session._codec import EventCodec
from dsh.session._log import (
    PACKED_DATA,
    DeltaRun,
    EventLog,
    Packed,
    PackedEvent,
    pack,
    pack_data,
    runs,
    unpack,
)
from dsh.session._session import Session
from dsh.testing.strategies import packed_event_data, stream_chunks
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
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
from dsh.values._content import Block, Reasoning, Text, ToolCall
from dsh.values._events import (
    AssistantChunk,
    ErrorEvent,
    RetryEvent,
    SessionEvent,
    StepBoundary,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnStart,
    UserMessage,
)

PACKED: list[StreamChunk] = [
    TextDelta(0, "hello"),
    ReasoningDelta(1, "hmm"),
    ToolCallDelta(2, "call-1", '{"a":', "echo"),
    ToolCallDelta(2, "call-1", "1}"),
    BlockStart(3, "text"),
    UsageChunk(TokenUsage(10, 5, 3, 0, 2)),
    UsageChunk(TokenUsage()),
    Finish(FinishStop()),
    Finish(FinishToolCalls()),
    Finish(FinishMaxTokens()),
]


def _plain(kept: object) -> bool:
    return isinstance(kept, tuple) and all(
        isinstance(v, str | int | float | type(None)) for v in kept
    )


@pytest.mark.parametrize("chunk", PACKED, ids=lambda c: type(c).__name__)
def test_a_chunk_event_of_plain_values_is_kept_as_plain_values(chunk: StreamChunk) -> None:
    event = SessionEvent("assistant/chunk", 7, 1700000000.25, AssistantChunk(2, 3, chunk))
    kept = pack(event)
    assert _plain(kept)
    gc.collect()
    assert not gc.is_tracked(kept)
    back = unpack(7, kept)
    assert back == event and isinstance(back.data, AssistantChunk)
    assert type(back.data.chunk) is type(chunk)


@pytest.mark.parametrize(
    "block",
    [Text("x"), Reasoning("why", signature="sig"), ToolCall("c1", "echo", '{"a":1}')],
    ids=lambda b: type(b).__name__,
)
def test_a_block_end_is_kept_as_one_tuple_holding_its_block(block: Block) -> None:
    """Three tracked objects (the event, its data, the chunk) become one: the tuple, which
    the collector keeps tracking because it holds the block."""
    event = SessionEvent(
        "assistant/chunk", 4, 1700000000.5, AssistantChunk(2, 3, BlockEnd(1, block))
    )
    kept = pack(event)
    assert isinstance(kept, tuple) and kept[-1] is block
    assert pack_data(event.type, event.time, event.data) == kept
    back = unpack(4, kept)
    assert back == event and type(back.data.chunk) is BlockEnd  # type: ignore[union-attr]
    assert back.data.chunk.block is block  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(packed_event_data, st.floats())
def test_a_step_boundary_tool_call_error_or_retry_is_kept_as_plain_values(
    data: StepStart | StepEnd | ToolCallEvent | ErrorEvent | RetryEvent, time: float
) -> None:
    event = SessionEvent(data.type, 3, time, data)
    kept = pack(event)
    assert _plain(kept)
    back = unpack(3, kept)
    assert type(back.data) is type(data) and back.type == event.type
    # A NaN (a retry's delay, the time) is not equal to itself, nor is what holds one.
    assert back.data == data or data != data
    assert back.seq == 3 and (back.time == time or time != time)
    assert pack(back) == kept or back.data != back.data or time != time


def test_packed_data_classes_hold_plain_values_turn_and_step_first() -> None:
    assert set(PACKED_DATA) == {StepStart, StepEnd, ToolCallEvent, ErrorEvent, RetryEvent}
    for cls in PACKED_DATA:
        names = [field.name for field in attrs.fields(cls)]
        assert names[:2] == ["turn", "step"]


FAILURE = LlmFailure("boom", "SERVER")


class MyDelta(TextDelta):
    pass


class MyStep(StepStart):
    pass


class MyUsage(TokenUsage):
    pass


@pytest.mark.parametrize(
    "event",
    [
        SessionEvent("assistant/chunk", 0, 1.0, AssistantChunk(1, 1, Finish(FinishError(FAILURE)))),
        SessionEvent("assistant/chunk", 0, 1.0, AssistantChunk(1, 1, MyDelta(0, "sub"))),
        SessionEvent("assistant/chunk", 0, 1.0, AssistantChunk(1, 1, UsageChunk(MyUsage(1)))),
        SessionEvent("other/chunk", 0, 1.0, AssistantChunk(1, 1, TextDelta(0, "renamed"))),
        SessionEvent("user/message", 0, 1.0, UserMessage((Text("hi"),))),
        SessionEvent("step/start", 0, 1.0, MyStep(1, 1)),
        SessionEvent("other/start", 0, 1.0, StepStart(1, 1)),
        SessionEvent("tool/result", 0, 1.0, ToolResultEvent(1, 1, "c", (Text("ok"),))),
    ],
    ids=[
        "finish-error",
        "subclass",
        "usage-subclass",
        "other-type",
        "user",
        "step-subclass",
        "step-other-type",
        "tool-result",
    ],
)
def test_every_other_event_is_kept_as_it_is(event: SessionEvent) -> None:
    assert pack(event) is event
    assert unpack(0, event) is event


def test_every_other_event_has_no_packed_data() -> None:
    for event in (
        SessionEvent("assistant/chunk", 0, 1.0, AssistantChunk(1, 1, MyDelta(0, "sub"))),
        SessionEvent("other/start", 0, 1.0, StepStart(1, 1)),
        SessionEvent("user/message", 0, 1.0, UserMessage((Text("hi"),))),
    ):
        assert pack_data(event.type, event.time, event.data) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        packed_event_data
        | stream_chunks
        | st.builds(lambda text: UserMessage((Text(text),)), st.text(max_size=5)),
        max_size=12,
    )
)
def test_logging_keeps_what_appending_keeps(items: list[Any]) -> None:
    """``log(data)``, and ``log_chunk`` or a step's ``chunk_batch_log`` for a stream chunk,
    leave the log as ``append(data)`` does (with the same clock), packed or not."""
    logged, bound, appended = Session("s"), Session("s"), Session("s")
    chunks = get_args(StreamChunk)  # every chunk class
    times = itertools.count(1_700_000_000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("dsh.session._session.time.time", lambda: float(next(times)))
        for item in items:
            if isinstance(item, chunks):
                logged.log_chunk(1, 2, item)
            else:
                logged.log(item)
        times = itertools.count(1_700_000_000)
        log = bound.chunk_batch_log(1, 2)
        for item in items:
            if isinstance(item, chunks):
                log((item,))
            else:
                bound.log(item)
        times = itertools.count(1_700_000_000)
        for item in items:
            appended.append(AssistantChunk(1, 2, item) if isinstance(item, chunks) else item)
    for session in (logged, bound):
        assert session._events == appended._events or any(d != d for d in items)
        assert list(session.events) == list(appended.events) or any(d != d for d in items)


def test_a_steps_chunk_batch_log_announces_chunk_events_where_an_observer_takes_them() -> None:
    session, seen = _observed(AssistantChunk)
    log = session.chunk_batch_log(1, 2)
    log([TextDelta(0, "hi")])
    log([TextDelta(0, "a"), TextDelta(0, "b")])
    assert seen == [AssistantChunk(1, 2, TextDelta(0, t)) for t in ("hi", "a", "b")]
    assert list(session.events.select(AssistantChunk)) == list(session.events)
    assert session.events[1].time == session.events[2].time  # one read, one clock reading


@settings(max_examples=100, deadline=None)
@given(st.lists(stream_chunks, max_size=12), st.lists(st.integers(0, 12), max_size=4))
def test_a_batch_log_keeps_what_appending_each_chunk_keeps(
    chunks: list[Any], cuts: list[int]
) -> None:
    """``chunk_batch_log`` logs a read's chunks as ``append`` would, one clock reading each
    read (here the clock stands still)."""
    batched, appended = Session("s"), Session("s")
    points = sorted(cut % (len(chunks) + 1) for cut in cuts)
    ends = [0, *points, len(chunks)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("dsh.session._session.time.time", lambda: 1_700_000_000.0)
        log = batched.chunk_batch_log(1, 2)
        for start, stop in itertools.pairwise(ends):
            log(chunks[start:stop])
        for chunk in chunks:
            appended.append(AssistantChunk(1, 2, chunk))
    assert batched._events == appended._events or any(c != c for c in chunks)


def _observed(*classes: type[Any]) -> tuple[Session, list[object]]:
    """A session with a harness's hooks, and the data of the events a ``dsh_session_event``
    implementation that takes events of ``classes`` was given."""
    from dsh import Harness, for_events, hookimpl

    seen: list[object] = []

    class Observer:
        @hookimpl
        @for_events(*classes)
        def dsh_session_event(self, event: SessionEvent) -> None:
            seen.append(event.data)

    harness = Harness(plugins=[Observer()], load_entrypoints=False)
    harness.load()
    return Session("s", hooks=harness.hooks), seen


def test_an_event_nobody_observes_is_logged_without_being_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a harness's hooks, ``log`` builds (and announces) only the events an implementation
    of ``dsh_session_event`` takes; the others go to the log packed."""
    session, seen = _observed(StepStart)
    built: list[object] = []
    real = SessionEvent

    def counting(*args: Any) -> SessionEvent:
        built.append(args[3])
        return real(*args)

    monkeypatch.setattr("dsh.session._session.SessionEvent", counting)
    chunk = AssistantChunk(1, 1, TextDelta(0, "hi"))
    for data in (StepStart(1, 1), chunk, StepEnd(1, 1), ToolCallEvent(1, 1, "c", "echo", "{}")):
        session.log(data)
    session.log_chunk(1, 1, TextDelta(0, "there"))
    assert seen == built == [StepStart(1, 1)]
    assert [type(e.data) for e in session.events] == [
        StepStart,
        AssistantChunk,
        StepEnd,
        ToolCallEvent,
        AssistantChunk,
    ]
    assert all(isinstance(kept, tuple) for kept in session._events)


def test_a_chunk_someone_observes_is_built_and_announced() -> None:
    session, seen = _observed(AssistantChunk)
    session.log_chunk(1, 1, TextDelta(0, "hi"))
    assert seen == [AssistantChunk(1, 1, TextDelta(0, "hi"))] == [e.data for e in session.events]


def test_a_long_reply_leaves_nothing_for_the_collector_to_walk() -> None:
    session = Session("s")
    session.append(TurnStart(1))
    for i in range(1000):
        session.append(AssistantChunk(1, 1, TextDelta(0, f"piece {i} ")))
    gc.collect()
    kept = session._events[1:]
    assert len(kept) == 1000 and not any(gc.is_tracked(k) for k in kept)
    assert [_text(e) for e in session.events[1:]] == [f"piece {i} " for i in range(1000)]


def _text(event: SessionEvent) -> str:
    assert isinstance(event.data, AssistantChunk) and isinstance(event.data.chunk, TextDelta)
    return event.data.chunk.text


def _appended(session: Session, chunks: tuple[StreamChunk, ...]) -> list[SessionEvent]:
    appended = [session.append(TurnStart(1)), session.append(StepStart(1, 1))]
    appended += [session.append(AssistantChunk(1, 1, c)) for c in chunks]
    return appended


@settings(max_examples=150, deadline=None)
@given(st.lists(stream_chunks, max_size=30), st.data())
def test_the_log_reads_back_as_it_was_appended(
    chunks: list[StreamChunk], data: st.DataObject
) -> None:
    session = Session("s")
    appended = tuple(_appended(session, tuple(chunks)))
    events = session.events
    assert events == appended and appended == tuple(events) and len(events) == len(appended)
    assert list(reversed(events)) == list(reversed(appended))
    assert [e.seq for e in events] == list(range(len(appended)))
    n = len(appended)
    start = data.draw(st.integers(-n - 2, n + 2))
    stop = data.draw(st.integers(-n - 2, n + 2) | st.none())
    step = data.draw(st.sampled_from([None, 1, 2, -1, -3]))
    assert tuple(events[start:stop:step]) == appended[start:stop:step]
    assert tuple(events[start:stop][::-1]) == appended[start:stop][::-1]
    index = data.draw(st.integers(-n, n - 1))
    assert events[index] == appended[index]
    # A view is what the log was when it was read: later appends do not change it.
    session.append(AssistantChunk(1, 1, TextDelta(0, "later")))
    assert events == appended and len(session.events) == n + 1


def test_a_view_reads_like_the_tuple_it_replaces() -> None:
    session = Session("s")
    appended = _appended(session, (TextDelta(0, "a"), TextDelta(0, "b")))
    events = session.events
    with pytest.raises(IndexError):
        events[len(appended)]
    with pytest.raises(IndexError):
        events[-len(appended) - 1]
    assert events[2:][0] == appended[2] and events[1:3][-1] == appended[2]
    assert appended[3] in events and events.index(appended[3]) == 3
    assert events == session.events and hash(events) == hash(tuple(appended))
    assert events != list(appended) and events != session.events[1:]
    assert Session("empty").events == ()
    assert repr(events) == repr(tuple(appended))
    assert pickle.loads(pickle.dumps(events)) == tuple(appended)
    assert type(pickle.loads(pickle.dumps(events))) is tuple
    assert isinstance(events, EventLog)


def test_a_seeded_log_is_packed_too() -> None:
    source = Session("s")
    _appended(source, (TextDelta(0, "a"), ToolCallDelta(1, "c", "{}", "t")))
    seeded = Session("t", source.events)
    assert seeded.events == source.events
    # the turn start stays an object; the step start and both deltas are packed
    assert [isinstance(k, tuple) for k in seeded._events] == [False, True, True, True]
    assert seeded.last_turn == 1


def _expanded(items: list[SessionEvent | DeltaRun | PackedEvent]) -> list[SessionEvent]:
    """The events the items of runs() stand for."""
    events: list[SessionEvent] = []
    for item in items:
        if isinstance(item, tuple):
            events.append(unpack(*item))
            continue
        if not isinstance(item, DeltaRun):
            events.append(item)
            continue
        assert len(item.times) == len(item.texts) > 1
        for offset, (time, text) in enumerate(zip(item.times, item.texts, strict=True)):
            chunk: StreamChunk = (
                ToolCallDelta(item.index, item.call_id, text)
                if item.call_id is not None
                else item.chunk(item.index, text)  # type: ignore[call-arg]
            )
            data = AssistantChunk(item.turn, item.step, chunk)
            events.append(SessionEvent(AssistantChunk.type, item.seq + offset, time, data))
    return events


@settings(max_examples=150, deadline=None)
@given(st.lists(stream_chunks, max_size=30))
def test_runs_give_every_event_once_in_order_with_delta_runs_side_by_side(
    chunks: list[StreamChunk],
) -> None:
    session = Session("s")
    appended = _appended(session, tuple(chunks))
    from_view = list(runs(session.events[1:]))
    from_list = list(runs(appended[1:]))
    assert _expanded(from_view) == _expanded(from_list) == appended[1:]
    # from a view a chunk event kept packed comes as it is kept; from a list, as given
    for item, original in zip(from_view, from_list, strict=True):
        if isinstance(item, tuple):
            assert isinstance(original, SessionEvent) and item == (original.seq, pack(original))
        else:
            assert item == original
    for before, after in itertools.pairwise(from_list):
        # a run is as long as it can be: the next item never continues it
        if isinstance(before, DeltaRun) and isinstance(after, SessionEvent):
            data = after.data
            assert not (
                isinstance(data, AssistantChunk)
                and type(data.chunk) is before.chunk
                and (data.turn, data.step, data.chunk.index)
                == (before.turn, before.step, before.index)
                and getattr(data.chunk, "id", None) == before.call_id
                and getattr(data.chunk, "name", None) is None
            )


def test_runs_of_deltas_are_cut_where_the_block_or_call_changes() -> None:
    session = Session("s")
    chunks: list[StreamChunk] = [
        TextDelta(0, "a"),
        TextDelta(0, "b"),
        ReasoningDelta(0, "r"),
        ReasoningDelta(0, "s"),
        TextDelta(1, "c"),
        ToolCallDelta(2, "c1", '{"x":', "echo"),  # names its tool: not in a run
        ToolCallDelta(2, "c1", "1"),
        ToolCallDelta(2, "c1", "}"),
        ToolCallDelta(2, "c2", "{}"),
    ]
    appended = _appended(session, tuple(chunks))
    items = list(runs(session.events))
    shapes = [
        (i.chunk.__name__, i.seq, i.texts, i.call_id)
        if isinstance(i, DeltaRun)
        else ("packed", i[0])
        if isinstance(i, tuple)
        else i.seq
        for i in items
    ]
    assert shapes == [
        0,
        ("packed", 1),  # the step start
        ("TextDelta", 2, ["a", "b"], None),
        ("ReasoningDelta", 4, ["r", "s"], None),
        ("packed", 6),
        ("packed", 7),
        ("ToolCallDelta", 8, ["1", "}"], "c1"),
        ("packed", 10),
    ]
    assert _expanded(items) == appended
    assert list(runs(())) == []


@settings(max_examples=100, deadline=None)
@given(
    st.lists(stream_chunks, max_size=20),
    st.lists(
        st.sampled_from(
            [AssistantChunk, TurnStart, StepStart, StepBoundary, UserMessage, ErrorEvent, object]
        )
    ),
    st.booleans(),
    st.integers(0, 4),
)
def test_select_gives_what_filtering_the_view_gives(
    chunks: list[StreamChunk], classes: list[type], reverse: bool, start: int
) -> None:
    session = Session("s")
    session.append(UserMessage((Text("go"),)))
    _appended(session, tuple(chunks))
    view = session.events[start:]
    wanted = tuple(classes)
    expected = [e for e in (reversed(view) if reverse else view) if isinstance(e.data, wanted)]
    assert list(view.select(*wanted, reverse=reverse)) == expected


def test_select_builds_no_chunk_event_it_does_not_give(monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session("s")
    _appended(session, tuple(TextDelta(0, str(i)) for i in range(100)))
    built: list[int] = []
    real = eventlog.unpack

    def counting(seq: int, kept: SessionEvent | Packed) -> SessionEvent:
        built.append(seq)
        return real(seq, kept)

    monkeypatch.setattr(eventlog, "unpack", counting)
    assert [e.seq for e in session.events.select(TurnStart, reverse=True)] == [0]
    assert built == []
    items = list(runs(session.events))  # what a store's batch is: a view
    assert [type(i).__name__ for i in items] == ["SessionEvent", "tuple", "DeltaRun"]
    assert built == []
    assert [e.seq for e in session.events.select(StepBoundary)] == [1] and built == [1]
    built.clear()
    assert len(list(session.events.select(AssistantChunk))) == 100 and len(built) == 100


#: Chunks that make runs: deltas of a few blocks and calls, one naming its tool.
_run_chunks = st.sampled_from(
    [
        TextDelta(0, "a"),
        TextDelta(1, "b"),
        ReasoningDelta(0, "r"),
        ToolCallDelta(2, "c1", "{"),
        ToolCallDelta(2, "c2", "}"),
        ToolCallDelta(2, "c1", "", "echo"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        _run_chunks
        | stream_chunks
        | packed_event_data
        | st.builds(lambda text: UserMessage((Text(text),)), st.text(max_size=5)),
        max_size=16,
    ),
    st.integers(0, 16),
    st.integers(0, 16),
)
def test_a_views_rows_are_the_reference_rows(items: list[Any], start: int, stop: int) -> None:
    """``EventCodec.rows`` encodes a view of a log (a store's batch) in one pass over what the
    log keeps: the rows of its reference, the items of ``runs`` each encoded."""
    session = Session("s")
    chunks = get_args(StreamChunk)
    for item in items:
        session.append(AssistantChunk(1, 2, item) if isinstance(item, chunks) else item)
    codec = EventCodec()
    view = session.events[start:stop]
    assert codec.rows(view) == codec.reference_rows(view)
    assert codec.rows(list(view)) == codec.reference_rows(view)


def test_a_views_rows_cut_a_run_where_the_call_changes_or_names_its_tool() -> None:
    """A run of one call's argument deltas ends at another call's delta, at one that names its
    tool and at another block's, in the one-pass encoding as in the reference."""
    session = Session("s")
    chunks: list[StreamChunk] = [
        ToolCallDelta(2, "c1", "a"),
        ToolCallDelta(2, "c1", "b"),
        ToolCallDelta(2, "c2", "c"),
        ToolCallDelta(2, "c2", "d"),
        ToolCallDelta(2, "c2", "e", "echo"),
        ToolCallDelta(2, "c2", "f"),
        ToolCallDelta(2, "c2", "g"),
        ToolCallDelta(3, "c2", "h"),
        TextDelta(3, "i"),
        TextDelta(3, "j"),
        TextDelta(4, "k"),
    ]
    for chunk in chunks:
        session.append(AssistantChunk(1, 2, chunk))
    codec = EventCodec()
    rows = codec.rows(session.events)
    assert rows == codec.reference_rows(session.events)
    runs_of = [(row["texts"], row.get("id")) for row in rows if "texts" in row]
    assert runs_of == [
        (["a", "b"], "c1"),
        (["c", "d"], "c2"),
        (["f", "g"], "c2"),
        (["i", "j"], None),
    ]


#: What one network read of a stream gives a step: runs of deltas given at once (a block's
#: text or reasoning, one to four of them), or a single chunk.
_reads = st.lists(
    st.builds(
        Deltas,
        st.sampled_from([TextDelta, TextDelta, ReasoningDelta]),
        st.sampled_from([0, 0, 1]),
        st.lists(st.sampled_from(["a", "b", ""]), max_size=4),
    )
    | _run_chunks
    | stream_chunks,
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_reads, max_size=8), st.integers(0, 30), st.integers(0, 30))
def test_runs_logged_at_once_are_written_as_the_reference_writes_them(
    reads: list[list[Any]], start: int, stop: int
) -> None:
    """A log notes where a run of deltas given at once lies, and a store's batch steps over it
    whole: its rows are the reference's for any view, one cutting such a run or joining two
    runs of one block included."""
    session = Session("s")
    session.append(TurnStart(1))
    log = session.chunk_batch_log(1, 1)
    for read in reads:
        log(read)
    codec = EventCodec()
    view = session.events[start:stop]
    assert codec.rows(view) == codec.reference_rows(view)
    assert codec.rows(session.events) == codec.reference_rows(session.events)
    noted = session._runs
    texts = [len(item.texts) for read in reads for item in read if isinstance(item, Deltas)]
    assert len(noted) == sum(1 for n in texts if n > 1)


def test_a_view_ending_inside_a_run_logged_at_once_ends_its_row_there() -> None:
    """Two network reads of one block's text are one run; a view that ends inside the second
    read's deltas writes the run up to its end, no further."""
    session = Session("s")
    log = session.chunk_batch_log(1, 1)
    log([Deltas(TextDelta, 0, ["a", "b", "c"])])
    log([Deltas(TextDelta, 0, ["d", "e", "f"])])
    codec = EventCodec()
    for stop in range(1, 7):
        view = session.events[:stop]
        rows = codec.rows(view)
        assert rows == codec.reference_rows(view)
        if stop > 1:
            assert rows[0]["texts"] == list("abcdef"[:stop])
