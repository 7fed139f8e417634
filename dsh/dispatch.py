"""Running one step's tool calls: batching, concurrency, and a result for every call.

Calls run in the model's order. Consecutive tools marked ``concurrency_safe`` form a batch that
runs concurrently (at most ``max_parallel`` at once); any other tool is a barrier and runs alone.
``tool/call`` events are logged (and checkpointed) before a batch starts; ``tool/result`` events
are logged in the model's order. When the step is cancelled, every call still gets a result:
the outcome if it finished, ``ABORTED`` if it was running, ``ABORTED_BEFORE_DISPATCH`` if it
never started — so the log never holds a tool call without its result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.content import Text, ToolCall
from dsh.events import ToolCallEvent, ToolResultEvent
from dsh.tools import ToolExecution, ToolOutcome

if TYPE_CHECKING:
    from dsh.loop import LoopAgent

__all__ = ["ToolDispatch"]


class ToolDispatch:
    """The tool calls of one step of one agent."""

    def __init__(self, agent: LoopAgent, turn: int, step: int, max_parallel: int) -> None:
        self.agent = agent
        self.turn = turn
        self.step = step
        self.max_parallel = max_parallel
        self._tools = agent.harness.tools

    async def run(self, calls: Sequence[ToolCall]) -> None:
        pending = list(calls)
        try:
            while pending:
                batch = self._next_batch(pending)
                del pending[: len(batch)]
                await self._run_batch(batch)
        except asyncio.CancelledError:
            for call in pending:
                self._log_result(call, self._cancelled("ABORTED_BEFORE_DISPATCH", "never started"))
            raise

    def _safe(self, call: ToolCall) -> bool:
        tool = self._tools.get(call.name)
        return tool is not None and tool.concurrency_safe

    def _next_batch(self, pending: list[ToolCall]) -> list[ToolCall]:
        if not self._safe(pending[0]):
            return pending[:1]
        batch: list[ToolCall] = []
        for call in pending:
            if not self._safe(call):
                break
            batch.append(call)
        return batch

    async def _run_batch(self, batch: list[ToolCall]) -> None:
        session = self.agent.session
        for call in batch:
            session.append(
                "tool/call", ToolCallEvent(self.turn, self.step, call.id, call.name, call.arguments)
            )
        await session.checkpoint()  # the calls may have side effects: log them durably first
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

    async def _execute(self, call: ToolCall, limit: asyncio.Semaphore) -> ToolOutcome:
        async with limit:
            execution = ToolExecution(call.id, call.name, call.arguments, self.agent)
            return await self._tools.execute(execution)

    def _settled(self, task: asyncio.Future[ToolOutcome]) -> ToolOutcome:
        """A finished call keeps its real outcome (its effect happened); others were aborted."""
        if task.cancelled():
            return self._cancelled("ABORTED", "cancelled while running")
        return task.result()

    def _cancelled(self, code: str, what: str) -> ToolOutcome:
        agent = self.agent
        why = "the agent was disposed" if agent.disposing else f"aborted: {agent.abort_reason}"
        return ToolOutcome((Text(f"Error: tool call {what} ({why})"),), True, code)

    def _log_result(self, call: ToolCall, outcome: ToolOutcome) -> None:
        result = ToolResultEvent(
            self.turn, self.step, call.id, outcome.content, outcome.is_error, outcome.code
        )
        self.agent.session.append("tool/result", result)
