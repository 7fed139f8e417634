"""The one cattrs converter that turns every dsh value into JSON-ready data and back.

Unions are tagged by a ``type`` field holding the class's wire name (its ``type`` class variable);
optional fields left at their default are omitted, never written as ``null``. Session events are
encoded by :class:`EventCodec`, which knows the event types registered in one harness.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast, overload

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from dsh.session._log import (
    PACKED_CLASSES,
    PACKED_DATA,
    TOOL_CALL_CODE,
    DeltaRun,
    EventLog,
    Packed,
    delta_run,
    run_key,
    runs,
)
from dsh.values._chunks import (
    BlockEnd,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Block, Image, MessageSource, Text
from dsh.values._errors import DshError
from dsh.values._events import (
    CORE_EVENT_TYPES,
    AssistantChunk,
    EventData,
    RawEventData,
    SessionEvent,
    TurnEndReason,
)

__all__ = ["EventCodec", "converter", "dumps", "structure", "unstructure"]

T = TypeVar("T")

converter = cattrs.Converter(omit_if_default=True, forbid_extra_keys=False)


#: The wire name of every member of a tagged union, by class.
_TAGS: dict[Any, str] = {}


def _tag_union(union: Any) -> None:
    """Tag every member of ``union`` with its wire name, and structure the union by that tag.

    Members carry the tag whether they are unstructured as the union or on their own, so a chunk
    written alone reads back as the same chunk. The functions cattrs generates for a member are
    built the first time it is met, not here: building all of them cost ~10 ms at ``import
    dsh``, and a run meets only a few of the ~30 members.
    """
    by_tag: dict[str, Any] = {}
    for member in union.__args__:
        by_tag[member.type] = member
        _TAGS[member] = member.type
    built: dict[Any, Callable[[Any, Any], Any]] = {}

    def structure_union(data: Any, _: Any) -> Any:
        try:
            member = by_tag[data["type"]]
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"expected one of {sorted(by_tag)} tagged by 'type', got {data!r}"
            ) from exc
        member_structure = built.get(member)
        if member_structure is None:
            member_structure = built[member] = make_dict_structure_fn(member, converter)
        return member_structure(data, None)

    converter.register_structure_hook(union, structure_union)
    converter.register_unstructure_hook(union, converter.unstructure)


def _tagged_member(cls: Any) -> Any:
    """The tagged union member ``cls`` is or derives from (the nearest in its MRO), or None."""
    for base in getattr(cls, "__mro__", ()):
        if base in _TAGS:
            return base
    return None


@functools.cache
def _tagged(member: Any) -> Any:
    """The unstructure hook of a union member: its fields, then its tag. Made on first use; a
    subclass of a member is written as that member, as a hook registered on the member class
    would write it."""
    plain = make_dict_unstructure_fn(member, converter, _cattrs_omit_if_default=True)
    tag = _TAGS[member]

    def unstructure_member(value: Any) -> dict[str, Any]:
        data: dict[str, Any] = plain(value)
        data["type"] = tag
        return data

    return unstructure_member


converter.register_unstructure_hook_factory(
    lambda cls: _tagged_member(cls) is not None, lambda cls: _tagged(_tagged_member(cls))
)
for _union in (Block, MessageSource, FinishReason, StreamChunk, TurnEndReason):
    _tag_union(_union)
_tag_union(Text | Image)

# The data of an event of an unknown type is the fields it was stored as, however it is turned
# into JSON: ``unstructure(event.data)`` gives what the log holds, not a wrapper around it.
converter.register_unstructure_hook(RawEventData, lambda raw: raw.fields)
converter.register_structure_hook(RawEventData, lambda fields, _: RawEventData(fields))


#: ``dumps(value)``: compact JSON text (ASCII, no spaces) of what :func:`unstructure` produced.
dumps: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def unstructure(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, booleans)."""
    return converter.unstructure(value)


@overload
def structure(data: Any, cls: type[T]) -> T: ...
@overload
def structure(data: Any, cls: Any) -> Any: ...
def structure(data: Any, cls: Any) -> Any:
    """Rebuild a ``cls`` (a class or a union such as ``StreamChunk``) from what
    :func:`unstructure` produced."""
    return converter.structure(data, cls)


def _row(cls: type[Any], tag: str | None = None) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """What the converter writes for a ``cls`` from its fields' values, in order: each field by
    name (one left at its default omitted), then the tag of a union member. For classes whose
    fields are plain values (strings, numbers, ``None``), which the converter writes as they
    are: those a packed tuple holds."""
    fields = attrs.fields(cls)
    assert not any(isinstance(field.default, attrs.Factory) for field in fields)  # type: ignore[arg-type]
    names = tuple(field.name for field in fields)
    defaults = tuple(
        (position, field.name, field.default)
        for position, field in enumerate(fields)
        if field.default is not attrs.NOTHING
    )

    def row(values: Sequence[Any]) -> dict[str, Any]:
        written = dict(zip(names, values, strict=True))
        for position, name, default in defaults:
            if values[position] == default:
                del written[name]
        if tag is not None:
            written["type"] = tag
        return written

    return row


_USAGE_ROW = _row(TokenUsage)


def _usage_row(counts: Sequence[Any]) -> dict[str, Any]:
    return {"usage": _USAGE_ROW(counts), "type": _TAGS[UsageChunk]}


def _finish_row(fields: Sequence[Any]) -> dict[str, Any]:
    return {"reason": {"type": fields[0]}, "type": _TAGS[Finish]}


def _block_end_row(fields: Sequence[Any]) -> dict[str, Any]:
    return {"index": fields[0], "block": unstructure(fields[1]), "type": _TAGS[BlockEnd]}


#: By packed code: a chunk's row from what its packed tuple holds after turn, step and code
#: (a usage chunk's counts, a finish's reason tag, a block end's index and block, the block
#: unstructured here; every other chunk's fields, plain values written as they are).
_PACKED_CHUNKS = tuple(
    {UsageChunk: _usage_row, Finish: _finish_row, BlockEnd: _block_end_row}.get(cls)
    or _row(cls, _TAGS[cls])
    for cls in PACKED_CLASSES
)
#: By packed code (from ``len(PACKED_CLASSES)`` on): an event's type and its data's row.
_PACKED_DATA = tuple((cls.type, _row(cls)) for cls in PACKED_DATA)
_FIRST_DATA = len(PACKED_CLASSES)
_CHUNK = AssistantChunk.type


#: The kind a run's row names, by the class of its deltas.
RUN_KINDS: dict[type, str] = {
    TextDelta: "text-delta",
    ReasoningDelta: "reasoning-delta",
    ToolCallDelta: "tool-call-delta",
}


def _run_row(run: DeltaRun) -> dict[str, Any]:
    row: dict[str, Any] = {
        "packed": RUN_KINDS[run.chunk],
        "seq": run.seq,
        "turn": run.turn,
        "step": run.step,
        "index": run.index,
        "times": run.times,
        "texts": run.texts,
    }
    if run.call_id is not None:
        row["id"] = run.call_id
    return row


class EventCodec:
    """Encodes and decodes session events by their registered type.

    Events of a type nobody registered (a plugin that is no longer installed) decode with their
    ``data`` kept as :class:`~dsh.values._events.RawEventData`, the stored fields, and encode back
    to those fields, so loading an old log never loses anything.
    """

    def __init__(self) -> None:
        self.types: dict[str, type[Any]] = dict(CORE_EVENT_TYPES)

    def register(self, name: str, data_cls: type[Any]) -> None:
        """Declare the attrs class that holds the ``data`` of events of type ``name``."""
        known = self.types.get(name)
        if known is not None and known is not data_cls:
            raise DshError(f"session event type {name!r} is already registered as {known!r}")
        self.types[name] = data_cls

    def encode(self, event: SessionEvent) -> dict[str, Any]:
        data = event.data
        fields = data.fields if isinstance(data, RawEventData) else unstructure(data)
        return {"type": event.type, "seq": event.seq, "time": event.time, "data": fields}

    def rows(self, events: Sequence[SessionEvent]) -> list[dict[str, Any]]:
        """The JSON-ready rows a store writes for ``events`` (a batch, such as
        ``session.events[stored:]``), in order: each event's :meth:`encode`, except that a run
        of two or more consecutive deltas of one block (text, reasoning, or one tool call's
        arguments) is one row, ``{"packed": kind, "seq", "turn", "step", "index", "times",
        "texts"}`` (``kind``: ``"text-delta"``, ``"reasoning-delta"`` or ``"tool-call-delta"``,
        with the call's ``"id"``; ``seq`` the first event's, ``times`` and ``texts`` each
        event's). A store that keeps one row per event uses :meth:`encode` instead.

        A view of a log (what a store's batch is) is encoded in one pass over what the log
        keeps (:meth:`_view_rows`); :meth:`reference_rows` is the definition, which
        ``tests/test_eventlog.py`` holds it to."""
        if isinstance(events, EventLog):
            return self._view_rows(events._kept, events._start, events._stop)
        return self.reference_rows(events)

    def reference_rows(self, events: Sequence[SessionEvent]) -> list[dict[str, Any]]:
        """:meth:`rows`, plainly: the items of :func:`dsh.session._log.runs`, each encoded."""
        out: list[dict[str, Any]] = []
        for item in runs(events):
            if isinstance(item, tuple):
                out.append(self._encode_packed(*item))
            elif isinstance(item, DeltaRun):
                out.append(_run_row(item))
            else:
                out.append(self.encode(item))
        return out

    def _view_rows(
        self, kept: Sequence[SessionEvent | Packed], start: int, stop: int
    ) -> list[dict[str, Any]]:
        """:meth:`reference_rows` of the events ``start`` to ``stop`` of a log kept as ``kept``
        (a packed event's seq is its place there), with no item, run or packed event built
        between: a store encodes a batch so at every checkpoint, twice a step."""
        out: list[dict[str, Any]] = []
        position = start
        while position < stop:
            item = kept[position]
            if not isinstance(item, tuple):
                out.append(self.encode(item))
                position += 1
                continue
            code = item[3]
            key = run_key(item) if code <= TOOL_CALL_CODE else None
            end = position + 1
            if key is not None:
                # run_key(after) == key, inline: a long reply's deltas are one run of
                # thousands, and a call per delta would cost as much as the rest of the row.
                size = len(key) + 1
                named = code == TOOL_CALL_CODE
                while end < stop:
                    after = kept[end]
                    if (
                        after.__class__ is not tuple
                        or after[1:size] != key
                        or (named and after[7] is not None)
                    ):
                        break
                    end += 1
            if end - position > 1:
                out.append(_run_row(delta_run(position, cast("list[Packed]", kept[position:end]))))
            else:
                out.append(self._encode_packed(position, item))
            position = end
        return out

    def _encode_packed(self, seq: int, packed: Packed) -> dict[str, Any]:
        """What :meth:`encode` gives for the event ``unpack(seq, packed)``, without building it
        (:func:`dsh.session._log.runs` gives a batch so)."""
        time, turn, step, code, *fields = packed
        if code < _FIRST_DATA:
            data = {"turn": turn, "step": step, "chunk": _PACKED_CHUNKS[code](fields)}
            return {"type": _CHUNK, "seq": seq, "time": time, "data": data}
        name, row = _PACKED_DATA[code - _FIRST_DATA]
        return {"type": name, "seq": seq, "time": time, "data": row((turn, step, *fields))}

    def decode(self, raw: Mapping[str, Any]) -> SessionEvent:
        name = raw["type"]
        data_cls = self.types.get(name)
        data: EventData = (
            RawEventData(raw["data"]) if data_cls is None else structure(raw["data"], data_cls)
        )
        return SessionEvent(name, raw["seq"], raw["time"], data)
