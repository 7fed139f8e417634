"""Running one step's tool calls: batching, concurrency, and a result for every call.

Calls run in the model's order. Consecutive tools marked ``concurrency_safe`` form a batch that
runs concurrently (at most ``max_parallel`` at once); any other tool is a barrier and runs alone.
``tool/call`` events are logged (and checkpointed) before a batch starts; ``tool/result`` events
are logged in the model's order. When the step is cancelled or fails (a checkpoint that
raised), every call still gets exactly one result: the outcome if it finished, ``ABORTED`` if
it was running, ``ABORTED_BEFORE_DISPATCH`` if it never started — so the log never holds a tool
call without its result. Permission denials, unknown tools, bad arguments and exceptions are
outcomes of :meth:`~dsh.tools._registry.ToolRegistry.execute`, which never raises.

A call a policy parks (its outcome carries ``approval``) gets ``approval/requested`` instead of
a result; once the step's other calls ran, the step waits for the decisions
(:mod:`dsh.loop._approvals`), runs the allowed calls and logs the denied ones' results. Disposed
while it waits, it raises :class:`~dsh.loop._approvals.TurnParked` and logs nothing more.

Tool-call ids must be unique in a session: results are matched to calls by id (when the history
is projected, when compaction prunes, when a crashed turn is closed). The model's ids are made
unique before its message reaches the log, by :func:`with_unique_call_ids`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from attrs import evolve

from dsh.loop._approvals import TIMEOUT_CODE, Approvals, TurnParked
from dsh.tools._registry import ToolExecution, ToolOutcome, ToolRegistry
from dsh.values._content import Block, Message, Text, ToolCall
from dsh.values._events import SessionEvent, ToolCallEvent, ToolResultEvent

if TYPE_CHECKING:
    from dsh.values._agent import Agent
    from dsh.values._rare_events import ApprovalDecided

__all__ = ["ToolDispatch", "call_ids", "with_unique_call_ids"]


class ToolDispatch:
    """The tool calls of one step of one agent."""

    def __init__(
        self,
        agent: Agent,
        tools: ToolRegistry,
        turn: int,
        step: int,
        max_parallel: int,
        approvals: Approvals,
    ) -> None:
        self.agent = agent
        self.turn = turn
        self.step = step
        self.max_parallel = max_parallel
        self._tools = tools
        self._approvals = approvals
        self._parked: list[ToolCall] = []

    async def run(self, calls: Sequence[ToolCall]) -> None:
        pending = list(calls)
        try:
            while pending:
                batch = self._next_batch(pending)
                del pending[: len(batch)]
                await self._run_batch(batch)
        except BaseException as exc:
            for call in [*pending, *self._parked]:
                self._log_result(call, self._unstarted(exc))
            raise
        if self._parked:
            parked, self._parked = self._parked, []
            await self.settle(parked)

    async def settle(self, parked: Sequence[ToolCall]) -> None:
        """Wait for the decisions on the ``parked`` calls, then run each allowed one and log
        each denied one's result, in the model's order. Disposed while it waits: the calls
        stay parked (:class:`TurnParked`); aborted: they never run."""
        try:
            decisions = await self._approvals.wait([call.id for call in parked])
        except asyncio.CancelledError as exc:
            if self.agent.disposing:
                raise TurnParked from exc
            for call in parked:
                self._log_result(call, self._unstarted(exc))
            raise
        for index, call in enumerate(parked):
            decision = decisions[call.id]
            if not decision.allowed:
                self._log_result(call, _refused(decision))
                continue
            try:
                await self._run_batch([call], approved=True)
            except BaseException as exc:
                for later in parked[index + 1 :]:
                    self._log_result(later, self._unstarted(exc))
                raise

    def _safe(self, call: ToolCall) -> bool:
        tool = self._tools.get(call.name)
        return tool is not None and tool.concurrency_safe

    def _next_batch(self, pending: list[ToolCall]) -> list[ToolCall]:
        """The consecutive concurrency-safe calls at the head of ``pending``, or its first call
        alone when that one is not safe."""
        batch: list[ToolCall] = []
        for call in pending:
            if not self._safe(call):
                break
            batch.append(call)
        return batch or pending[:1]

    async def _run_batch(self, batch: list[ToolCall], approved: bool = False) -> None:
        session = self.agent.session
        for call in batch:
            session.log(ToolCallEvent(self.turn, self.step, call.id, call.name, call.arguments))
        try:
            await session.checkpoint()  # the calls may have side effects: log them durably first
        except BaseException as exc:
            for call in batch:
                self._log_result(call, self._unstarted(exc))
            raise
        if len(batch) == 1:
            await self._run_one(batch[0], approved)
            return
        limit = asyncio.Semaphore(self.max_parallel)
        tasks = [asyncio.ensure_future(self._execute(call, limit)) for call in batch]
        logged = 0
        try:
            for call, task in zip(batch, tasks, strict=True):
                self._log_result(call, await task)
                logged += 1
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for call, task in zip(batch[logged:], tasks[logged:], strict=True):
                self._log_result(call, self._settled(task))
            raise

    async def _run_one(self, call: ToolCall, approved: bool) -> None:
        """A batch of one call (most steps) runs in the step's own task: no task, no semaphore
        (so what the tool sets in context variables stays until the step ends, never beyond:
        each step has its own task). Cancelled while it runs, it gets the result a cancelled
        task of a batch gets."""
        execution = ToolExecution(call.id, call.name, call.arguments, self.agent, approved)
        try:
            outcome = await self._tools.execute(execution)
        except asyncio.CancelledError:
            self._log_result(call, self._cancelled("ABORTED", "cancelled while running"))
            raise
        self._log_result(call, outcome)

    async def _execute(self, call: ToolCall, limit: asyncio.Semaphore) -> ToolOutcome:
        async with limit:
            execution = ToolExecution(call.id, call.name, call.arguments, self.agent)
            return await self._tools.execute(execution)

    def _settled(self, task: asyncio.Future[ToolOutcome]) -> ToolOutcome:
        """A finished call keeps its real outcome (its effect happened); others were aborted."""
        if task.cancelled():
            return self._cancelled("ABORTED", "cancelled while running")
        return task.result()

    def _unstarted(self, exc: BaseException) -> ToolOutcome:
        """The result of a call that never ran because the step was cancelled or failed."""
        if isinstance(exc, asyncio.CancelledError):
            return self._cancelled("ABORTED_BEFORE_DISPATCH", "never started")
        causes = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        why = "; ".join(str(cause) or type(cause).__name__ for cause in causes)
        return ToolOutcome.error(
            "ABORTED_BEFORE_DISPATCH", f"tool call never started: the step failed ({why})"
        )

    def _cancelled(self, code: str, what: str) -> ToolOutcome:
        agent = self.agent
        why = "the agent was disposed" if agent.disposing else f"aborted: {agent.abort_reason}"
        return ToolOutcome((Text(f"Error: tool call {what} ({why})"),), True, code)

    def _log_result(self, call: ToolCall, outcome: ToolOutcome) -> None:
        needed = outcome.approval
        if needed is not None:  # parked: the result waits for a decision
            # The approval values load with the first parked call: a run whose calls are all
            # decided at once never needs them.
            from dsh.values._approval import summarize_arguments
            from dsh.values._rare_events import ApprovalRequested

            tool = self._tools.get(call.name)
            effect = "other" if tool is None else tool.effect
            summary = summarize_arguments(call.arguments)
            self.agent.session.append(
                ApprovalRequested(
                    self.turn,
                    self.step,
                    call.id,
                    call.name,
                    summary,
                    effect,
                    needed.by,
                    needed.reason,
                    needed.timeout_s,
                )
            )
            self._parked.append(call)
            return
        result = ToolResultEvent(
            self.turn, self.step, call.id, outcome.content, outcome.is_error, outcome.code
        )
        self.agent.session.append(result)


def _refused(decision: ApprovalDecided) -> ToolOutcome:
    """The result of a parked call that was denied: the model reads why."""
    if decision.by == "timeout":
        return ToolOutcome.error(
            TIMEOUT_CODE,
            f"{decision.name} needed approval and was not run: {decision.reason}. Do not "
            "retry it unless the user asks for it.",
        )
    return ToolOutcome.error(
        "DENIED",
        f"{decision.name} needed approval and the user denied it: {decision.reason}. Do not "
        "retry this call unless the user asks for it.",
    )


def call_ids(events: Iterable[SessionEvent]) -> set[str]:
    """The tool-call ids a session's ``events`` already use (calls and results)."""
    return {e.data.call_id for e in events if isinstance(e.data, ToolCallEvent | ToolResultEvent)}


def with_unique_call_ids(message: Message, used: set[str]) -> Message:
    """``message`` with every tool-call id unique in its session, whose ids so far are ``used``
    (:func:`call_ids`); ``used`` is updated with the ids the message ends up with, so a caller
    keeps one set per session instead of scanning its log at every step.

    A call keeps its id unless the id is empty, was used earlier in the session (a model that
    numbers its calls ``call_0``, ``call_1``… in every step) or earlier in this message (a
    model that sent the same id twice). Such a call gets ``<id>_<n>`` (``call_<n>`` for an empty
    id) with the smallest ``n`` from 2 that no call of the session or of this message has, so
    that each result pairs with exactly one call. The model only ever sees the rewritten ids,
    which it echoes back.
    """
    calls = [b.id for b in message.content if isinstance(b, ToolCall)]
    if not calls:
        return message
    if all(calls) and len(set(calls)) == len(calls) and used.isdisjoint(calls):
        used.update(calls)  # nothing to rename (the usual case): ``used`` is not copied
        return message
    # A new id must not take the id of a later call of this message either.
    taken = used | set(calls)
    content: list[Block] = []
    for block in message.content:
        if isinstance(block, ToolCall):
            if not block.id or block.id in used:
                block = evolve(block, id=_fresh_id(block.id or "call", taken))
            used.add(block.id)
            taken.add(block.id)
        content.append(block)
    return Message(message.role, tuple(content))  # at least one id was renamed to get here


def _fresh_id(base: str, used: set[str]) -> str:
    n = 2
    while f"{base}_{n}" in used:
        n += 1
    return f"{base}_{n}"
