"""How a session keeps its log in memory, and the read-only view :attr:`Session.events` gives.

Most of a log's events are ``assistant/chunk`` events of deltas (text, reasoning, tool-call
arguments) and block starts: one per streamed chunk. Kept as objects, each is three objects the
garbage collector tracks (the :class:`~dsh.events.SessionEvent`, its
:class:`~dsh.events.AssistantChunk` and the chunk) and walks at every full collection for as
long as the session lives, ~190 bytes besides its text. :func:`pack` turns such an event into
``(time, turn, step, code, *chunk fields)``: a tuple of strings and numbers, which the collector
stops tracking the first time it meets it, ~100 bytes. :func:`unpack` builds an equal event again
when the log is read, through an :class:`EventLog`. Every other event (and a chunk of a
subclass, or an event logged under another type) stays the object it was.

A store writes the log without building its chunk events again: :func:`runs` gives its events
with each run of deltas of one block as one :class:`DeltaRun` (texts and times side by side),
read from the packed tuples when it is given a view of the log, and any other chunk event kept
packed as its ``(seq, packed tuple)``, which
:meth:`EventCodec.encode_packed <dsh.converter.EventCodec.encode_packed>` writes as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any, TypeAlias, cast, overload

import attrs
from attrs import frozen

from dsh.chunks import BlockStart, ReasoningDelta, TextDelta, ToolCallDelta
from dsh.events import AssistantChunk, SessionEvent
from dsh.value import Value

__all__ = [
    "PACKED_CLASSES",
    "DeltaRun",
    "EventLog",
    "Packed",
    "PackedEvent",
    "pack",
    "runs",
    "unpack",
]

#: A packed chunk event: ``(time, turn, step, code, *fields of the chunk)``.
Packed: TypeAlias = tuple[Any, ...]

#: A chunk event :func:`runs` read packed from a view: its ``seq`` and the packed tuple.
PackedEvent: TypeAlias = tuple[int, Packed]

#: The chunk classes packed, by code (the tuple's fourth item). The deltas' codes come first.
PACKED_CLASSES: tuple[type[Any], ...] = (TextDelta, ReasoningDelta, ToolCallDelta, BlockStart)
_TOOL_CALL = 2
#: For each packed class: its code and a getter of its fields, in order.
_FIELDS = {
    cls: (code, attrgetter(*(field.name for field in attrs.fields(cls))))
    for code, cls in enumerate(PACKED_CLASSES)
}
_CHUNK = AssistantChunk.type
# ``attrgetter`` of one name gives the value, not a 1-tuple: every packed class has more fields.
assert all(len(attrs.fields(cls)) > 1 for cls in PACKED_CLASSES)


def pack(event: SessionEvent) -> SessionEvent | Packed:
    """``event`` as the log keeps it: packed if it is a delta's or block start's chunk event."""
    data = event.data
    if type(data) is AssistantChunk and event.type == _CHUNK:
        found = _FIELDS.get(type(data.chunk))
        if found is not None:
            code, fields = found
            return (event.time, data.turn, data.step, code, *fields(data.chunk))
    return event


def unpack(seq: int, kept: SessionEvent | Packed) -> SessionEvent:
    """The event at ``seq`` of a log that keeps it as ``kept`` (equal to the one appended)."""
    if not isinstance(kept, tuple):
        return kept
    time, turn, step, code, *fields = kept
    return SessionEvent(
        _CHUNK, seq, time, AssistantChunk(turn, step, PACKED_CLASSES[code](*fields))
    )


class EventLog(Sequence[SessionEvent]):
    """Events ``start`` to ``stop`` (exclusive) of a log kept as ``kept``: what
    :attr:`Session.events` returns. The bounds are fixed when it is made and a log only grows,
    so it stays what the log was then. Events are built as they are read: a slice is another
    view, and reading backwards (``reversed``, negative indexes) reads only what it reaches. It
    compares equal to a view or tuple of equal events, as the tuple it replaces did, and pickles
    as a tuple."""

    __slots__ = ("_kept", "_start", "_stop")

    def __init__(self, kept: list[SessionEvent | Packed], start: int, stop: int) -> None:
        self._kept = kept
        self._start = start
        self._stop = stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> EventLog: ...
    def __getitem__(self, index: int | slice) -> SessionEvent | EventLog:
        if isinstance(index, slice):
            start = index.start
            if index.stop is index.step is None and type(start) is int and start >= 0:
                # events[n:], the common slice: a tail
                return EventLog(self._kept, min(self._start + start, self._stop), self._stop)
            start, stop, step = index.indices(len(self))
            if step != 1:  # not a stretch of the log: a view of the events themselves
                events: list[SessionEvent | Packed] = [*tuple(self)[index]]
                return EventLog(events, 0, len(events))
            return EventLog(self._kept, self._start + start, self._start + max(start, stop))
        seq = self._start + index if index >= 0 else self._stop + index
        if not self._start <= seq < self._stop:
            raise IndexError("event index out of range")
        return unpack(seq, self._kept[seq])

    def __iter__(self) -> Iterator[SessionEvent]:
        return map(unpack, range(self._start, self._stop), self._kept[self._start : self._stop])

    def __reversed__(self) -> Iterator[SessionEvent]:
        kept = self._kept
        for seq in range(self._stop - 1, self._start - 1, -1):
            yield unpack(seq, kept[seq])

    def select(self, *data: type[Any], reverse: bool = False) -> Iterator[SessionEvent]:
        """The events whose ``data`` is an instance of one of the classes ``data``, in order (or
        last first, with ``reverse``): what ``(e for e in view if isinstance(e.data, ...))``
        gives, without building the chunk events kept packed unless
        :class:`~dsh.events.AssistantChunk` is asked for. Use it to find an event in a long
        log: ``next(session.events.select(TurnEnd, reverse=True), None)``."""
        chunks = any(issubclass(AssistantChunk, cls) for cls in data)
        kept = self._kept
        seqs = (
            range(self._stop - 1, self._start - 1, -1)
            if reverse
            else range(self._start, self._stop)
        )
        for seq in seqs:
            item = kept[seq]
            if not isinstance(item, tuple):
                if isinstance(item.data, data):
                    yield item
            elif chunks:
                yield unpack(seq, item)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (tuple(self),)


@frozen(repr=False)
class DeltaRun(Value):
    """Two or more consecutive chunk events of deltas of one block: one ``chunk`` class
    (:class:`~dsh.chunks.TextDelta`, :class:`~dsh.chunks.ReasoningDelta` or
    :class:`~dsh.chunks.ToolCallDelta`), turn, step and block ``index``, and for tool-call
    arguments one ``call_id`` and no tool name on any of them. ``seq`` is the first event's;
    ``times`` and ``texts`` (a tool call's ``arguments_delta``) are each event's, in order."""

    chunk: type[TextDelta | ReasoningDelta | ToolCallDelta]
    seq: int
    turn: int
    step: int
    index: int
    call_id: str | None
    times: list[float]
    texts: list[str]


def _run_key(packed: Packed) -> Packed | None:
    """What the deltas of one run share, or ``None`` for a packed chunk that is in no run."""
    code = packed[3]
    if code < _TOOL_CALL:
        return packed[1:5]  # turn, step, code, index
    if code == _TOOL_CALL and packed[7] is None:
        return packed[1:6]  # and the call id
    return None


def runs(events: Sequence[SessionEvent]) -> Iterator[SessionEvent | DeltaRun | PackedEvent]:
    """``events`` in order, each run of two or more deltas of one block as a :class:`DeltaRun`.
    From a view of a log (a store's batch) the deltas are read where they are kept, packed, no
    chunk event is built again, and a chunk event kept packed that is in no run comes as its
    :data:`PackedEvent`, ``(seq, packed)`` (``unpack(*item)`` builds it). From any other
    sequence every item that is not a run is the event given."""
    if isinstance(events, EventLog):
        view, base, kept = True, events._start, events._kept[events._start : events._stop]
    else:
        view, base, kept = False, 0, [pack(event) for event in events]
    # Each item's key once (the loop below is per event); only a packed delta is in a run.
    keys = [_run_key(item) if type(item) is tuple else None for item in kept]
    position, end = 0, len(kept)
    while position < end:
        key = keys[position]
        stop = position + 1
        if key is not None:
            while stop < end and keys[stop] == key:
                stop += 1
        if stop - position == 1:
            item = kept[position]
            if not isinstance(item, tuple):
                yield item  # an event, kept as it was
            else:
                yield (base + position, item) if view else events[position]
        else:
            run = cast("list[Packed]", kept[position:stop])
            _, turn, step, code, index, *fields = run[0]
            text = 6 if code == _TOOL_CALL else 5
            yield DeltaRun(
                PACKED_CLASSES[code],
                base + position if view else events[position].seq,
                turn,
                step,
                index,
                fields[0] if code == _TOOL_CALL else None,
                [item[0] for item in run],
                [item[text] for item in run],
            )
        position = stop
