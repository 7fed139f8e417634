"""The hooks of the ``otel`` plugin that run while something is recorded.

:class:`~dsh_plugins.otel.OtelPlugin` registers a :class:`Recorder` only once a tracer or meter
provider records (the host configured the SDK, or ``--otel`` did): until then the loop calls
none of these hooks, and an install with the API but no SDK pays nothing per chunk, per model
call or per tool call. Registered while the harness starts, it comes after every loaded plugin,
and pluggy calls the last registered first: its ``tryfirst`` tool middleware is the outermost
one, also beside the ``permissions`` plugin's (its span covers a policy's decision and the wait
for the host's answer); its ``trylast`` stream middleware is inside every one not ``trylast``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import (
    HistoryRewriteEnd,
    HistoryRewriteStart,
    LlmFailure,
    SessionEvent,
    TurnEndReason,
    TurnError,
    hookimpl,
)
from dsh_plugins.otel import provider_of
from dsh_plugins.otel.telemetry import Attributes, Telemetry, ToolCallSpan, TurnSpan

if TYPE_CHECKING:
    from dsh.plugin import Agent, Harness, LlmRequest, Session, ToolExecution, ToolOutcome

__all__ = ["Recorder"]

#: The events the recorder notes (it sees every event, every streamed chunk among them).
_REWRITES = (HistoryRewriteStart, HistoryRewriteEnd)


class Recorder:
    """Opens and ends the spans from the loop's hooks, and records the metrics."""

    def __init__(self, harness: Harness, telemetry: Telemetry) -> None:
        self.harness = harness
        self.telemetry = telemetry
        self._turns: dict[str, TurnSpan] = {}
        self._tools: dict[tuple[str, str], ToolCallSpan] = {}
        self._providers_of: dict[str, str] = {}

    # -- turns ---------------------------------------------------------------------------------
    def start_turn(self, agent: Agent, turn: int) -> None:
        """Called by the plugin's ``dsh_agent_turn_start``, which decides whether to record."""
        telemetry = self.telemetry
        if not (telemetry.traced and telemetry.metered):
            telemetry.refresh()  # a host may set the other global provider later
        session = agent.session.id
        self._turns[session] = telemetry.start_turn(agent.id, session, turn, agent.options.model)

    @hookimpl
    def dsh_agent_turn_end(self, agent: Agent, reason: TurnEndReason) -> None:
        found = self._turns.pop(agent.session.id, None)
        if found is not None:
            failure = reason.failure if isinstance(reason, TurnError) else None
            self.telemetry.end_turn(found, reason.type, failure)

    @hookimpl(tryfirst=True)
    def dsh_agent_request_error(self, agent: Agent, failure: LlmFailure, attempt: int) -> None:
        """Remember the failure: if the step's next model call comes, it was retried."""
        found = self._turns.get(agent.session.id)
        if found is not None:
            found.failure, found.attempt = failure, attempt

    @hookimpl
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        """Compactions, as events of the turn's span (a manual one outside a turn has none)."""
        data = event.data
        if not isinstance(data, _REWRITES):  # a tuple: a union type is built at every call
            return
        found = self._turns.get(session.id)
        if found is None or found.span is None:
            return
        if isinstance(data, HistoryRewriteStart):
            attributes: Attributes = {
                "dsh.compaction.reason": data.reason,
                "dsh.compaction.tokens_before": data.tokens_before,
            }
            found.span.add_event("dsh.compaction.start", attributes)
        else:
            attributes = {"dsh.compaction.tokens_after": data.tokens_after}
            if data.error is not None:
                attributes["error.type"] = "COMPACTION_FAILED"
                if self.telemetry.capture_content:  # the text may quote the conversation
                    attributes["dsh.compaction.error"] = data.error
            found.span.add_event("dsh.compaction.end", attributes)

    # -- model calls ---------------------------------------------------------------------------
    @hookimpl(trylast=True)
    async def dsh_llm_stream(
        self, request: LlmRequest, call_next: Callable[[LlmRequest], Awaitable[Any]]
    ) -> Any:
        """Innermost, so that each call that reaches an adapter is one ``chat`` span."""
        telemetry = self.telemetry
        turn = self._turns.get(request.session_id) if request.session_id else None
        if turn is not None:
            telemetry.retried(turn)
        call = telemetry.start_chat(request, self._provider(request.model), turn)
        price = self.harness.llm.pricing(request.model)
        try:
            stream = await call_next(request)
        except BaseException as exc:
            telemetry.end_chat(call, price, telemetry.error_of(exc))
            raise
        return telemetry.observe(call, stream, price)

    def _provider(self, model: str) -> str:
        found = self._providers_of.get(model)
        if found is None:
            found = self._providers_of[model] = provider_of(self.harness, model)
        return found

    # -- tool calls ----------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    async def dsh_tools_execute(
        self,
        execution: ToolExecution,
        call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        """Outermost, so that the span covers the permission decision and the approval wait."""
        telemetry = self.telemetry
        session = execution.agent.session.id if execution.agent is not None else ""
        turn = self._turns.get(session)
        call = telemetry.start_tool(execution, turn.context if turn else None)
        key = (session, execution.call_id)
        self._tools[key] = call
        try:
            return await telemetry.run_tool(call, execution, call_next)
        finally:
            del self._tools[key]

    @hookimpl(tryfirst=True)
    def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> None:
        """A policy asks the host: note it on the tool's span (the answer shows in its
        outcome) and let the host answer."""
        session = execution.agent.session.id if execution.agent is not None else ""
        found = self._tools.get((session, execution.call_id))
        if found is not None:
            found.asked = True
            if found.span is not None:
                # The policy's reason may quote the call's arguments (a path, a command).
                asked: Attributes = {}
                if self.telemetry.capture_content:
                    asked["dsh.tool.approval_reason"] = reason
                found.span.add_event("dsh.tool.approval_requested", asked)
