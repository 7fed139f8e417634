"""Parked tool calls: what ``approval/requested`` events leave waiting for a decision.

A call that needs approval nobody present can give is parked (see :mod:`dsh.loop._approvals`):
the session logs ``approval/requested`` and the turn waits until ``agent.decide`` logs
``approval/decided``. :func:`pending_in` reads what is still waiting from a log, so that any
process that loads the session sees the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

from dsh.values._errors import DshError
from dsh.values._events import SessionEvent, ToolResultEvent
from dsh.values._rare_events import ApprovalDecided, ApprovalRequested
from dsh.values._value import Value

__all__ = [
    "AlreadyDecided",
    "ApprovalNeeded",
    "PendingApproval",
    "pending_in",
    "summarize_arguments",
]

#: How much of a call's arguments an ``approval/requested`` event keeps.
SUMMARY_CHARS = 200


@frozen(repr=False, eq=False)
class ApprovalNeeded(Value):
    """Why a policy parks a call instead of deciding it: ``by`` what asked (a ``rule``, the
    ``mode``) and ``reason`` why; ``timeout_s``: how long it may wait (``None``: for ever)."""

    by: str
    reason: str
    timeout_s: float | None = None


@frozen(repr=False, eq=False)
class PendingApproval(Value):
    """A parked call of session ``session_id`` (agent ``agent_id``): the fields of its
    ``approval/requested`` event, and ``requested_at`` (epoch seconds) when it was logged."""

    session_id: str
    agent_id: str
    call_id: str
    name: str
    summary: str
    effect: str
    by: str
    reason: str
    requested_at: float
    timeout_s: float | None = None

    @property
    def deadline(self) -> float | None:
        """When the call is denied for want of a decision (``None``: never)."""
        return None if self.timeout_s is None else self.requested_at + self.timeout_s


class AlreadyDecided(DshError):
    """``decide`` was asked about a call that was decided already (another decider won)."""


def pending_in(
    events: Iterable[SessionEvent], session_id: str, agent_id: str
) -> list[PendingApproval]:
    """The calls of ``events`` requested and neither decided nor answered, in request order."""
    pending: dict[str, PendingApproval] = {}
    for event in events:
        data = event.data
        if isinstance(data, ApprovalRequested):
            pending[data.call_id] = PendingApproval(
                session_id,
                agent_id,
                data.call_id,
                data.name,
                data.summary,
                data.effect,
                data.by,
                data.reason,
                event.time,
                data.timeout_s,
            )
        elif isinstance(data, ApprovalDecided | ToolResultEvent):
            pending.pop(data.call_id, None)
    return list(pending.values())


def summarize_arguments(arguments: str) -> str:
    """``arguments`` (the raw JSON of a call) cut to :data:`SUMMARY_CHARS` characters."""
    if len(arguments) <= SUMMARY_CHARS:
        return arguments
    return f"{arguments[: SUMMARY_CHARS - 1]}…"
