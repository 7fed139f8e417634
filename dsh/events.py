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
    "ContextMessage",
    "ErrorEvent",
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
    content: tuple[Block, ...]
    source: MessageSource = UserSource()


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


@frozen
class TurnStart:
    turn: int
    source: MessageSource = UserSource()


@frozen
class TurnCompleted:
    type: ClassVar[str] = "completed"


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
    turn: int
    step: int
    content: tuple[Block, ...]
    usage: TokenUsage | None = None


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


@frozen
class ErrorEvent:
    turn: int
    step: int
    message: str
    code: str | None = None


CORE_EVENT_TYPES: dict[str, type[Any]] = {
    "user/message": UserMessage,
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
}
