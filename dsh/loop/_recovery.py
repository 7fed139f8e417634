"""Crash recovery: what a stored log needs appended so that it is whole again.

A process that dies mid-turn leaves the turn open: tool calls without results, a step without
its end, no ``turn/end``. :func:`closing_events` closes it: an error result for every call
without one — ``TOOL_OUTCOME_UNKNOWN`` if it was dispatched (it may or may not have had its
effect), ``ABORTED_BEFORE_DISPATCH`` if it never started — then ``step/end`` and ``turn/end``
with reason ``interrupted``. :func:`pending_messages`
finds the messages that were queued but never started a turn. :func:`reopen` does what a resume
needs of a stored session; the loop then starts an agent on it and re-queues the pending
messages (``AgentLoop.resume``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.loop._family import unfinished_children
from dsh.loop._inbox import InboxMessage
from dsh.session._session import open_turn
from dsh.values._content import Text, ToolCall
from dsh.values._errors import DshError
from dsh.values._events import (
    AssistantMessage,
    QueuedMessage,
    SeedEnd,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    SubagentEnd,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnInterrupted,
    TurnStart,
    UserMessage,
    WithdrawnMessage,
)

if TYPE_CHECKING:
    from dsh.session._session import Session, SessionRegistry

__all__ = ["ClosingEvent", "closing_events", "pending_messages", "reopen"]

#: What closing an open turn appends (see :func:`closing_events`).
ClosingEvent = SubagentEnd | ToolResultEvent | StepEnd | TurnEnd

NOT_STARTED = (Text("Error: the process stopped before this tool call started; it did not run."),)
UNKNOWN = (
    Text(
        "Error: the process stopped while this tool call ran; whether it took effect is "
        "unknown. Check before repeating it."
    ),
)


def closing_events(events: Sequence[SessionEvent]) -> list[tuple[str, ClosingEvent]]:
    """The ``(type, data)`` pairs that close the turn left open at the end of ``events``, after
    a ``subagent/end`` (``interrupted``) for each sub-agent that was still running."""
    children = unfinished_children(events)
    turn = open_turn(events)
    if turn is None:
        return [*children]
    start = max(e.seq for e in events if isinstance(e.data, TurnStart))
    unanswered: dict[str, tuple[int, bool]] = {}  # call id -> (step, dispatched)
    step: int | None = None
    for event in events[start:]:
        data = event.data
        if isinstance(data, AssistantMessage):
            calls = (b.id for b in data.content if isinstance(b, ToolCall))
            unanswered.update((call_id, (data.step, False)) for call_id in calls)
        elif isinstance(data, ToolCallEvent):
            unanswered[data.call_id] = (data.step, True)
        elif isinstance(data, ToolResultEvent):
            unanswered.pop(data.call_id, None)
        elif isinstance(data, StepStart):
            step = data.step
        elif isinstance(data, StepEnd):
            step = None
    closing: list[tuple[str, ClosingEvent]] = [*children] + [
        (ToolResultEvent.type, _unanswered(turn, call_step, call_id, dispatched))
        for call_id, (call_step, dispatched) in unanswered.items()
    ]
    if step is not None:
        closing.append((StepEnd.type, StepEnd(turn, step)))
    closing.append((TurnEnd.type, TurnEnd(turn, TurnInterrupted())))
    return closing


def _unanswered(turn: int, step: int, call_id: str, dispatched: bool) -> ToolResultEvent:
    if dispatched:
        return ToolResultEvent(turn, step, call_id, UNKNOWN, True, "TOOL_OUTCOME_UNKNOWN")
    return ToolResultEvent(turn, step, call_id, NOT_STARTED, True, "ABORTED_BEFORE_DISPATCH")


def pending_messages(events: Sequence[SessionEvent]) -> list[InboxMessage]:
    """Messages logged as ``inbox/queued`` that no ``user/message`` or ``steering/message``
    consumed and no ``inbox/withdrawn`` took back, in the order they were queued."""
    consumed = {
        e.data.queued_seq
        for e in events
        if isinstance(e.data, UserMessage | SteeringMessage | WithdrawnMessage)
        and e.data.queued_seq is not None
    }
    return [
        InboxMessage(e.data.content, e.data.source, e.seq)
        for e in events
        if isinstance(e.data, QueuedMessage) and e.seq not in consumed
    ]


async def reopen(sessions: SessionRegistry, session_id: str) -> Session:
    """A stored session made ready to continue: loaded, its writer lock taken (``SessionBusy``
    if another process writes it, before anything is appended), the end of the stored log
    marked (``session/end-seed``) and a turn a crash left open closed."""
    events = await sessions.load(session_id)
    if events is None:
        raise DshError(
            f"no stored session {session_id!r}: is a persistence plugin enabled "
            "(dsh plugins), and is this the right data directory?"
        )
    session = sessions.create(session_id, events, persisted=len(events))
    await sessions.claim(session)
    session.append(SeedEnd(len(events)))
    for _, data in closing_events(events):  # each data's class carries the type paired with it
        session.append(data)
    return session
