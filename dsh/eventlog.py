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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any, TypeAlias, overload

import attrs

from dsh.chunks import BlockStart, ReasoningDelta, TextDelta, ToolCallDelta
from dsh.events import AssistantChunk, SessionEvent

__all__ = ["EventLog", "Packed", "pack", "unpack"]

#: A packed chunk event: ``(time, turn, step, code, *fields of the chunk)``.
Packed: TypeAlias = tuple[Any, ...]

#: The chunk classes packed, by code (the tuple's fourth item).
_CLASSES: tuple[type[Any], ...] = (TextDelta, ReasoningDelta, ToolCallDelta, BlockStart)
#: For each packed class: its code and a getter of its fields, in order.
_FIELDS = {
    cls: (code, attrgetter(*(field.name for field in attrs.fields(cls))))
    for code, cls in enumerate(_CLASSES)
}
_CHUNK = AssistantChunk.type
# ``attrgetter`` of one name gives the value, not a 1-tuple: every packed class has more fields.
assert all(len(attrs.fields(cls)) > 1 for cls in _CLASSES)


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
    return SessionEvent(_CHUNK, seq, time, AssistantChunk(turn, step, _CLASSES[code](*fields)))


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
    def __getitem__(self, index: slice) -> Sequence[SessionEvent]: ...
    def __getitem__(self, index: int | slice) -> SessionEvent | Sequence[SessionEvent]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return tuple(self)[index]
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
