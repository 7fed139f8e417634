"""Session events: the durable, append-only facts a session log is made of.

Every event is ``SessionEvent(type, seq, time, data)``; ``data`` is an attrs instance of the class
registered for ``type``, and each class here carries its ``type`` as a class variable (as chunks
and blocks do), so ``session.append(data)`` needs no type string and the strings live here only.
The built-in types are listed in :data:`CORE_EVENT_TYPES` (their classes form the union
:data:`CoreEventData`); plugins add their own through ``dsh_register_event_types``; an event of
a type nobody registered keeps its stored fields as :class:`RawEventData`. ``data`` is typed
:data:`EventData`, so it is read by narrowing: ``isinstance(event.data, TurnEnd)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeAlias, get_args

from attrs import AttrsInstance, frozen

from dsh.values._chunks import LlmFailure, StreamChunk, TokenUsage
from dsh.values._content import Block, Image, MessageSource, Text, UserSource
from dsh.values._errors import DshError
from dsh.values._value import Value

__all__ = [
    "CORE_EVENT_TYPES",
    "RETRY_EVENT",
    "ApprovalDecided",
    "ApprovalRequested",
    "AssistantChunk",
    "AssistantMessage",
    "ContextMessage",
    "CoreEventData",
    "ElidedResult",
    "ErrorEvent",
    "EventData",
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
    "event_type_of",
]


@frozen(repr=False, eq=False)
class UserMessage(Value):
    """A message that starts (or joins) a turn. ``queued_seq``: the ``inbox/queued`` event it
    consumes, when it was queued while the agent was busy."""

    type: ClassVar[str] = "user/message"
    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


@frozen(repr=False, eq=False)
class WithdrawnMessage(Value):
    """A queued message taken back out of the inbox before it reached the model (``dsh chat``
    hands steering left over by the user's abort back as a draft): a resume does not restore
    it."""

    type: ClassVar[str] = "inbox/withdrawn"
    queued_seq: int


@frozen(repr=False, eq=False)
class QueuedMessage(Value):
    """A message queued while a turn ran (``steering``: for the running turn). Logged so that a
    crash cannot lose it; the ``user/message`` or ``steering/message`` consuming it names it."""

    type: ClassVar[str] = "inbox/queued"
    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    steering: bool = False


@frozen(repr=False, eq=False)
class SeedEnd(Value):
    """Data of ``session/end-seed``: a resumed session's stored log ends before this event."""

    type: ClassVar[str] = "session/end-seed"
    stored: int


@frozen(repr=False, eq=False)
class ContextMessage(Value):
    """Context injected for the next request without starting a turn (``agent.inject``)."""

    type: ClassVar[str] = "context/message"
    content: tuple[Block, ...]
    source: MessageSource = UserSource()


@frozen(repr=False, eq=False)
class SteeringMessage(Value):
    """A message that arrived while a turn was running, delivered between steps."""

    type: ClassVar[str] = "steering/message"
    turn: int
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
class HistoryRewriteStart(Value):
    """A rewrite of the history began in turn ``turn``, at about ``tokens_before`` tokens.
    ``reason`` is the writer's word for why (the built-in compaction says ``threshold``,
    ``overflow`` or ``manual``; ``overflow`` means the model refused the request as too
    long)."""

    type: ClassVar[str] = "compaction/start"
    turn: int
    reason: str
    tokens_before: int


@frozen(repr=False, eq=False)
class ElidedResult(Value):
    """The result of tool call ``call_id``: the model sees ``note`` instead of its content."""

    call_id: str
    note: str


@frozen(repr=False, eq=False)
class HistoryPrune(Value):
    """Old tool results whose content the model now sees as a short note instead."""

    type: ClassVar[str] = "compaction/prune"
    elided: tuple[ElidedResult, ...]


@frozen(repr=False, eq=False)
class HistorySummary(Value):
    """Everything the model saw from events before ``replaces_upto`` is now ``summary``.
    ``usage`` and ``model`` are those of the model call that wrote it, if one did (it is
    billed like any other)."""

    type: ClassVar[str] = "compaction/summary"
    replaces_upto: int
    summary: str
    tokens_before: int
    tokens_after: int
    usage: TokenUsage | None = None
    model: str | None = None


@frozen(repr=False, eq=False)
class HistoryRewriteEnd(Value):
    """The rewrite is over: the history is now about ``tokens_after`` tokens; ``error`` says
    what failed (the prunes and summaries logged before it stand)."""

    type: ClassVar[str] = "compaction/end"
    tokens_after: int
    error: str | None = None


SUBAGENT_PARENT, SUBAGENT_START, SUBAGENT_END = "subagent/parent", "subagent/start", "subagent/end"


@frozen(repr=False, eq=False)
class SubagentParent(Value):
    """Data of ``subagent/parent``, a sub-agent's first event: where it was made (the parent's
    agent and session, its turn and step then, and the tool call that made it, if one did)."""

    type: ClassVar[str] = SUBAGENT_PARENT
    agent_id: str
    session_id: str
    turn: int
    step: int
    call_id: str | None = None


@frozen(repr=False, eq=False)
class SubagentStart(Value):
    """Data of ``subagent/start`` in the parent's log: child ``agent_id`` runs in
    ``session_id`` (made by tool call ``call_id``, if one did)."""

    type: ClassVar[str] = SUBAGENT_START
    agent_id: str
    session_id: str
    turn: int
    step: int
    call_id: str | None = None


@frozen(repr=False, eq=False)
class SubagentEnd(Value):
    """Data of ``subagent/end`` in the parent's log: the child is gone. ``outcome`` is how its
    last turn ended (``completed``, ``error``, ``aborted``..., ``interrupted`` after a crash,
    ``none`` if it ran no turn); ``usage`` and ``model``: what it used, for budgets."""

    type: ClassVar[str] = SUBAGENT_END
    agent_id: str
    session_id: str
    outcome: str
    usage: TokenUsage | None = None
    model: str | None = None
    call_id: str | None = None


OUTPUT_RETRY, OUTPUT_RESULT, OUTPUT_FAILED = "output/retry", "output/result", "output/failed"


@frozen(repr=False, eq=False)
class OutputRetry(Value):
    """Data of ``output/retry``: attempt ``attempt`` of turn ``turn`` at a typed answer did not
    validate, because of ``error``, which is sent back to the model (the last attempt, with none
    left, is logged ``output/failed`` instead)."""

    type: ClassVar[str] = OUTPUT_RETRY
    turn: int
    attempt: int
    error: str


@frozen(repr=False, eq=False)
class OutputResult(Value):
    """Data of ``output/result``: the validated typed answer of turn ``turn``, as JSON values."""

    type: ClassVar[str] = OUTPUT_RESULT
    turn: int
    value: Any


@frozen(repr=False, eq=False)
class OutputFailed(Value):
    """Data of ``output/failed``: turn ``turn`` gave up after ``attempts`` invalid answers."""

    type: ClassVar[str] = OUTPUT_FAILED
    turn: int
    attempts: int
    error: str


PERMISSION_MODE = "permissions/mode"


@frozen(repr=False, eq=False)
class PermissionModeChange(Value):
    """Data of ``permissions/mode``: from here on, this agent's tool calls are judged in
    ``mode`` (``plan``, ``read-only``, ``workspace-write``, ``full``), e.g. after ``/approve``."""

    type: ClassVar[str] = PERMISSION_MODE
    mode: str


FILE_BLOB, FILE_CHANGED, SESSION_REWIND = "file/blob", "file/changed", "session/rewind"


@frozen(repr=False, eq=False)
class FileBlob(Value):
    """Data of ``file/blob``: the bytes of a file as a :class:`FileChange` found them before
    changing it, base64-encoded in ``data`` (``size`` bytes), under their SHA-256 ``digest``
    (``sha256:<hex>``). Logged once per session per digest, before the first change that
    needs it: the log holds its own checkpoints, wherever it is stored or forked."""

    type: ClassVar[str] = FILE_BLOB
    digest: str
    size: int
    data: str


@frozen(repr=False, eq=False)
class FileChange(Value):
    """Data of ``file/changed``: in turn ``turn``, tool ``tool`` (call ``call_id``) changes the
    file at ``path`` (absolute) from ``before`` to ``after``: each a content digest
    (``sha256:<hex>``), or ``None`` for no file. Logged before the change is made; its
    previous content is in a :class:`FileBlob` of the same digest unless ``lost`` says why it
    was not kept (a size cap): such a file cannot be rewound. ``error``: the change failed and
    the file kept ``after`` (which is then ``before``)."""

    type: ClassVar[str] = FILE_CHANGED
    turn: int
    tool: str
    path: str
    before: str | None
    after: str | None
    call_id: str | None = None
    lost: str | None = None
    error: str | None = None


@frozen(repr=False, eq=False)
class SessionRewind(Value):
    """Data of ``session/rewind``: the files the built-in file tools changed in session
    ``source`` since turn ``to_turn`` began were put back as they were before it. ``restored``
    lists the paths put back, ``conflicts`` those changed since by something else and kept,
    ``lost`` those whose earlier content was not kept; ``shell_calls`` counts the commands
    run since, whose effects stay."""

    type: ClassVar[str] = SESSION_REWIND
    source: str
    to_turn: int
    restored: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    shell_calls: int = 0


@frozen(repr=False, eq=False)
class ApprovalRequested(Value):
    """Data of ``approval/requested``: tool call ``call_id`` (of tool ``name``, step ``step``
    of turn ``turn``) needs a decision nobody present could give, so the turn is parked until
    ``agent.decide`` records one (``approval/decided``). ``summary`` is the call's arguments,
    shortened; ``effect`` what the tool declares it does; ``by`` what asked (a ``rule`` or the
    ``mode``) and ``reason`` why; past ``timeout_s`` seconds (``None``: never) the call is
    denied (``APPROVAL_TIMEOUT``)."""

    type: ClassVar[str] = "approval/requested"
    turn: int
    step: int
    call_id: str
    name: str
    summary: str
    effect: str
    by: str
    reason: str
    timeout_s: float | None = None


@frozen(repr=False, eq=False)
class ApprovalDecided(Value):
    """Data of ``approval/decided``: whether call ``call_id`` (of tool ``name``) may run,
    decided ``by`` a ``rule``, the ``mode``, the ``approver`` (a host that answered, or
    ``agent.decide`` for a parked call), ``timeout`` (a parked call's ``timeout_s`` passed) or
    ``nobody`` (no host could ask: denied), and why."""

    type: ClassVar[str] = "approval/decided"
    call_id: str
    name: str
    allowed: bool
    by: str
    reason: str


#: The data of every built-in event type: ``isinstance`` narrows a :attr:`SessionEvent.data` to
#: one of them.
CoreEventData: TypeAlias = (
    UserMessage
    | QueuedMessage
    | WithdrawnMessage
    | SeedEnd
    | ContextMessage
    | SteeringMessage
    | TurnStart
    | TurnEnd
    | StepStart
    | StepEnd
    | AssistantChunk
    | AssistantMessage
    | ToolCallEvent
    | ToolResultEvent
    | ErrorEvent
    | RetryEvent
    | HistoryRewriteStart
    | HistoryPrune
    | HistorySummary
    | HistoryRewriteEnd
    | SubagentParent
    | SubagentStart
    | SubagentEnd
    | OutputRetry
    | OutputResult
    | OutputFailed
    | PermissionModeChange
    | FileBlob
    | FileChange
    | SessionRewind
    | ApprovalRequested
    | ApprovalDecided
)

_CORE_EVENT_CLASSES: tuple[type[CoreEventData], ...] = get_args(CoreEventData)


@frozen(repr=False, eq=False)
class RawEventData(Value):
    """The data of an event of a type this build does not know (its plugin is not installed),
    kept as the JSON ``fields`` it was stored as: it is written back unchanged, so loading and
    storing an old log loses nothing. Add one with
    :meth:`~dsh.session._session.Session.append_raw`."""

    fields: Mapping[str, Any]


#: What :attr:`SessionEvent.data` holds: a built-in event's data, a plugin-registered attrs
#: class's instance, or the raw fields of an unknown type.
EventData: TypeAlias = CoreEventData | RawEventData | AttrsInstance


# Every event of every log: no weak-reference slot, 8 bytes less.
@frozen(weakref_slot=False, repr=False, eq=False)
class SessionEvent(Value):
    """One entry of a session log. ``seq`` is contiguous from 0; ``time`` is epoch seconds.
    Read ``data`` by narrowing it: ``isinstance(event.data, TurnEnd)``."""

    type: str
    seq: int
    time: float
    data: EventData


#: Every built-in event type and the class of its ``data``, keyed by the class's own tag.
CORE_EVENT_TYPES: dict[str, type[Any]] = {cls.type: cls for cls in _CORE_EVENT_CLASSES}


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
