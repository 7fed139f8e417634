"""How a session keeps its log in memory, and the read-only view :attr:`Session.events` gives.

Most of a log's events are ``assistant/chunk`` events of deltas (text, reasoning, tool-call
arguments) and block starts: one per streamed chunk. Kept as objects, each is three objects the
garbage collector tracks (the :class:`~dsh.values._events.SessionEvent`, its
:class:`~dsh.values._events.AssistantChunk` and the chunk) and walks at every full collection for as
long as the session lives, ~190 bytes besides its text. :func:`pack` turns such an event into
``(time, turn, step, code, *chunk fields)``: a tuple of strings and numbers, which the collector
stops tracking the first time it meets it, ~100 bytes. A step's usage and finish chunks (one
whose reason carries no failure) are packed the same way, their usage counts and reason tag
flattened into the tuple; a block's end is packed with its index and its block, which stays an
object (that tuple stays tracked: one object for the collector where the event was three); and
so is every event whose data is of a class of
:data:`PACKED_DATA` (a step's start and end, a tool call, an error, a retry: plain fields, turn
and step first), as ``(time, turn, step, code, *other fields)``. :func:`unpack` builds an equal
event again when the log is read, through an :class:`EventLog`. Every other event (and data or
a chunk of a subclass, or an event logged under another type) stays the object it was.

A store writes the log without building its packed events again: :func:`runs` gives its events
with each run of deltas of one block as one :class:`DeltaRun` (texts and times side by side),
read from the packed tuples when it is given a view of the log, and any other event kept packed
as its ``(seq, packed tuple)``, which
:meth:`EventCodec.rows <dsh.session._codec.EventCodec.rows>` writes as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Any, TypeAlias, cast, overload

import attrs
from attrs import frozen

from dsh.llm._batches import Deltas
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
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
from dsh.values._events import (
    AssistantChunk,
    ErrorEvent,
    RetryEvent,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    check_wanted,
    defined_classes,
)
from dsh.values._value import Value

__all__ = [
    "NO_RUNS",
    "PACKED_CLASSES",
    "PACKED_DATA",
    "TOOL_CALL_CODE",
    "DeltaRun",
    "EventLog",
    "Packed",
    "PackedEvent",
    "delta_run",
    "pack",
    "pack_chunk",
    "pack_data",
    "pack_deltas",
    "run_key",
    "runs",
    "unpack",
]

#: A packed event: ``(time, turn, step, code, *what it keeps of the chunk or the data)``.
Packed: TypeAlias = tuple[Any, ...]

#: An event :func:`runs` read packed from a view: its ``seq`` and the packed tuple.
PackedEvent: TypeAlias = tuple[int, Packed]

_USAGE = attrgetter(*(field.name for field in attrs.fields(TokenUsage)))
#: The finish reasons without fields, by tag: a finish packs its reason's tag.
_REASONS: dict[str, type[Any]] = {
    cls.type: cls for cls in (FinishStop, FinishToolCalls, FinishMaxTokens)
}
_REASON_TAGS = {cls: (tag,) for tag, cls in _REASONS.items()}

#: A getter of some fields of a value, as a tuple (``None``: this value is kept as an object).
_Values: TypeAlias = Callable[[Any], tuple[Any, ...] | None]


def _names(cls: type[Any]) -> list[str]:
    return [field.name for field in attrs.fields(cls)]


def _values(names: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields ``names`` of a value, as a tuple (``attrgetter`` of one name gives the value
    itself, of none it cannot be made)."""
    if not names:
        return lambda _: ()
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda value: (get(value),)


def _usage_values(chunk: UsageChunk) -> tuple[Any, ...] | None:
    return _USAGE(chunk.usage) if type(chunk.usage) is TokenUsage else None


def _finish_values(chunk: Finish) -> tuple[Any, ...] | None:
    return _REASON_TAGS.get(type(chunk.reason))


def _usage(*counts: int) -> UsageChunk:
    return UsageChunk(TokenUsage(*counts))


def _finish(tag: str) -> Finish:
    return Finish(_REASONS[tag]())


#: The chunk classes packed, by code (the tuple's fourth item), each with a getter of what the
#: tuple keeps of a chunk and the builder of the chunk from it. The deltas' codes come first.
_CHUNKS: tuple[tuple[type[Any], _Values, Callable[..., Any]], ...] = (
    *((cls, _values(_names(cls)), cls) for cls in (TextDelta, ReasoningDelta, ToolCallDelta)),
    (BlockStart, _values(_names(BlockStart)), BlockStart),
    (UsageChunk, _usage_values, _usage),  # its usage counts, flattened
    (Finish, _finish_values, _finish),  # its reason's tag, if the reason has no fields
    (BlockEnd, _values(_names(BlockEnd)), BlockEnd),  # its index and its block (an object)
)
PACKED_CLASSES: tuple[type[Any], ...] = tuple(cls for cls, _, _ in _CHUNKS)
#: The code of a tool-call delta: the deltas' codes are those up to it.
TOOL_CALL_CODE = PACKED_CLASSES.index(ToolCallDelta)
_FIELDS = {cls: (code, values) for code, (cls, values, _) in enumerate(_CHUNKS)}
_BUILD = tuple(build for _, _, build in _CHUNKS)
#: The event data classes packed whole, by code after the chunks' (``len(PACKED_CLASSES)`` on):
#: their fields are plain values (strings, numbers, ``None``), ``turn`` and ``step`` first.
PACKED_DATA: tuple[type[Any], ...] = (StepStart, StepEnd, ToolCallEvent, ErrorEvent, RetryEvent)
_FIRST_DATA = len(PACKED_CLASSES)
#: For each packed data class: its code and a getter of its fields after ``turn`` and ``step``.
_DATA = {
    cls: (_FIRST_DATA + code, _values(_names(cls)[2:])) for code, cls in enumerate(PACKED_DATA)
}
assert all(_names(cls)[:2] == ["turn", "step"] for cls in PACKED_DATA)
#: By code: the class of the data of the event a tuple keeps.
_KEPT: tuple[type[Any], ...] = (AssistantChunk,) * _FIRST_DATA + PACKED_DATA
_CHUNK = AssistantChunk.type


def pack(event: SessionEvent) -> SessionEvent | Packed:
    """``event`` as the log keeps it: packed if it is a chunk event of a class of
    :data:`PACKED_CLASSES` (a usage chunk with a plain :class:`~dsh.values._chunks.TokenUsage`, a
    finish without a failure) or its data is of a class of :data:`PACKED_DATA`, logged under
    its own type."""
    packed = pack_data(event.type, event.time, event.data)
    return event if packed is None else packed


def pack_data(name: str, time: float, data: Any) -> Packed | None:
    """What :func:`pack` keeps of an event of type ``name`` appended at ``time`` carrying ``data``,
    if it keeps it packed (``None``: it keeps the event), without the event: a session logs
    so what no observer asks to see."""
    cls = type(data)
    if cls is AssistantChunk:
        return pack_chunk(time, data.turn, data.step, data.chunk) if name == _CHUNK else None
    found = _DATA.get(cls)
    if found is not None and name == cls.type:
        code, values = found
        return (time, data.turn, data.step, code, *values(data))
    return None


def pack_chunk(time: float, turn: int, step: int, chunk: StreamChunk) -> Packed | None:
    """What :func:`pack_data` keeps of the chunk event of ``chunk`` (``None``: the event)."""
    found = _FIELDS.get(type(chunk))
    if found is None:
        return None
    code, values = found
    fields = values(chunk)
    return None if fields is None else (time, turn, step, code, *fields)


def pack_deltas(time: float, turn: int, step: int, run: Deltas) -> list[Packed]:
    """What :func:`pack_chunk` keeps of each delta of ``run``, in order."""
    code = _FIELDS[run.kind][0]
    index = run.index
    return [(time, turn, step, code, index, text) for text in run.texts]


def unpack(seq: int, kept: SessionEvent | Packed) -> SessionEvent:
    """The event at ``seq`` of a log that keeps it as ``kept`` (equal to the one appended)."""
    if not isinstance(kept, tuple):
        return kept
    time, turn, step, code, *fields = kept
    if code < _FIRST_DATA:
        chunk = _BUILD[code](*fields)
        return SessionEvent(_CHUNK, seq, time, AssistantChunk(turn, step, chunk))
    cls = _KEPT[code]
    return SessionEvent(cls.type, seq, time, cls(turn, step, *fields))


#: Where a log noted no run of deltas given at once (a view of a list of events, not a log).
NO_RUNS: Mapping[int, int] = MappingProxyType({})


class EventLog(Sequence[SessionEvent]):
    """Events ``start`` to ``stop`` (exclusive) of a log kept as ``kept``: what
    :attr:`Session.events` returns. The bounds are fixed when it is made and a log only grows,
    so it stays what the log was then. Events are built as they are read: a slice is another
    view, and reading backwards (``reversed``, negative indexes) reads only what it reaches. It
    compares equal to a view or tuple of equal events, as the tuple it replaces did, and pickles
    as a tuple.

    ``runs`` notes where the log was given runs of two or more deltas at once (a network
    read's, :func:`pack_deltas`): ``runs[start] == end`` when every delta from ``start`` to
    ``end`` belongs to one run (:func:`run_key`), so that a store's batch steps over them at
    once instead of comparing each (a long reply's deltas are tens of thousands, a network
    read's hundreds)."""

    __slots__ = ("_kept", "_runs", "_start", "_stop")

    def __init__(
        self,
        kept: list[SessionEvent | Packed],
        start: int,
        stop: int,
        runs: Mapping[int, int] = NO_RUNS,
    ) -> None:
        self._kept = kept
        self._start = start
        self._stop = stop
        self._runs = runs

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
                start = min(self._start + start, self._stop)
                return EventLog(self._kept, start, self._stop, self._runs)
            start, stop, step = index.indices(len(self))
            if step != 1:  # not a stretch of the log: a view of the events themselves
                events: list[SessionEvent | Packed] = [*tuple(self)[index]]
                return EventLog(events, 0, len(events))
            stop = self._start + max(start, stop)
            return EventLog(self._kept, self._start + start, stop, self._runs)
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

    def select(self, *data: type[Any] | str, reverse: bool = False) -> Iterator[SessionEvent]:
        """The events whose ``data`` is an instance of one of the classes ``data``, in order (or
        last first, with ``reverse``): what ``(e for e in view if isinstance(e.data, ...))``
        gives, without building the events kept packed whose class was not asked for (the
        chunk events unless :class:`~dsh.values._events.AssistantChunk` is). Use it to find an
        event in a long log: ``next(session.events.select(TurnEnd, reverse=True), None)``. A
        built-in type whose class is defined when first needed may be named by its tag (as
        :func:`~dsh.hooks._markers.for_events` takes it), without building its class."""
        check_wanted(data)
        classes = defined_classes(data)
        wanted = tuple(issubclass(cls, classes) for cls in _KEPT)
        kept = self._kept
        seqs = (
            range(self._stop - 1, self._start - 1, -1)
            if reverse
            else range(self._start, self._stop)
        )
        for seq in seqs:
            item = kept[seq]
            if not isinstance(item, tuple):
                if isinstance(item.data, classes):
                    yield item
            elif wanted[item[3]]:
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


@frozen(repr=False, eq=False)
class DeltaRun(Value):
    """Two or more consecutive chunk events of deltas of one block: one ``chunk`` class
    (:class:`~dsh.values._chunks.TextDelta`, :class:`~dsh.values._chunks.ReasoningDelta` or
    :class:`~dsh.values._chunks.ToolCallDelta`), turn, step and block ``index``, and for tool-call
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


def run_key(packed: Packed) -> Packed | None:
    """What the deltas of one run share, or ``None`` for a packed event that is in no run."""
    code = packed[3]
    if code < TOOL_CALL_CODE:
        return packed[1:5]  # turn, step, code, index
    if code == TOOL_CALL_CODE and packed[7] is None:
        return packed[1:6]  # and the call id
    return None


def runs(events: Sequence[SessionEvent]) -> Iterator[SessionEvent | DeltaRun | PackedEvent]:
    """``events`` in order, each run of two or more deltas of one block as a :class:`DeltaRun`.
    From a view of a log (a store's batch) the deltas are read where they are kept, packed, no
    packed event is built again, and an event kept packed that is in no run comes as its
    :data:`PackedEvent`, ``(seq, packed)`` (``unpack(*item)`` builds it). From any other
    sequence every item that is not a run is the event given."""
    if isinstance(events, EventLog):
        view, base, kept = True, events._start, events._kept[events._start : events._stop]
    else:
        view, base, kept = False, 0, [pack(event) for event in events]
    # Each item's key once (the loop below is per event); only a packed delta is in a run.
    keys = [run_key(item) if type(item) is tuple else None for item in kept]
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
            seq = base + position if view else events[position].seq
            yield delta_run(seq, cast("list[Packed]", kept[position:stop]))
        position = stop


#: A packed delta's time, and its text (a text or reasoning delta's; a tool call's arguments).
_TIME, _TEXT, _ARGUMENTS = itemgetter(0), itemgetter(5), itemgetter(6)


def delta_run(seq: int, run: list[Packed]) -> DeltaRun:
    """The :class:`DeltaRun` of ``run``, packed deltas of one run (:func:`run_key`), the first
    at ``seq``."""
    _, turn, step, code, index, *fields = run[0]
    text = _ARGUMENTS if code == TOOL_CALL_CODE else _TEXT
    return DeltaRun(
        PACKED_CLASSES[code],
        seq,
        turn,
        step,
        index,
        fields[0] if code == TOOL_CALL_CODE else None,
        list(map(_TIME, run)),
        list(map(text, run)),
    )
