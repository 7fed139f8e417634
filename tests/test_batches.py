"""A stream read in batches gives a step what the same chunks one by one give it.

:class:`~dsh.llm._batches.ChunkBatches` lets an adapter hand the loop each network read's chunks
together; the step's per-chunk path is the reference. For any valid stream split into any
batches (empty ones too), a failure raised after some of them, or a stream the assembler
refuses part way: the session log (but for the clock), the message, the chunks each
``dsh_agent_stream_chunk`` observer saw and the chunks the ``dsh_agent_stream_batch`` observers
saw are the same; a batch observer sees each read's chunks together.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, Harness, hookimpl
from dsh.hooks._markers import for_events
from dsh.llm._batches import ChunkBatch, ChunkBatches, ChunkView, Deltas, expand
from dsh.loop._dispatch import with_unique_call_ids
from dsh.testing.strategies import chunk_streams
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
)
from dsh.values._content import Text
from dsh.values._errors import LlmError
from dsh.values._events import AssistantChunk, AssistantMessage, SessionEvent
from dsh.values._request import LlmRequest


class Observer:
    def __init__(self) -> None:
        self.chunks: list[StreamChunk] = []
        self.batches: list[list[StreamChunk]] = []

    @hookimpl
    def dsh_agent_stream_chunk(self, chunk: StreamChunk) -> None:
        self.chunks.append(chunk)

    @hookimpl
    def dsh_agent_stream_batch(self, chunks: Sequence[StreamChunk]) -> None:
        self.batches.append(list(chunks))


#: What the model says after the first call (a stream that ended in tool calls goes on).
LAST: list[ChunkBatch] = [[BlockStart(0, "text"), TextDelta(0, "done"), Finish(FinishStop())]]


class Adapter:
    """Streams ``batches`` (in batches, or flattened) then raises ``failure`` if given; every
    later call streams ``LAST`` so."""

    def __init__(
        self, batches: list[ChunkBatch], batched: bool, failure: LlmFailure | None
    ) -> None:
        self.batches, self.batched, self.failure = batches, batched, failure
        self.calls = 0

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        first = self.calls == 1
        batches = self._batches(self.batches if first else LAST, self.failure if first else None)
        return ChunkBatches(batches) if self.batched else self._chunks(batches)

    async def _batches(
        self, batches: list[ChunkBatch], failure: LlmFailure | None
    ) -> AsyncGenerator[ChunkBatch, None]:
        for batch in batches:
            yield batch
        if failure is not None:
            raise LlmError(failure)

    async def _chunks(
        self, batches: AsyncGenerator[ChunkBatch, None]
    ) -> AsyncGenerator[StreamChunk, None]:
        async for batch in batches:
            for chunk in expand(batch):
                yield chunk


def _split(chunks: Sequence[StreamChunk], cuts: list[int], runs: bool = False) -> list[ChunkBatch]:
    """``chunks`` cut into batches at ``cuts``; with ``runs``, each run of text (or reasoning)
    deltas of one block in a batch kept as one :class:`Deltas`, as a batching adapter keeps
    them."""
    points = sorted(cut % (len(chunks) + 1) for cut in cuts)  # repeated cuts: empty batches
    ends = [0, *points, len(chunks)]
    batches = [list(chunks[a:b]) for a, b in itertools.pairwise(ends)]
    return [_runs(batch) for batch in batches] if runs else [[*batch] for batch in batches]


def _runs(batch: list[StreamChunk]) -> ChunkBatch:
    out: ChunkBatch = []
    for chunk in batch:
        if isinstance(chunk, TextDelta | ReasoningDelta):
            last = out[-1] if out else None
            if isinstance(last, Deltas) and (last.kind, last.index) == (type(chunk), chunk.index):
                last.texts.append(chunk.text)
                continue
            out.append(Deltas(type(chunk), chunk.index, [chunk.text]))
        else:
            out.append(chunk)
    return out


def _without_time(events: Sequence[SessionEvent]) -> list[tuple[str, int, Any]]:
    return [(event.type, event.seq, event.data) for event in events]


async def _turn(
    batches: list[ChunkBatch], batched: bool, failure: LlmFailure | None
) -> tuple[list[tuple[str, int, Any]], Observer]:
    observer = Observer()
    async with Harness(plugins=[observer], load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], Adapter(batches, batched, failure))
        agent = harness.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        return _without_time(agent.session.events), observer


def _agree(
    batches: list[ChunkBatch], failure: LlmFailure | None = None
) -> tuple[list[tuple[str, int, Any]], Observer]:
    async def both() -> tuple[Any, Any]:
        return await _turn(batches, True, failure), await _turn(batches, False, failure)

    (events, seen), (reference, seen_one_by_one) = asyncio.run(both())
    assert events == reference
    assert seen.chunks == seen_one_by_one.chunks
    assert [c for batch in seen.batches for c in batch] == seen_one_by_one.chunks
    assert all(len(batch) == 1 for batch in seen_one_by_one.batches)
    return events, seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk_streams(),
    st.lists(st.integers(min_value=0), max_size=6),
    st.none() | st.builds(LlmFailure, st.just("cut off"), st.just("STREAM_CLOSED")),
    st.booleans(),
)
def test_any_batching_logs_and_shows_what_the_chunks_one_by_one_do(
    case: Any, cuts: list[int], failure: LlmFailure | None, runs: bool
) -> None:
    events, _ = _agree(_split(case.chunks, cuts, runs), failure)
    if failure is None and not isinstance(case.expected.finish, FinishStop):
        return  # the turn's end depends on the finish; what the step logged agreed above
    messages = [data for _, _, data in events if isinstance(data, AssistantMessage)]
    if failure is None and messages:
        # As the loop logs it: tool-call ids made unique in the session.
        assert messages[0].content == with_unique_call_ids(case.expected.message, set()).content


def test_a_batch_observer_sees_each_reads_chunks_together() -> None:
    reply: list[StreamChunk] = [BlockStart(0, "text"), TextDelta(0, "a"), TextDelta(0, "b")]
    _, seen = _agree([[*reply], [], [TextDelta(0, "c"), Finish(FinishStop())]])
    assert seen.batches == [reply, [TextDelta(0, "c"), Finish(FinishStop())]]


def test_a_chunk_the_assembler_refuses_ends_the_batch_where_one_by_one_it_would() -> None:
    # A reasoning delta for the text block: logged and shown, then the step fails there;
    # the chunk after it in the same read is neither.
    events, seen = _agree(
        [[BlockStart(0, "text"), ReasoningDelta(0, "x"), TextDelta(0, "y")]], None
    )
    chunks = [data.chunk for _, _, data in events if isinstance(data, AssistantChunk)]
    assert TextDelta(0, "y") not in chunks
    assert ReasoningDelta(0, "x") in seen.chunks


def test_a_run_of_deltas_the_assembler_refuses_is_refused_at_its_first() -> None:
    # The run's first delta is logged and shown, as one by one; the rest of it is not.
    run = Deltas(ReasoningDelta, 0, ["x", "z"])
    events, seen = _agree([[BlockStart(0, "text"), run, TextDelta(0, "y")]], None)
    chunks = [data.chunk for _, _, data in events if isinstance(data, AssistantChunk)]
    assert ReasoningDelta(0, "x") in chunks
    assert ReasoningDelta(0, "z") not in chunks
    assert [c for batch in seen.batches for c in batch] == seen.chunks
    # then the failure, as the finish it is logged as
    assert seen.chunks[:2] == [BlockStart(0, "text"), ReasoningDelta(0, "x")]
    assert [type(chunk) for chunk in seen.chunks[2:]] == [Finish]


def test_a_run_of_deltas_after_its_blocks_end_is_logged_and_ignored_as_one_by_one() -> None:
    # block-end is final: the deltas after it are logged and shown, not folded in.
    late = Deltas(TextDelta, 0, ["late", "r"])
    reply: ChunkBatch = [BlockStart(0, "text"), BlockEnd(0, Text("a")), late, Finish(FinishStop())]
    events, seen = _agree([reply])
    assert TextDelta(0, "late") in seen.chunks
    messages = [data for _, _, data in events if isinstance(data, AssistantMessage)]
    assert messages[0].content == (Text("a"),)


def test_runs_of_deltas_come_one_by_one_to_every_kind_of_observer() -> None:
    # A dsh_session_event observer of chunk events makes the session log each chunk as an
    # event; the chunk and batch observers see the deltas a run stands for.
    class Events:
        def __init__(self) -> None:
            self.chunks: list[StreamChunk] = []

        @hookimpl
        @for_events(AssistantChunk)
        def dsh_session_event(self, event: SessionEvent) -> None:
            assert isinstance(event.data, AssistantChunk)
            self.chunks.append(event.data.chunk)

    reply: ChunkBatch = [
        BlockStart(0, "reasoning"),
        Deltas(ReasoningDelta, 0, ["r1", "r2"]),
        BlockStart(1, "text"),
        Deltas(TextDelta, 1, ["a", "b", "c"]),
        Finish(FinishStop()),
    ]
    expected = [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "r1"),
        ReasoningDelta(0, "r2"),
        BlockStart(1, "text"),
        TextDelta(1, "a"),
        TextDelta(1, "b"),
        TextDelta(1, "c"),
        Finish(FinishStop()),
    ]
    observer, events = Observer(), Events()

    async def turn() -> Any:
        async with Harness(plugins=[observer, events], load_entrypoints=False) as harness:
            harness.llm.register_adapter(["m"], Adapter([reply], True, None))
            agent = harness.agent_loop.create("a", AgentOptions(model="m"))
            agent.send("go")
            await agent.wait_idle()
            return agent.session.events

    logged = asyncio.run(turn())
    assert observer.chunks == expected
    assert observer.batches == [expected]
    assert events.chunks == expected
    assert [e.data.chunk for e in logged if isinstance(e.data, AssistantChunk)] == expected


async def test_chunk_batches_read_one_by_one_flatten_and_close_their_generator() -> None:
    closed: list[bool] = []

    async def batches() -> AsyncGenerator[ChunkBatch, None]:
        try:
            yield [Deltas(TextDelta, 0, ["a"]), TextDelta(0, "b")]
            yield [Deltas(TextDelta, 0, [])]  # a run of no delta: no chunk
            yield [TextDelta(0, "c")]
            yield [TextDelta(0, "never read")]
        finally:
            closed.append(True)

    stream = ChunkBatches(batches())
    assert stream.__aiter__() is stream
    read = [await stream.__anext__() for _ in range(3)]
    assert read == [TextDelta(0, "a"), TextDelta(0, "b"), TextDelta(0, "c")]
    await stream.aclose()
    assert closed == [True]
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


def test_a_chunk_view_reads_the_chunks_a_batch_stands_for_once_read() -> None:
    batch: ChunkBatch = [BlockStart(0, "text"), Deltas(TextDelta, 0, ["a", "b"])]
    view = ChunkView(batch)
    assert len(view) == 3
    assert view[1] == TextDelta(0, "a")
    assert view[1:] == [TextDelta(0, "a"), TextDelta(0, "b")]
    assert list(view) == [BlockStart(0, "text"), TextDelta(0, "a"), TextDelta(0, "b")]
    assert repr(Deltas(TextDelta, 0, ["a"])) == "Deltas(TextDelta, 0, ['a'])"
