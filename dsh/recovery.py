"""Crash recovery: what a stored log needs appended so that it is whole again.

A process that dies mid-turn leaves the turn open: tool calls without results, a step without
its end, no ``turn/end``. :func:`closing_events` closes it: an error result for every call
without one — ``TOOL_OUTCOME_UNKNOWN`` if it was dispatched (it may or may not have had its
effect), ``ABORTED_BEFORE_DISPATCH`` if it never started — then ``step/end`` and ``turn/end``
with reason ``interrupted``. :func:`pending_messages`
finds the messages that were queued but never started a turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsh.content import Text, ToolCall
from dsh.events import (
    SessionEvent,
    StepBoundary,
    ToolResultEvent,
    TurnEnd,
    TurnInterrupted,
)
from dsh.inbox import InboxMessage
from dsh.session import open_turn

__all__ = ["closing_events", "pending_messages"]

NOT_STARTED = (Text("Error: the process stopped before this tool call started; it did not run."),)
UNKNOWN = (
    Text(
        "Error: the process stopped while this tool call ran; whether it took effect is "
        "unknown. Check before repeating it."
    ),
)


def closing_events(events: Sequence[SessionEvent]) -> list[tuple[str, Any]]:
    """The ``(type, data)`` pairs that close the turn left open at the end of ``events``."""
    turn = open_turn(events)
    if turn is None:
        return []
    start = max(e.seq for e in events if e.type == "turn/start")
    unanswered: dict[str, tuple[int, bool]] = {}  # call id -> (step, dispatched)
    step: int | None = None
    for event in events[start:]:
        data = event.data
        if event.type == "assistant/message":
            calls = (b.id for b in data.content if isinstance(b, ToolCall))
            unanswered.update((call_id, (data.step, False)) for call_id in calls)
        elif event.type == "tool/call":
            unanswered[data.call_id] = (data.step, True)
        elif event.type == "tool/result":
            unanswered.pop(data.call_id, None)
        elif event.type == "step/start":
            step = data.step
        elif event.type == "step/end":
            step = None
    closing: list[tuple[str, Any]] = [
        ("tool/result", _unanswered(turn, call_step, call_id, dispatched))
        for call_id, (call_step, dispatched) in unanswered.items()
    ]
    if step is not None:
        closing.append(("step/end", StepBoundary(turn, step)))
    closing.append(("turn/end", TurnEnd(turn, TurnInterrupted())))
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
        if e.type in ("user/message", "steering/message", "inbox/withdrawn")
        and e.data.queued_seq is not None
    }
    return [
        InboxMessage(e.data.content, e.data.source, e.seq)
        for e in events
        if e.type == "inbox/queued" and e.seq not in consumed
    ]
