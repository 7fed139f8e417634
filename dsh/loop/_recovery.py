"""Crash recovery: what a stored log needs appended so that it is whole again.

A process that dies mid-turn leaves the turn open: tool calls without results, a step without
its end, no ``turn/end``. :func:`closing_events` closes it: an error result for every call
without one — ``TOOL_OUTCOME_UNKNOWN`` if it was dispatched (it may or may not have had its
effect), ``ABORTED_BEFORE_DISPATCH`` if it never started — then ``step/end`` and ``turn/end``
with reason ``interrupted``. A turn parked for approvals (:mod:`dsh.loop._approvals`) is not
closed: its parked calls keep waiting, an allowed call that was re-dispatched gets
``TOOL_OUTCOME_UNKNOWN``, one that was not yet runs when the resumed agent goes on
(:func:`parked_step`). :func:`pending_messages`
finds the messages that were queued but never started a turn. :func:`reopen` does what a resume
needs of a stored session; the loop then starts an agent on it and re-queues the pending
messages (``AgentLoop.resume``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from attrs import frozen

from dsh.loop._family import unfinished_children
from dsh.loop._inbox import InboxMessage
from dsh.session._session import open_turn
from dsh.values._content import Text, ToolCall
from dsh.values._errors import DshError
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnInterrupted,
    TurnStart,
    UserMessage,
)
from dsh.values._rare_events import (
    ApprovalDecided,
    ApprovalRequested,
    QueuedMessage,
    SeedEnd,
    SteeringMessage,
    SubagentEnd,
    WithdrawnMessage,
)
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.session._session import Session, SessionRegistry

__all__ = [
    "ClosingEvent",
    "ParkedStep",
    "closing_events",
    "parked_step",
    "pending_messages",
    "reopen",
]

#: What closing an open turn appends (see :func:`closing_events`).
ClosingEvent = SubagentEnd | ToolResultEvent | StepEnd | TurnEnd

NOT_STARTED = (Text("Error: the process stopped before this tool call started; it did not run."),)
UNKNOWN = (
    Text(
        "Error: the process stopped while this tool call ran; whether it took effect is "
        "unknown. Check before repeating it."
    ),
)


#: Where a call of an open turn stands: announced by the model, dispatched, parked for a
#: decision, decided (allowed or denied) and not yet run.
CallState = Literal["announced", "dispatched", "parked", "allowed", "denied"]


@frozen(repr=False, eq=False)
class ParkedStep(Value):
    """Step ``step`` of turn ``turn`` waits for decisions on ``calls`` (in the model's order),
    which have no result yet."""

    turn: int
    step: int
    calls: tuple[ToolCall, ...]


def _open_calls(
    events: Sequence[SessionEvent],
) -> tuple[int | None, int | None, dict[str, tuple[ToolCall, int, CallState]]]:
    """The open turn at the end of ``events``, its open step, and its calls without a result."""
    turn = open_turn(events)
    if turn is None:
        return None, None, {}
    start = max(e.seq for e in events if isinstance(e.data, TurnStart))
    calls: dict[str, tuple[ToolCall, int, CallState]] = {}  # call id -> (call, step, state)
    step: int | None = None
    for event in events[start:]:
        data = event.data
        if isinstance(data, AssistantMessage):
            for block in data.content:
                if isinstance(block, ToolCall):
                    calls[block.id] = (block, data.step, "announced")
        elif isinstance(data, ToolCallEvent):
            known = calls.get(data.call_id)
            call = ToolCall(data.call_id, data.name, data.arguments) if known is None else known[0]
            calls[data.call_id] = (call, data.step, "dispatched")
        elif isinstance(data, ApprovalRequested | ApprovalDecided):
            known = calls.get(data.call_id)
            if known is not None:
                calls[data.call_id] = (known[0], known[1], _next_state(known[2], data))
        elif isinstance(data, ToolResultEvent):
            calls.pop(data.call_id, None)
        elif isinstance(data, StepStart):
            step = data.step
        elif isinstance(data, StepEnd):
            step = None
    return turn, step, calls


def _next_state(state: CallState, data: ApprovalRequested | ApprovalDecided) -> CallState:
    if isinstance(data, ApprovalRequested):
        return "parked"
    if state != "parked":  # a policy's decision on a call it did not park
        return state
    return "allowed" if data.allowed else "denied"


def _parked(state: CallState) -> bool:
    return state in ("parked", "allowed", "denied")


def parked_step(events: Sequence[SessionEvent]) -> ParkedStep | None:
    """The step left waiting for decisions at the end of ``events`` (after
    :func:`closing_events` was appended), if one was."""
    turn, step, calls = _open_calls(events)
    parked = tuple(call for call, _, state in calls.values() if _parked(state))
    if turn is None or step is None or not parked:
        return None
    return ParkedStep(turn, step, parked)


def closing_events(events: Sequence[SessionEvent]) -> list[tuple[str, ClosingEvent]]:
    """The ``(type, data)`` pairs that close the turn left open at the end of ``events``, after
    a ``subagent/end`` (``interrupted``) for each sub-agent that was still running. A turn
    parked for decisions gets results for its other unanswered calls only: it stays open."""
    children = unfinished_children(events)
    turn, step, calls = _open_calls(events)
    if turn is None:
        return [*children]
    parked = step is not None and any(_parked(state) for _, _, state in calls.values())
    closing: list[tuple[str, ClosingEvent]] = [*children] + [
        (ToolResultEvent.type, _unanswered(turn, call_step, call_id, state == "dispatched"))
        for call_id, (_, call_step, state) in calls.items()
        if not (parked and _parked(state))
    ]
    if parked:
        return closing
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
