"""The one cattrs converter that turns every dsh value into JSON-ready data and back.

Unions are tagged by a ``type`` field holding the class's wire name (its ``type`` class variable);
optional fields left at their default are omitted, never written as ``null``. Session events are
encoded by :class:`EventCodec`, which knows the event types registered in one harness.

The converter (:func:`converter`) is the definition, and reads everything back. Writing is
what every run does (each checkpoint writes its events) while reading is for a resume, so an
attrs value whose fields are of the kinds dsh's values use is written by a function made for
its class from the same rules (:func:`_plain_value`): a run that only writes neither imports
cattrs (~6 ms of a start) nor waits for it to generate its functions (~0.3 ms a class, at a
run's first checkpoint). ``tests/test_converter.py`` holds the two equal with Hypothesis, for
every event type of the core and the built-in plugins.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

import attrs

from dsh.session._log import (
    NO_RUNS,
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
    EventTypes,
    RawEventData,
    SessionEvent,
    TurnEndReason,
)

if TYPE_CHECKING:
    import cattrs

    from dsh.values._events import EventData

__all__ = ["EventCodec", "dumps", "structure", "unstructure"]

T = TypeVar("T")

#: The tagged unions: each member is written with its wire name (its ``type`` class variable)
#: under ``type``, and read back by it.
_UNIONS = (Block, MessageSource, FinishReason, StreamChunk, TurnEndReason, Text | Image)
#: The wire name of every member of a tagged union, by class.
_TAGS: dict[Any, str] = {
    member: member.type for union in _UNIONS for member in typing.get_args(union)
}


def _tagged_member(cls: Any) -> Any:
    """The tagged union member ``cls`` is or derives from (the nearest in its MRO), or None."""
    for base in getattr(cls, "__mro__", ()):
        if base in _TAGS:
            return base
    return None


@functools.cache
def converter() -> cattrs.Converter:
    """The cattrs converter, built (and cattrs imported) the first time it is needed: to read
    values back, or to write one :func:`unstructure` leaves to it. A run that only writes
    events never imports cattrs (~6 ms of a start)."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

    made = cattrs.Converter(omit_if_default=True, forbid_extra_keys=False)

    def tag_union(union: Any) -> None:
        """Structure ``union`` by its members' tags. The functions cattrs generates for a
        member are built the first time it is met, not here: building all of them cost ~10 ms,
        and a run meets only a few of the ~30 members."""
        by_tag = {member.type: member for member in typing.get_args(union)}
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
                member_structure = built[member] = make_dict_structure_fn(member, made)
            return member_structure(data, None)

        made.register_structure_hook(union, structure_union)
        made.register_unstructure_hook(union, made.unstructure)

    @functools.cache
    def tagged(member: Any) -> Callable[[Any], dict[str, Any]]:
        """The unstructure hook of a union member: its fields, then its tag. A subclass of a
        member is written as that member, as a hook registered on the member class would."""
        plain = make_dict_unstructure_fn(member, made, _cattrs_omit_if_default=True)
        tag = _TAGS[member]

        def unstructure_member(value: Any) -> dict[str, Any]:
            data: dict[str, Any] = plain(value)
            data["type"] = tag
            return data

        return unstructure_member

    made.register_unstructure_hook_factory(
        lambda cls: _tagged_member(cls) is not None, lambda cls: tagged(_tagged_member(cls))
    )
    for union in _UNIONS:
        tag_union(union)
    # The data of an event of an unknown type is the fields it was stored as, however it is
    # turned into JSON: ``unstructure(event.data)`` gives what the log holds, not a wrapper.
    made.register_unstructure_hook(RawEventData, lambda raw: raw.fields)
    made.register_structure_hook(RawEventData, lambda fields, _: RawEventData(fields))
    return made


#: ``dumps(value)``: compact JSON text (ASCII, no spaces) of what :func:`unstructure` produced.
dumps: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def unstructure(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, booleans): what the
    converter writes. An attrs value whose fields are of the kinds dsh's values use is written
    by :func:`_plain_value` (no cattrs); anything else by the converter, its definition."""
    if attrs.has(value.__class__):
        try:
            return _plain_value(value)
        except _Unsure:
            pass
    return converter().unstructure(value)


@overload
def structure(data: Any, cls: type[T]) -> T: ...
@overload
def structure(data: Any, cls: Any) -> Any: ...
def structure(data: Any, cls: Any) -> Any:
    """Rebuild a ``cls`` (a class or a union such as ``StreamChunk``) from what
    :func:`unstructure` produced."""
    return converter().structure(data, cls)


# -- writing without cattrs ---------------------------------------------------------------------


class _Unsure(Exception):
    """A value :func:`_plain_value` does not write as surely as the converter: the converter
    writes it."""


_ATOMS = frozenset({str, int, float, bool, type(None)})
_SCALARS = (str, int, float, bool)
_NONE = type(None)


def _same(value: Any) -> Any:
    return value


def _each(item: Callable[[Any], Any]) -> Callable[[Any], Any]:
    if item is _same:
        return list
    return lambda values: [item(value) for value in values]


def _exactly(cls: type[Any]) -> Callable[[Any], Any]:
    """A field declared as one attrs class: the converter writes that class's fields whatever
    the value's class, so only a value of exactly that class is written here."""

    def write(value: Any) -> Any:
        if value.__class__ is not cls:
            raise _Unsure
        return _plain_value(value)

    return write


def _optional(write: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else write(value)


def _field_writer(declared: Any) -> Callable[[Any], Any] | None:
    """How the converter writes a field ``declared`` so, for the types dsh's values use:
    scalars and literals as they are, tuples of them as lists, attrs classes and unions of
    them by the value's own class. ``None`` for any other type (the converter writes the
    value)."""
    if declared in _SCALARS:
        return _same
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if origin is Literal:
        return _same if all(arg.__class__ in _ATOMS for arg in args) else None
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _field_writer(args[0])
        return None if item is None else _each(item)
    if isinstance(declared, type) and attrs.has(declared):
        return _exactly(declared)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in args if arg is not _NONE]
        if all(option in _SCALARS for option in options):
            return _same
        if len(options) > 1 and all(_tagged_member(option) is option for option in options):
            return _optional(_plain_value) if len(options) < len(args) else _plain_value
        if len(options) == 1 and len(args) == 2:
            inner = _field_writer(options[0])
            return None if inner is None else _optional(inner)
    return None


_WRITERS: dict[type, Callable[[Any], dict[str, Any]] | None] = {}


def _writer_of(cls: type[Any]) -> Callable[[Any], dict[str, Any]] | None:
    """The function writing a ``cls`` as the converter would, made once (one ``compile`` of a
    few lines: what the converter does for each class too, at ~10x the cost of first use);
    ``None`` where the converter writes it."""
    member = _tagged_member(cls)
    target = member if member is not None else cls
    if not attrs.has(target):  # a value where a union of classes was declared
        _WRITERS[cls] = None
        return None
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # an annotation that does not resolve: the converter reads it its way
        _WRITERS[cls] = None
        return None
    names: dict[str, Any] = {}
    lines = ["def write(value):", "    out = {}"]
    for position, field in enumerate(attrs.fields(target)):
        write = _field_writer(hints.get(field.name))
        if write is None or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            _WRITERS[cls] = None
            return None
        if not field.init:  # the converter leaves out what __init__ does not take
            continue
        read = f"value.{field.name}"
        written = "v" if write is _same else f"w{position}(v)"
        names[f"w{position}"] = write
        lines.append(f"    v = {read}")
        if field.default is attrs.NOTHING:
            lines.append(f"    out[{field.name!r}] = {written}")
        else:
            names[f"d{position}"] = field.default
            lines.append(f"    if v != d{position}:  # the converter's test")
            lines.append(f"        out[{field.name!r}] = {written}")
    tag = _TAGS.get(member)
    if tag is not None:
        lines.append(f"    out['type'] = {tag!r}")
    lines.append("    return out")
    exec(compile("\n".join(lines), f"<dsh writer of {target.__qualname__}>", "exec"), names)
    found: Callable[[Any], dict[str, Any]] = names["write"]
    _WRITERS[cls] = found
    return found


def _plain_value(value: Any) -> Any:
    """What the converter writes for the attrs ``value``, written directly: field by field,
    one left at its default omitted, then its tag; :class:`_Unsure` for anything else.
    :func:`converter` is the definition (``tests/test_converter.py`` holds the two equal, with
    Hypothesis)."""
    cls = value.__class__
    if cls is RawEventData:
        return value.fields
    try:
        write = _WRITERS[cls]
    except KeyError:
        write = _writer_of(cls)
    if write is None:
        raise _Unsure
    return write(value)


def _row(cls: type[Any]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """What the converter writes for a ``cls`` from its fields' values, in order: each field by
    name (one left at its default omitted). For a class whose fields are plain values (strings,
    numbers, ``None``), which the converter writes as they are: a usage's counts, which a
    packed usage chunk holds."""
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
        return written

    return row


_USAGE_ROW = _row(TokenUsage)


def _usage_row(counts: Sequence[Any]) -> dict[str, Any]:
    return {"usage": _USAGE_ROW(counts), "type": _TAGS[UsageChunk]}


def _finish_row(fields: Sequence[Any]) -> dict[str, Any]:
    return {"reason": {"type": fields[0]}, "type": _TAGS[Finish]}


def _block_end_row(fields: Sequence[Any]) -> dict[str, Any]:
    return {"index": fields[0], "block": unstructure(fields[1]), "type": _TAGS[BlockEnd]}


def _packed_row(code: int) -> Callable[[int, Packed], dict[str, Any]]:
    """The row of an event kept packed with ``code`` (a chunk class's, or after them a data
    class's), from its seq and tuple ``(time, turn, step, code, *fields)``: one generated
    function a code, the rows' dicts written as literals, each field left at its default
    deleted (the converter's order and omissions: :func:`_row`). A store writes most of a
    step's events so, at every checkpoint. :meth:`EventCodec.encode` of the event built again
    is the definition (``tests/test_converter.py`` holds the two equal, with Hypothesis)."""
    if code < _FIRST_DATA:
        cls = PACKED_CLASSES[code]
        special = {UsageChunk: _usage_row, Finish: _finish_row, BlockEnd: _block_end_row}.get(cls)
        if special is not None:
            return lambda seq, packed: {
                "type": _CHUNK,
                "seq": seq,
                "time": packed[0],
                "data": {"turn": packed[1], "step": packed[2], "chunk": special(packed[4:])},
            }
        inner, tag = "chunk", _TAGS[cls]
    else:
        cls = PACKED_DATA[code - _FIRST_DATA]
        inner, tag = "data", None
    fields = attrs.fields(cls)
    # Where each field is in the tuple: a chunk's after time, turn, step and code; a data
    # class's turn and step are the tuple's own, its other fields after the code.
    at = range(4, 4 + len(fields)) if tag is not None else (1, 2, *range(4, 2 + len(fields)))
    names: dict[str, Any] = {}
    items = [f"{field.name!r}: p[{i}]" for field, i in zip(fields, at, strict=True)]
    if tag is not None:
        items.append(f"'type': {tag!r}")
    lines = ["def build(seq, p):", f"    {inner} = {{{', '.join(items)}}}"]
    for field, i in zip(fields, at, strict=True):
        if field.default is not attrs.NOTHING:
            assert not isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]
            names[f"d{i}"] = field.default
            lines.append(f"    if p[{i}] == d{i}:")
            lines.append(f"        del {inner}[{field.name!r}]")
    if tag is None:
        lines.append(f"    return {{'type': {cls.type!r}, 'seq': seq, 'time': p[0], 'data': data}}")
    else:
        lines.append(
            f"    return {{'type': {_CHUNK!r}, 'seq': seq, 'time': p[0], "
            "'data': {'turn': p[1], 'step': p[2], 'chunk': chunk}}"
        )
    exec(compile("\n".join(lines), f"<dsh row of packed {cls.__qualname__}>", "exec"), names)
    found: Callable[[int, Packed], dict[str, Any]] = names["build"]
    return found


_FIRST_DATA = len(PACKED_CLASSES)
_CHUNK = AssistantChunk.type


def _made_when_first_used(code: int) -> Callable[[int, Packed], dict[str, Any]]:
    """A stand-in for ``_packed_row(code)`` that makes it, and takes its place, when first
    called: a process generates the writers of the packed events it writes (a text turn's
    first checkpoint, a step's start), not every one at import."""

    def first(seq: int, packed: Packed) -> dict[str, Any]:
        build = _PACKED_ROWS[code] = _packed_row(code)
        return build(seq, packed)

    return first


#: By packed code: the row of an event kept packed so (:func:`_packed_row`).
_PACKED_ROWS = [_made_when_first_used(code) for code in range(_FIRST_DATA + len(PACKED_DATA))]


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
        self.types: EventTypes = CORE_EVENT_TYPES.copy()

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
            return self._view_rows(events._kept, events._start, events._stop, events._runs)
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
        self,
        kept: Sequence[SessionEvent | Packed],
        start: int,
        stop: int,
        noted: Mapping[int, int],
    ) -> list[dict[str, Any]]:
        """:meth:`reference_rows` of the events ``start`` to ``stop`` of a log kept as ``kept``
        (a packed event's seq is its place there), with no item, run or packed event built
        between: a store encodes a batch so at every checkpoint, twice a step."""
        out: list[dict[str, Any]] = []
        # ``noted``: where the log was given runs of deltas at once (a network read's), each
        # stepped over whole from its first delta, which is compared as any other.
        position = start
        while position < stop:
            item = kept[position]
            if not isinstance(item, tuple):
                out.append(self.encode(item))
                position += 1
                continue
            code = item[3]
            end = position + 1
            if code <= TOOL_CALL_CODE and run_key(item) is not None:
                # run_key(after) == the item's, inline and field by field (the code first: a
                # packed event of another kind may be shorter), no slice: a long reply's deltas
                # are one run of thousands, and a call per delta would cost as much as the rest
                # of the row. Only text and reasoning deltas are noted (given at once).
                _, turn, step, _, index = item[:5]
                named = code == TOOL_CALL_CODE
                call = item[5] if named else None
                steps = NO_RUNS if named else noted  # a call's are never given at once
                if steps:
                    end = min(steps.get(position, end), stop)
                while end < stop:
                    after = kept[end]
                    if (
                        after.__class__ is not tuple
                        or after[3] != code
                        or after[4] != index
                        or after[2] != step
                        or after[1] != turn
                        or (named and (after[5] != call or after[7] is not None))
                    ):
                        break
                    end = min(steps.get(end, end + 1), stop) if steps else end + 1
            if end - position > 1:
                out.append(_run_row(delta_run(position, cast("list[Packed]", kept[position:end]))))
            else:
                out.append(_PACKED_ROWS[code](position, item))
            position = end
        return out

    def _encode_packed(self, seq: int, packed: Packed) -> dict[str, Any]:
        """What :meth:`encode` gives for the event ``unpack(seq, packed)``, without building it
        (:func:`dsh.session._log.runs` gives a batch so)."""
        return _PACKED_ROWS[packed[3]](seq, packed)

    def decode(self, raw: Mapping[str, Any]) -> SessionEvent:
        name = raw["type"]
        data_cls = self.types.get(name)
        data: EventData = (
            RawEventData(raw["data"]) if data_cls is None else structure(raw["data"], data_cls)
        )
        return SessionEvent(name, raw["seq"], raw["time"], data)
