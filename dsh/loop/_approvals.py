"""Parked tool calls: waiting for ``agent.decide`` and recording what it decides.

A permission policy that cannot get an answer may park a call (an outcome with ``approval``
set, see :meth:`dsh.tools._registry.ToolOutcome.deferred`): the dispatch logs
``approval/requested`` in place of the result, checkpoints it, runs the step's other calls,
then waits here (the agent's status is ``waiting``). :meth:`Approvals.decide` logs
``approval/decided`` and checkpoints it before it wakes the step, so the decision is durable
before the tool runs. The step then re-dispatches each allowed call (a second ``tool/call``,
checkpointed: from then on a crash makes its outcome unknown) and logs a denied one's result.

Disposing a waiting agent (closing the harness, the process ending) leaves the turn parked:
no result, no ``step/end``, no ``turn/end``. :func:`dsh.loop._recovery.parked_step` finds it
again in the stored log, and the resumed agent waits in the same step.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from dsh.values._errors import DshError

if TYPE_CHECKING:
    from dsh.session._session import Session
    from dsh.values._agent import AgentStatus
    from dsh.values._approval import PendingApproval
    from dsh.values._rare_events import ApprovalDecided

__all__ = ["TIMEOUT_CODE", "Approvals", "TurnParked"]

#: The code of the result of a call denied because its ``timeout_s`` passed.
TIMEOUT_CODE = "APPROVAL_TIMEOUT"


class TurnParked(Exception):
    """The agent was disposed while its step waited for decisions: the turn stays open."""


class Approvals:
    """The decisions one agent's parked calls wait for."""

    def __init__(
        self,
        agent_id: str,
        session: Session,
        set_status: Callable[[AgentStatus], Awaitable[None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._agent_id = agent_id
        self._session = session
        self._set_status = set_status
        self._clock = clock
        self._decided = asyncio.Event()
        #: Calls whose decision is logged but not yet checkpointed: the step does not take it
        #: up before it is (the re-dispatch's own checkpoint would save it too, but a decider
        #: that returned knows its decision is on disk and nothing ran yet).
        self._deciding: set[str] = set()
        #: Called when a decision may wake the waiting step (the agent is busy again), and
        #: when the step waits on after one did not (the agent is idle again).
        self.on_busy: Callable[[], None] = lambda: None
        self.on_waiting: Callable[[], None] = lambda: None

    def pending(self) -> list[PendingApproval]:
        """The calls of the session waiting for a decision, in the order they were parked."""
        from dsh.values._approval import pending_in

        return pending_in(self._session.events, self._session.id, self._agent_id)

    async def decide(self, call_id: str, allow: bool, reason: str | None = None) -> None:
        """Log ``approval/decided`` for parked call ``call_id`` and checkpoint it; then the
        waiting step goes on. Raises :class:`AlreadyDecided` for a call decided already and
        :class:`DshError` for one that is not waiting."""
        from dsh.values._rare_events import ApprovalDecided

        waiting = next((p for p in self.pending() if p.call_id == call_id), None)
        if waiting is None:
            raise self._not_waiting(call_id)
        said = reason or ("allowed" if allow else "denied")
        self._deciding.add(call_id)
        self._session.append(ApprovalDecided(call_id, waiting.name, allow, "approver", said))
        try:
            await self._session.checkpoint()  # durable before the tool runs
        finally:
            self._deciding.discard(call_id)
            self.on_busy()
            self._decided.set()

    def _not_waiting(self, call_id: str) -> DshError:
        from dsh.values._approval import AlreadyDecided
        from dsh.values._rare_events import ApprovalDecided

        session = self._session.id
        for event in self._session.events.select(ApprovalDecided, reverse=True):
            data = event.data
            assert isinstance(data, ApprovalDecided)  # what select() gives
            if data.call_id == call_id:
                verdict = "allowed" if data.allowed else "denied"
                return AlreadyDecided(
                    f"call {call_id!r} of session {session!r} was already decided: {verdict} "
                    f"by {data.by} ({data.reason})"
                )
        waiting = ", ".join(p.call_id for p in self.pending()) or "none"
        return DshError(
            f"no call {call_id!r} waits for approval in session {session!r} (waiting: {waiting})"
        )

    async def wait(self, call_ids: Sequence[str]) -> dict[str, ApprovalDecided]:
        """Wait until every call of ``call_ids`` is decided (a call whose ``timeout_s`` passed
        is denied ``by`` ``timeout``); their decisions. The agent is ``waiting`` meanwhile."""
        wanted = set(call_ids)
        await self._session.checkpoint()  # the requests are durable before anyone decides
        waiting = False
        while True:
            # Between reading the log and announcing the wait nothing awaits: a decision that
            # comes later sets the event (and takes the agent's idleness back) after both.
            self._decided.clear()
            decided = self._decisions(wanted)
            undecided = [p for p in self.pending() if p.call_id in wanted]
            deadlines = [p.deadline for p in undecided if p.deadline is not None]
            now = self._clock()
            for overdue in [p for p in undecided if p.deadline is not None and p.deadline <= now]:
                decided[overdue.call_id] = self._time_out(overdue)
            if len(decided) == len(wanted):
                if waiting:
                    self.on_busy()
                    await self._set_status("running")
                return decided
            if waiting:
                self.on_waiting()
            else:
                waiting = True
                await self._set_status("waiting")
            remaining = min(deadlines) - now if deadlines else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._decided.wait(), remaining)

    def _decisions(self, wanted: set[str]) -> dict[str, ApprovalDecided]:
        from dsh.values._rare_events import ApprovalDecided

        found: dict[str, ApprovalDecided] = {}
        for event in self._session.events.select(ApprovalDecided):
            data = event.data
            assert isinstance(data, ApprovalDecided)  # what select() gives
            if data.call_id in wanted and data.call_id not in self._deciding:
                found[data.call_id] = data
        return found

    def _time_out(self, overdue: PendingApproval) -> ApprovalDecided:
        from dsh.values._rare_events import ApprovalDecided

        reason = f"no decision within {overdue.timeout_s:g} s"
        data = ApprovalDecided(overdue.call_id, overdue.name, False, "timeout", reason)
        self._session.append(data)
        return data
