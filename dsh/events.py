"""Session events: the durable, append-only facts a session log is made of.

Every event is ``SessionEvent(type, seq, time, data)``; ``data`` is an attrs instance of the class
registered for ``type``. The built-in types are listed in :data:`CORE_EVENT_TYPES`; plugins add
their own through ``dsh_register_event_types``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import frozen

from dsh.chunks import LlmFailure, StreamChunk, TokenUsage
from dsh.content import Block, Image, MessageSource, Text, UserSource

__all__ = [
    "CORE_EVENT_TYPES",
    "AssistantChunk",
    "AssistantMessage",
    "CompactionEnd",
    "CompactionPrune",
    "CompactionStart",
    "CompactionSummary",
    "ContextMessage",
    "ElidedResult",
    "ErrorEvent",
    "QueuedMessage",
    "SeedEnd",
    "SessionEvent",
    "SteeringMessage",
    "StepBoundary",
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
]


@frozen
class SessionEvent:
    """One entry of a session log. ``seq`` is contiguous from 0; ``time`` is epoch seconds."""

    type: str
    seq: int
    time: float
    data: Any


@frozen
class UserMessage:
    """A message that starts (or joins) a turn. ``queued_seq``: the ``inbox/queued`` event it
    consumes, when it was queued while the agent was busy."""

    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


@frozen
class WithdrawnMessage:
    """A queued message taken back out of the inbox before it reached the model (``dsh chat``
    hands steering left over by the user's abort back as a draft): a resume does not restore
    it."""

    queued_seq: int


@frozen
class QueuedMessage:
    """A message queued while a turn ran (``steering``: for the running turn). Logged so that a
    crash cannot lose it; the ``user/message`` or ``steering/message`` consuming it names it."""

    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    steering: bool = False


@frozen
class SeedEnd:
    """Data of ``session/end-seed``: a resumed session's stored log ends before this event."""

    stored: int


@frozen
class ContextMessage:
    """Context injected for the next request without starting a turn (``agent.inject``)."""

    content: tuple[Block, ...]
    source: MessageSource = UserSource()


@frozen
class SteeringMessage:
    """A message that arrived while a turn was running, delivered between steps."""

    turn: int
    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


@frozen
class TurnStart:
    turn: int
    source: MessageSource = UserSource()


@frozen
class TurnCompleted:
    """The turn ran to its end; ``reason`` says why when a plugin stopped it (a budget)."""

    type: ClassVar[str] = "completed"
    reason: str | None = None


@frozen
class TurnAborted:
    type: ClassVar[str] = "aborted"
    reason: str | None = None


@frozen
class TurnError:
    type: ClassVar[str] = "error"
    failure: LlmFailure


@frozen
class TurnMaxTokens:
    type: ClassVar[str] = "max-tokens"


@frozen
class TurnDisposed:
    type: ClassVar[str] = "disposed"


@frozen
class TurnInterrupted:
    """Written only by crash recovery: the process died while the turn was open."""

    type: ClassVar[str] = "interrupted"


TurnEndReason = (
    TurnCompleted | TurnAborted | TurnError | TurnMaxTokens | TurnDisposed | TurnInterrupted
)


@frozen
class TurnEnd:
    turn: int
    reason: TurnEndReason


@frozen
class StepBoundary:
    """Data of ``step/start`` and ``step/end``."""

    turn: int
    step: int


@frozen
class AssistantChunk:
    turn: int
    step: int
    chunk: StreamChunk


@frozen
class AssistantMessage:
    """What the model answered in one step; ``model`` is the model id the request named."""

    turn: int
    step: int
    content: tuple[Block, ...]
    usage: TokenUsage | None = None
    model: str | None = None


@frozen
class ToolCallEvent:
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@frozen
class ToolResultEvent:
    turn: int
    step: int
    call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False
    code: str | None = None


@frozen
class ErrorEvent:
    turn: int
    step: int
    message: str
    code: str | None = None


@frozen
class CompactionStart:
    """A compaction began: ``reason`` is ``threshold``, ``overflow`` or ``manual``."""

    turn: int
    reason: str
    tokens_before: int


@frozen
class ElidedResult:
    call_id: str
    note: str


@frozen
class CompactionPrune:
    """Old tool results whose content the model now sees as a short note instead."""

    elided: tuple[ElidedResult, ...]


@frozen
class CompactionSummary:
    """Everything the model saw from events before ``replaces_upto`` is now ``summary``."""

    replaces_upto: int
    summary: str
    tokens_before: int
    tokens_after: int
    usage: TokenUsage | None = None
    model: str | None = None


@frozen
class CompactionEnd:
    tokens_after: int
    error: str | None = None


CORE_EVENT_TYPES: dict[str, type[Any]] = {
    "user/message": UserMessage,
    "inbox/queued": QueuedMessage,
    "inbox/withdrawn": WithdrawnMessage,
    "session/end-seed": SeedEnd,
    "context/message": ContextMessage,
    "steering/message": SteeringMessage,
    "turn/start": TurnStart,
    "turn/end": TurnEnd,
    "step/start": StepBoundary,
    "step/end": StepBoundary,
    "assistant/chunk": AssistantChunk,
    "assistant/message": AssistantMessage,
    "tool/call": ToolCallEvent,
    "tool/result": ToolResultEvent,
    "error": ErrorEvent,
    "compaction/start": CompactionStart,
    "compaction/prune": CompactionPrune,
    "compaction/summary": CompactionSummary,
    "compaction/end": CompactionEnd,
}
