"""The built-in session event types a plain turn never logs: defined when first needed.

Importing this module builds their attrs classes (~0.14 ms each, ~3 ms for the lot), which a
process that runs plain text turns never needs: the inbox's queue, context and steering, history
rewrites, sub-agents, typed output, permission modes, file checkpoints and approvals. Nothing
imports it at start. :mod:`dsh.values._events` names every class here (its module
``__getattr__`` imports this module on first use) and holds their type tags, so that
:data:`~dsh.values._events.CORE_EVENT_TYPES` answers for them without building them and code
that only tells events apart compares ``event.type`` with a tag. Whatever logs one of these
events imports its class from here, in the function that builds it.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

from attrs import AttrsInstance, frozen

from dsh.values._chunks import TokenUsage
from dsh.values._content import Block, MessageSource, UserSource
from dsh.values._events import (
    APPROVAL_DECIDED,
    APPROVAL_REQUESTED,
    CONTEXT_MESSAGE,
    FILE_BLOB,
    FILE_CHANGED,
    HISTORY_PRUNE,
    HISTORY_REWRITE_END,
    HISTORY_REWRITE_START,
    HISTORY_SUMMARY,
    OUTPUT_FAILED,
    OUTPUT_RESULT,
    OUTPUT_RETRY,
    PERMISSION_MODE,
    QUEUED_MESSAGE,
    SEED_END,
    SESSION_REWIND,
    STEERING_MESSAGE,
    SUBAGENT_END,
    SUBAGENT_PARENT,
    SUBAGENT_START,
    WITHDRAWN_MESSAGE,
    AssistantChunk,
    AssistantMessage,
    ErrorEvent,
    RawEventData,
    RetryEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from dsh.values._value import Value

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "ContextMessage",
    "CoreEventData",
    "ElidedResult",
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
    "SeedEnd",
    "SessionRewind",
    "SteeringMessage",
    "SubagentEnd",
    "SubagentParent",
    "SubagentStart",
    "WithdrawnMessage",
]


@frozen(repr=False, eq=False)
class WithdrawnMessage(Value):
    """A queued message taken back out of the inbox before it reached the model (``dsh chat``
    hands steering left over by the user's abort back as a draft): a resume does not restore
    it."""

    type: ClassVar[str] = WITHDRAWN_MESSAGE
    queued_seq: int


@frozen(repr=False, eq=False)
class QueuedMessage(Value):
    """A message queued while a turn ran (``steering``: for the running turn). Logged so that a
    crash cannot lose it; the ``user/message`` or ``steering/message`` consuming it names it."""

    type: ClassVar[str] = QUEUED_MESSAGE
    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    steering: bool = False


@frozen(repr=False, eq=False)
class SeedEnd(Value):
    """Data of ``session/end-seed``: a resumed session's stored log ends before this event."""

    type: ClassVar[str] = SEED_END
    stored: int


@frozen(repr=False, eq=False)
class ContextMessage(Value):
    """Context injected for the next request without starting a turn (``agent.inject``)."""

    type: ClassVar[str] = CONTEXT_MESSAGE
    content: tuple[Block, ...]
    source: MessageSource = UserSource()


@frozen(repr=False, eq=False)
class SteeringMessage(Value):
    """A message that arrived while a turn was running, delivered between steps."""

    type: ClassVar[str] = STEERING_MESSAGE
    turn: int
    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


@frozen(repr=False, eq=False)
class HistoryRewriteStart(Value):
    """A rewrite of the history began in turn ``turn``, at about ``tokens_before`` tokens.
    ``reason`` is the writer's word for why (the built-in compaction says ``threshold``,
    ``overflow`` or ``manual``; ``overflow`` means the model refused the request as too
    long)."""

    type: ClassVar[str] = HISTORY_REWRITE_START
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

    type: ClassVar[str] = HISTORY_PRUNE
    elided: tuple[ElidedResult, ...]


@frozen(repr=False, eq=False)
class HistorySummary(Value):
    """Everything the model saw from events before ``replaces_upto`` is now ``summary``.
    ``usage`` and ``model`` are those of the model call that wrote it, if one did (it is
    billed like any other)."""

    type: ClassVar[str] = HISTORY_SUMMARY
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

    type: ClassVar[str] = HISTORY_REWRITE_END
    tokens_after: int
    error: str | None = None


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


@frozen(repr=False, eq=False)
class PermissionModeChange(Value):
    """Data of ``permissions/mode``: from here on, this agent's tool calls are judged in
    ``mode`` (``plan``, ``read-only``, ``workspace-write``, ``full``), e.g. after ``/approve``."""

    type: ClassVar[str] = PERMISSION_MODE
    mode: str


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

    type: ClassVar[str] = APPROVAL_REQUESTED
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

    type: ClassVar[str] = APPROVAL_DECIDED
    call_id: str
    name: str
    allowed: bool
    by: str
    reason: str


#: The data of every built-in event type: ``isinstance`` narrows a :attr:`SessionEvent.data` to
#: one of them. (:mod:`dsh.values._events` spells it out too, for the type checker.)
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

#: What :attr:`SessionEvent.data` holds: a built-in event's data, a plugin-registered attrs
#: class's instance, or the raw fields of an unknown type.
EventData: TypeAlias = CoreEventData | RawEventData | AttrsInstance
