"""Session events: the durable, append-only facts a session log is made of.

Every event is ``SessionEvent(type, seq, time, data)``; ``data`` is an attrs instance of the class
registered for ``type``, and each class here carries its ``type`` as a class variable (as chunks
and blocks do), so ``session.append(data)`` needs no type string and the strings live here only.
The built-in types are listed in :data:`CORE_EVENT_TYPES` (their classes form the union
:data:`CoreEventData`); plugins add their own through ``dsh_register_event_types``; an event of
a type nobody registered keeps its stored fields as :class:`RawEventData`. ``data`` is typed
:data:`EventData`, so it is read by narrowing: ``isinstance(event.data, TurnEnd)``.

The types a plain turn never logs (:data:`LATER`: the inbox's queue, context and steering,
history rewrites, sub-agents, typed output, permission modes, file checkpoints, approvals) are
defined in :mod:`dsh.values._rare_events`, imported the first time one of their names is read
here (this module's ``__getattr__``) or :data:`CORE_EVENT_TYPES` is asked for one of their tags:
a process that never meets one never builds their ~20 attrs classes (~3 ms of a start). Code
that only tells events apart compares ``event.type`` with the tag held here (``HISTORY_PRUNE``)
and casts; ``tests/test_event_types.py`` holds the tag and the class test equal.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import frozen

from dsh.values._chunks import LlmFailure, StreamChunk, TokenUsage
from dsh.values._content import Block, Image, MessageSource, Text, UserSource
from dsh.values._errors import DshError
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.values._rare_events import (
        ApprovalDecided,
        ApprovalRequested,
        ContextMessage,
        ElidedResult,
        FileBlob,
        FileChange,
        HistoryPrune,
        HistoryRewriteEnd,
        HistoryRewriteStart,
        HistorySummary,
        OutputFailed,
        OutputResult,
        OutputRetry,
        PermissionModeChange,
        QueuedMessage,
        SeedEnd,
        SessionRewind,
        SteeringMessage,
        SubagentEnd,
        SubagentParent,
        SubagentStart,
        WithdrawnMessage,
    )

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "CONTEXT_MESSAGE",
    "CORE_EVENT_TYPES",
    "FILE_BLOB",
    "FILE_CHANGED",
    "HISTORY_PRUNE",
    "HISTORY_REWRITE_END",
    "HISTORY_REWRITE_START",
    "HISTORY_SUMMARY",
    "LATER",
    "OUTPUT_FAILED",
    "OUTPUT_RESULT",
    "OUTPUT_RETRY",
    "PERMISSION_MODE",
    "QUEUED_MESSAGE",
    "RETRY_EVENT",
    "SEED_END",
    "SESSION_REWIND",
    "STEERING_MESSAGE",
    "SUBAGENT_END",
    "SUBAGENT_PARENT",
    "SUBAGENT_START",
    "WITHDRAWN_MESSAGE",
    "ApprovalDecided",
    "ApprovalRequested",
    "AssistantChunk",
    "AssistantMessage",
    "ContextMessage",
    "CoreEventData",
    "ElidedResult",
    "ErrorEvent",
    "EventData",
    "EventTypes",
    "FileBlob",
    "FileChange",
    "HistoryPrune",
    "HistoryRewriteEnd",
    "HistoryRewriteStart",
    "HistorySummary",
    "OutputFailed",
    "OutputResult",
    "OutputRetry",
    "PermissionModeChange",
    "QueuedMessage",
    "RawEventData",
    "RetryEvent",
    "SeedEnd",
    "SessionEvent",
    "SessionRewind",
    "SteeringMessage",
    "StepBoundary",
    "StepEnd",
    "StepStart",
    "SubagentEnd",
    "SubagentParent",
    "SubagentStart",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnAborted",
    "TurnCompleted",
    "TurnDisposed",
    "TurnEnd",
    "TurnEndReason",
    "TurnError",
    "TurnInterrupted",
    "TurnMaxTokens",
    "TurnStart",
    "UserMessage",
    "WithdrawnMessage",
    "check_wanted",
    "defined_classes",
    "event_type_of",
]


#: The type tags of the built-in events a plain turn never logs, whose classes
#: :mod:`dsh.values._rare_events` defines when first needed: a tag tells their events apart
#: without building a class.
WITHDRAWN_MESSAGE, QUEUED_MESSAGE = "inbox/withdrawn", "inbox/queued"
SEED_END, CONTEXT_MESSAGE, STEERING_MESSAGE = (
    "session/end-seed",
    "context/message",
    "steering/message",
)
HISTORY_REWRITE_START, HISTORY_PRUNE = "compaction/start", "compaction/prune"
HISTORY_SUMMARY, HISTORY_REWRITE_END = "compaction/summary", "compaction/end"
SUBAGENT_PARENT, SUBAGENT_START, SUBAGENT_END = "subagent/parent", "subagent/start", "subagent/end"
OUTPUT_RETRY, OUTPUT_RESULT, OUTPUT_FAILED = "output/retry", "output/result", "output/failed"
PERMISSION_MODE = "permissions/mode"
FILE_BLOB, FILE_CHANGED, SESSION_REWIND = "file/blob", "file/changed", "session/rewind"
APPROVAL_REQUESTED, APPROVAL_DECIDED = "approval/requested", "approval/decided"


@frozen(repr=False, eq=False)
class UserMessage(Value):
    """A message that starts (or joins) a turn. ``queued_seq``: the ``inbox/queued`` event it
    consumes, when it was queued while the agent was busy."""

    type: ClassVar[str] = "user/message"
    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


@frozen(repr=False, eq=False)
class TurnStart(Value):
    type: ClassVar[str] = "turn/start"
    turn: int
    source: MessageSource = UserSource()


@frozen(repr=False, eq=False)
class TurnCompleted(Value):
    """The turn ran to its end; ``reason`` says why when a plugin stopped it (a budget)."""

    type: ClassVar[str] = "completed"
    reason: str | None = None


@frozen(repr=False, eq=False)
class TurnAborted(Value):
    type: ClassVar[str] = "aborted"
    reason: str | None = None


@frozen(repr=False, eq=False)
class TurnError(Value):
    type: ClassVar[str] = "error"
    failure: LlmFailure


@frozen(repr=False, eq=False)
class TurnMaxTokens(Value):
    type: ClassVar[str] = "max-tokens"


@frozen(repr=False, eq=False)
class TurnDisposed(Value):
    type: ClassVar[str] = "disposed"


@frozen(repr=False, eq=False)
class TurnInterrupted(Value):
    """Written only by crash recovery: the process died while the turn was open."""

    type: ClassVar[str] = "interrupted"


TurnEndReason = (
    TurnCompleted | TurnAborted | TurnError | TurnMaxTokens | TurnDisposed | TurnInterrupted
)


@frozen(repr=False, eq=False)
class TurnEnd(Value):
    type: ClassVar[str] = "turn/end"
    turn: int
    reason: TurnEndReason


@frozen(repr=False, eq=False)
class StepBoundary(Value):
    """What ``step/start`` and ``step/end`` share: ``isinstance(data, StepBoundary)`` matches
    either. Its two tags were one class before 0.x split it; log the subclasses, which carry
    their tag."""

    turn: int
    step: int


@frozen(repr=False, eq=False)
class StepStart(StepBoundary):
    """Step ``step`` of turn ``turn`` begins (one model call, then its tool calls)."""

    type: ClassVar[str] = "step/start"


@frozen(repr=False, eq=False)
class StepEnd(StepBoundary):
    """Step ``step`` of turn ``turn`` is over."""

    type: ClassVar[str] = "step/end"


# One per streamed chunk: no weak-reference slot, 8 bytes less.
@frozen(weakref_slot=False, repr=False, eq=False)
class AssistantChunk(Value):
    type: ClassVar[str] = "assistant/chunk"
    turn: int
    step: int
    chunk: StreamChunk


@frozen(repr=False, eq=False)
class AssistantMessage(Value):
    """What the model answered in one step; ``model`` is the model id the request named."""

    type: ClassVar[str] = "assistant/message"
    turn: int
    step: int
    content: tuple[Block, ...]
    usage: TokenUsage | None = None
    model: str | None = None


@frozen(repr=False, eq=False)
class ToolCallEvent(Value):
    type: ClassVar[str] = "tool/call"
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@frozen(repr=False, eq=False)
class ToolResultEvent(Value):
    type: ClassVar[str] = "tool/result"
    turn: int
    step: int
    call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False
    code: str | None = None


@frozen(repr=False, eq=False)
class ErrorEvent(Value):
    type: ClassVar[str] = "error"
    turn: int
    step: int
    message: str
    code: str | None = None


RETRY_EVENT = "llm/retry"


@frozen(repr=False, eq=False)
class RetryEvent(Value):
    """Data of ``llm/retry``: attempt ``attempt`` (of at most ``max_attempts``) failed with
    ``code`` (HTTP ``status``, when there was one); the next call starts after ``delay_s``.
    The loop logs one for every :class:`~dsh.values._agent.Retry` a ``dsh_agent_request_error``
    policy returns, whichever plugin decided it; the last two fields let a UI say
    ``↻ 429 rate limited — retrying in 3 s (2/5)``."""

    type: ClassVar[str] = RETRY_EVENT
    turn: int
    step: int
    attempt: int
    code: str
    message: str
    delay_s: float
    status: int | None = None
    max_attempts: int | None = None


@frozen(repr=False, eq=False)
class RawEventData(Value):
    """The data of an event of a type this build does not know (its plugin is not installed),
    kept as the JSON ``fields`` it was stored as: it is written back unchanged, so loading and
    storing an old log loses nothing. Add one with
    :meth:`~dsh.session._session.Session.append_raw`."""

    fields: Mapping[str, Any]


if TYPE_CHECKING:
    #: The data of every built-in event type (``isinstance`` narrows a
    #: :attr:`SessionEvent.data` to one of them), and what :attr:`SessionEvent.data` holds: a
    #: built-in event's data, a plugin-registered attrs class's instance, or the raw fields of
    #: an unknown type. Both are defined with the rare types, in :mod:`dsh.values._rare_events`.
    from dsh.values._rare_events import CoreEventData, EventData


# Every event of every log: no weak-reference slot, 8 bytes less.
@frozen(weakref_slot=False, repr=False, eq=False)
class SessionEvent(Value):
    """One entry of a session log. ``seq`` is contiguous from 0; ``time`` is epoch seconds.
    Read ``data`` by narrowing it: ``isinstance(event.data, TurnEnd)``."""

    type: str
    seq: int
    time: float
    data: EventData


_LATER_MODULE = "dsh.values._rare_events"


def _later(name: str) -> Any:
    """Attribute ``name`` of :mod:`dsh.values._rare_events`, importing it (building its
    classes) if no one has yet."""
    return getattr(importlib.import_module(_LATER_MODULE), name)


class EventTypes(MutableMapping[str, type[Any]]):
    """Event type tags and the classes of their ``data``, as a mapping, where the class of a
    tag may be the name of a class of :mod:`dsh.values._rare_events` not imported yet: looking
    it up imports it (iterating over the items imports it too, as it needs every class; the
    tags alone do not). :data:`CORE_EVENT_TYPES` is one, and each
    :class:`~dsh.session._codec.EventCodec` holds a copy that plugins' types are added to.

    ``tests/test_event_types.py`` holds it equal to the dict of every built-in class by its
    tag that it replaces (which an eager ``_events`` module defined)."""

    __slots__ = ("_types",)

    def __init__(self, types: Mapping[str, type[Any] | str]) -> None:
        self._types: dict[str, type[Any] | str] = dict(types)

    def __getitem__(self, name: str) -> type[Any]:
        found = self._types[name]
        if isinstance(found, str):
            found = self._types[name] = _later(found)
        return found

    def get(self, name: str, default: Any = None) -> Any:
        """``self[name]``, or ``default`` for a tag it does not hold: a decode asks per event."""
        found = self._types.get(name)
        if found is None:
            return default
        return self[name] if isinstance(found, str) else found

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __setitem__(self, name: str, cls: type[Any]) -> None:
        self._types[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._types[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def copy(self) -> EventTypes:
        """Another such mapping, holding the same (to be added to without changing this one)."""
        return EventTypes(self._types)

    def __repr__(self) -> str:
        return f"EventTypes({self._types!r})"


#: Every built-in event type by its tag, in the order :data:`CoreEventData` lists them: its
#: data class, or the name of the class :mod:`dsh.values._rare_events` defines for it.
_BUILT_IN: dict[str, type[Any] | str] = {
    UserMessage.type: UserMessage,
    QUEUED_MESSAGE: "QueuedMessage",
    WITHDRAWN_MESSAGE: "WithdrawnMessage",
    SEED_END: "SeedEnd",
    CONTEXT_MESSAGE: "ContextMessage",
    STEERING_MESSAGE: "SteeringMessage",
    TurnStart.type: TurnStart,
    TurnEnd.type: TurnEnd,
    StepStart.type: StepStart,
    StepEnd.type: StepEnd,
    AssistantChunk.type: AssistantChunk,
    AssistantMessage.type: AssistantMessage,
    ToolCallEvent.type: ToolCallEvent,
    ToolResultEvent.type: ToolResultEvent,
    ErrorEvent.type: ErrorEvent,
    RetryEvent.type: RetryEvent,
    HISTORY_REWRITE_START: "HistoryRewriteStart",
    HISTORY_PRUNE: "HistoryPrune",
    HISTORY_SUMMARY: "HistorySummary",
    HISTORY_REWRITE_END: "HistoryRewriteEnd",
    SUBAGENT_PARENT: "SubagentParent",
    SUBAGENT_START: "SubagentStart",
    SUBAGENT_END: "SubagentEnd",
    OUTPUT_RETRY: "OutputRetry",
    OUTPUT_RESULT: "OutputResult",
    OUTPUT_FAILED: "OutputFailed",
    PERMISSION_MODE: "PermissionModeChange",
    FILE_BLOB: "FileBlob",
    FILE_CHANGED: "FileChange",
    SESSION_REWIND: "SessionRewind",
    APPROVAL_REQUESTED: "ApprovalRequested",
    APPROVAL_DECIDED: "ApprovalDecided",
}

#: The built-in event types :mod:`dsh.values._rare_events` defines, by tag: its class's name
#: there.
LATER: Mapping[str, str] = {tag: cls for tag, cls in _BUILT_IN.items() if isinstance(cls, str)}

#: Every built-in event type and the class of its ``data``, keyed by the class's own tag (a
#: class of :data:`LATER` is defined when it is first looked up).
CORE_EVENT_TYPES: EventTypes = EventTypes(_BUILT_IN)


def defined_classes(wanted: Iterable[type[Any] | str]) -> tuple[type[Any], ...]:
    """The classes ``wanted`` names, for an ``isinstance`` or ``issubclass`` test: each class,
    and for each tag of :data:`LATER` its class if :mod:`dsh.values._rare_events` is imported
    (before it is, no value of it, nor of a subclass, can exist: the test is the same without
    it). What :func:`~dsh.hooks._markers.for_events` and
    :meth:`~dsh.session._log.EventLog.select` take a built-in type's tag for."""
    module = sys.modules.get(_LATER_MODULE)
    found: list[type[Any]] = []
    for item in wanted:
        if not isinstance(item, str):
            found.append(item)
        elif module is not None and hasattr(module, LATER[item]):
            found.append(getattr(module, LATER[item]))
    return tuple(found)


def check_wanted(wanted: Iterable[type[Any] | str]) -> None:
    """Refuse a tag in ``wanted`` that is not one of :data:`LATER` (the built-in types whose
    classes are defined when first needed: any other is named by its class)."""
    for item in wanted:
        if isinstance(item, str) and item not in LATER:
            raise TypeError(
                f"{item!r} is not the tag of a built-in event type defined when first needed "
                f"({', '.join(LATER)}): name an event type by its data class"
            )


#: The names :mod:`dsh.values._rare_events` defines that this module's ``__getattr__`` offers.
_LATER_NAMES = frozenset({*LATER.values(), "ElidedResult", "CoreEventData", "EventData"})


def __getattr__(name: str) -> Any:
    """A class of :mod:`dsh.values._rare_events` (``from dsh.values._events import
    HistoryPrune`` works as it did when it was defined here), its module imported now, and kept
    here from then on."""
    if name not in _LATER_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = _later(name)
    return value


def event_type_of(data: object, registry: Mapping[str, type[Any]] = CORE_EVENT_TYPES) -> str:
    """The type tag of an event carrying ``data``: its class's ``type`` class variable, or else
    the one name ``registry`` holds its class under (a plugin class registered without one)."""
    cls = type(data)
    tag = getattr(cls, "type", None)
    if isinstance(tag, str):
        return tag
    names = [name for name, known in registry.items() if known is cls]
    if cls is RawEventData:
        raise DshError(
            "raw event data carries no type of its own: append it with "
            "session.append_raw(type, data.fields)"
        )
    if len(names) != 1:
        found = f"it is registered as {sorted(names)}" if names else "no event type is registered"
        raise DshError(
            f"cannot tell the event type of a {cls.__qualname__}: {found}; give the class a "
            "'type: ClassVar[str]' tag or register it once through dsh_register_event_types"
        )
    return names[0]
