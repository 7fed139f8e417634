"""A model call's stream in batches: the chunks of each network read together.

An adapter's ``stream(request)`` is an async iterator of chunks, and every consumer can read it
so. An adapter that translates a whole network read at once may instead return
:class:`ChunkBatches` around an async generator of lists: iterated, it gives the same chunks one
by one; :meth:`ChunkBatches.batches` gives each read's list, so that a consumer that handles many
chunks at once (the loop's step: it logs a read's chunks with one clock reading and calls the
batch observers once) pays per read what it would pay per chunk. The chunks and their order are
the same either way: the loop's per-chunk path is the reference, and ``tests/test_batches.py``
holds a step over any batching to the log, the message and the observations it gives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from dsh.values._chunks import StreamChunk

__all__ = ["ChunkBatches"]


class ChunkBatches(AsyncIterator[StreamChunk]):
    """``batches`` (an async generator of lists of chunks, e.g. one list per network read) as a
    stream of chunks. Read it one way: chunk by chunk, or with :meth:`batches`. ``aclose``
    closes the generator (the loop closes every stream it reads)."""

    __slots__ = ("_batches", "_pending")

    def __init__(self, batches: AsyncGenerator[list[StreamChunk], None]) -> None:
        self._batches = batches
        self._pending: list[StreamChunk] = []

    def __aiter__(self) -> ChunkBatches:
        return self

    async def __anext__(self) -> StreamChunk:
        while not self._pending:
            batch = await self._batches.__anext__()
            self._pending = batch[::-1]
        return self._pending.pop()

    def batches(self) -> AsyncGenerator[list[StreamChunk], None]:
        """The lists of chunks, as the adapter made them (possibly empty)."""
        return self._batches

    async def aclose(self) -> None:
        await self._batches.aclose()
