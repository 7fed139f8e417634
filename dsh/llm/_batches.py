"""A model call's stream in batches: the chunks of each network read together.

An adapter's ``stream(request)`` is an async iterator of chunks, and every consumer can read it
so. An adapter that translates a whole network read at once may instead return
:class:`ChunkBatches` around an async generator of batches: iterated, it gives the same chunks
one by one; :meth:`ChunkBatches.batches` gives each read's batch, so that a consumer that handles
many chunks at once (the loop's step: it logs a read's chunks with one clock reading and calls
the batch observers once) pays per read what it would pay per chunk.

A batch is a list whose items are chunks or :class:`Deltas`: a run of text (or reasoning)
deltas of one block, kept as their texts. Nearly every chunk of a long reply is such a delta;
kept so, a read's thousands of deltas are not thousands of objects built, folded, packed and
observed one at a time, but one list each step extends (the assembler), packs (the log) or
hands on unread (a batch observer that does not look). :func:`expand` gives the chunks a batch
stands for. The chunks and their order are the same either way: the loop's per-chunk path is
the reference, and ``tests/test_batches.py`` holds a step over any batching, runs included, to
the log, the message and the observations it gives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import TypeAlias, overload

from dsh.values._chunks import ReasoningDelta, StreamChunk, TextDelta

__all__ = ["ChunkBatch", "ChunkBatches", "ChunkView", "Deltas", "expand"]


class Deltas:
    """``kind(index, text)`` for each of ``texts``, in order: a run of text deltas
    (``kind`` :class:`~dsh.values._chunks.TextDelta`) or reasoning deltas
    (:class:`~dsh.values._chunks.ReasoningDelta`) of block ``index``. ``texts`` is the run's
    own list (an adapter appends to it as it translates); an empty run stands for no chunk."""

    __slots__ = ("index", "kind", "texts")

    def __init__(
        self, kind: type[TextDelta] | type[ReasoningDelta], index: int, texts: list[str]
    ) -> None:
        self.kind = kind
        self.index = index
        self.texts = texts

    def chunks(self) -> list[StreamChunk]:
        """The deltas it stands for."""
        kind, index = self.kind, self.index
        return [kind(index, text) for text in self.texts]

    def __repr__(self) -> str:
        return f"Deltas({self.kind.__name__}, {self.index}, {self.texts!r})"


#: What an adapter's batch holds: chunks, and runs of deltas kept as their texts.
ChunkBatch: TypeAlias = list[StreamChunk | Deltas]


def expand(batch: Sequence[StreamChunk | Deltas]) -> list[StreamChunk]:
    """The chunks ``batch`` stands for, in order."""
    out: list[StreamChunk] = []
    for item in batch:
        if isinstance(item, Deltas):
            out += item.chunks()
        else:
            out.append(item)
    return out


class ChunkView(Sequence[StreamChunk]):
    """The chunks of ``batch`` as a sequence, built the first time it is read: what a batch
    observer is given (one that does not read it costs nothing per chunk)."""

    __slots__ = ("_batch", "_chunks")

    def __init__(self, batch: Sequence[StreamChunk | Deltas]) -> None:
        self._batch = batch
        self._chunks: list[StreamChunk] | None = None

    def _expanded(self) -> list[StreamChunk]:
        if self._chunks is None:
            self._chunks = expand(self._batch)
        return self._chunks

    def __len__(self) -> int:
        return len(self._expanded())

    @overload
    def __getitem__(self, index: int) -> StreamChunk: ...
    @overload
    def __getitem__(self, index: slice) -> list[StreamChunk]: ...
    def __getitem__(self, index: int | slice) -> StreamChunk | list[StreamChunk]:
        return self._expanded()[index]

    def __iter__(self) -> Iterator[StreamChunk]:
        return iter(self._expanded())


class ChunkBatches(AsyncIterator[StreamChunk]):
    """``batches`` (an async generator of :data:`ChunkBatch` lists, e.g. one per network read) as a
    stream of chunks. Read it one way: chunk by chunk, or with :meth:`batches`. ``aclose``
    closes the generator (the loop closes every stream it reads)."""

    __slots__ = ("_batches", "_pending")

    def __init__(self, batches: AsyncGenerator[ChunkBatch, None]) -> None:
        self._batches = batches
        self._pending: list[StreamChunk] = []

    def __aiter__(self) -> ChunkBatches:
        return self

    async def __anext__(self) -> StreamChunk:
        while not self._pending:
            batch = await self._batches.__anext__()
            self._pending = expand(batch)[::-1]
        return self._pending.pop()

    def batches(self) -> AsyncGenerator[ChunkBatch, None]:
        """The batches, as the adapter made them (possibly empty)."""
        return self._batches

    async def aclose(self) -> None:
        await self._batches.aclose()
