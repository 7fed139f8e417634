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
from dsh.llm._batches import ChunkBatches
from dsh.loop._dispatch import with_unique_call_ids
from dsh.testing.strategies import chunk_streams
from dsh.values._chunks import (
    BlockStart,
    Finish,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
)
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
LAST: list[list[StreamChunk]] = [
    [BlockStart(0, "text"), TextDelta(0, "done"), Finish(FinishStop())]
]


class Adapter:
    """Streams ``batches`` (in batches, or flattened) then raises ``failure`` if given; every
    later call streams ``LAST`` so."""

    def __init__(
        self, batches: list[list[StreamChunk]], batched: bool, failure: LlmFailure | None
    ) -> None:
        self.batches, self.batched, self.failure = batches, batched, failure
        self.calls = 0

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        first = self.calls == 1
        batches = self._batches(self.batches if first else LAST, self.failure if first else None)
        return ChunkBatches(batches) if self.batched else self._chunks(batches)

    async def _batches(
        self, batches: list[list[StreamChunk]], failure: LlmFailure | None
    ) -> AsyncGenerator[list[StreamChunk], None]:
        for batch in batches:
            yield batch
        if failure is not None:
            raise LlmError(failure)

    async def _chunks(
        self, batches: AsyncGenerator[list[StreamChunk], None]
    ) -> AsyncGenerator[StreamChunk, None]:
        async for batch in batches:
            for chunk in batch:
                yield chunk


def _split(chunks: Sequence[StreamChunk], cuts: list[int]) -> list[list[StreamChunk]]:
    points = sorted(cut % (len(chunks) + 1) for cut in cuts)  # repeated cuts: empty batches
    ends = [0, *points, len(chunks)]
    return [list(chunks[a:b]) for a, b in itertools.pairwise(ends)]


def _without_time(events: Sequence[SessionEvent]) -> list[tuple[str, int, Any]]:
    return [(event.type, event.seq, event.data) for event in events]


async def _turn(
    batches: list[list[StreamChunk]], batched: bool, failure: LlmFailure | None
) -> tuple[list[tuple[str, int, Any]], Observer]:
    observer = Observer()
    async with Harness(plugins=[observer], load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], Adapter(batches, batched, failure))
        agent = harness.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        return _without_time(agent.session.events), observer


def _agree(
    batches: list[list[StreamChunk]], failure: LlmFailure | None = None
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
)
def test_any_batching_logs_and_shows_what_the_chunks_one_by_one_do(
    case: Any, cuts: list[int], failure: LlmFailure | None
) -> None:
    events, _ = _agree(_split(case.chunks, cuts), failure)
    if failure is None and not isinstance(case.expected.finish, FinishStop):
        return  # the turn's end depends on the finish; what the step logged agreed above
    messages = [data for _, _, data in events if isinstance(data, AssistantMessage)]
    if failure is None and messages:
        # As the loop logs it: tool-call ids made unique in the session.
        assert messages[0].content == with_unique_call_ids(case.expected.message, set()).content


def test_a_batch_observer_sees_each_reads_chunks_together() -> None:
    reply: list[StreamChunk] = [BlockStart(0, "text"), TextDelta(0, "a"), TextDelta(0, "b")]
    _, seen = _agree([reply, [], [TextDelta(0, "c"), Finish(FinishStop())]])
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


async def test_chunk_batches_read_one_by_one_flatten_and_close_their_generator() -> None:
    closed: list[bool] = []

    async def batches() -> AsyncGenerator[list[StreamChunk], None]:
        try:
            yield [TextDelta(0, "a"), TextDelta(0, "b")]
            yield []
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
