"""``otel``: OpenTelemetry traces and metrics of turns, model calls and tool calls.

Spans and metrics follow the OpenTelemetry GenAI semantic conventions: an ``invoke_agent
{agent}`` span per turn, with a ``chat {model}`` span per model call and an ``execute_tool
{tool}`` span per tool call beneath it; retries and compactions are events on the turn's span.
The plugin uses the *global* tracer and meter providers, as a library should: the host (or
``dsh run --otel``) configures the SDK and its exporter. Without ``opentelemetry-api``
installed (the extra ``dsh-harness[otel]``) the plugin does nothing. Prompts and outputs are
recorded only with ``capture_content = true`` in section ``otel``. See
``docs/plugins/otel.md`` and ``docs/observability.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog
from attrs import frozen

from dsh.chunks import LlmFailure
from dsh.errors import LlmError
from dsh.events import (
    HistoryRewriteEnd,
    HistoryRewriteStart,
    SessionEvent,
    TurnEndReason,
    TurnError,
)
from dsh.markers import hookimpl

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from dsh.agent import Agent
    from dsh.harness import Harness
    from dsh.request import LlmRequest
    from dsh.session import Session
    from dsh.tools import ToolExecution, ToolOutcome
    from dsh_plugins.otel.telemetry import Telemetry, ToolCallSpan, TurnSpan

__all__ = ["SECTION", "OtelConfig", "OtelPlugin", "load_telemetry", "provider_of"]

SECTION = "otel"
log = structlog.get_logger("dsh.otel")


@frozen
class OtelConfig:
    """Section ``otel``. ``capture_content`` adds the prompts, the model's outputs and tool
    arguments and results to the spans as events: off by default, as they may hold secrets
    and personal data."""

    capture_content: bool = False


def load_telemetry() -> ModuleType | None:
    """:mod:`dsh_plugins.otel.telemetry`, or ``None`` when ``opentelemetry-api`` is missing."""
    try:
        return importlib.import_module("dsh_plugins.otel.telemetry")
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        return None


def provider_of(harness: Harness, model: str) -> str:
    """``gen_ai.provider.name`` of ``model``: the prefix of a ``provider/model`` id, else the
    package of the adapter serving it (``dsh_plugins.llm_deepseek`` → ``deepseek``)."""
    if "/" in model:
        return model.split("/", 1)[0]
    try:
        adapter = harness.llm.adapter_for(model)
    except LlmError:
        return "unknown"
    parts = type(adapter).__module__.split(".")
    if parts[0] == "dsh_plugins" and len(parts) > 1:
        return parts[1].removeprefix("llm_")
    return parts[0]


class OtelPlugin:
    """Opens and ends the spans from the loop's hooks. ``tracer_provider``/``meter_provider``
    default to the global ones (what a host configures); pass others to keep dsh's telemetry
    apart."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self._providers = (tracer_provider, meter_provider)
        self._telemetry: Telemetry | None = None
        self._harness: Harness | None = None
        self._turns: dict[str, TurnSpan] = {}
        self._tools: dict[tuple[str, str], ToolCallSpan] = {}
        self._providers_of: dict[str, str] = {}

    @property
    def active(self) -> bool:
        """Whether spans are being made (the OpenTelemetry API is installed and started)."""
        return self._telemetry is not None

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, OtelConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        config = harness.config.section(SECTION, OtelConfig)
        module = load_telemetry()
        if module is None:
            log.debug(
                "opentelemetry-api is not installed: no spans (pip install dsh-harness[otel])"
            )
            return
        self._harness = harness
        self._telemetry = module.Telemetry(config.capture_content, *self._providers)

    # -- turns ---------------------------------------------------------------------------------
    @hookimpl
    def dsh_agent_turn_start(self, agent: Agent, turn: int) -> None:
        telemetry = self._telemetry
        if telemetry is not None:
            session = agent.session.id
            self._turns[session] = telemetry.start_turn(
                agent.id, session, turn, agent.options.model
            )

    @hookimpl
    def dsh_agent_turn_end(self, agent: Agent, reason: TurnEndReason) -> None:
        found = self._turns.pop(agent.session.id, None)
        if found is not None:
            failure = reason.failure if isinstance(reason, TurnError) else None
            found.telemetry.end_turn(found, reason.type, failure)

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
        if not isinstance(data, HistoryRewriteStart | HistoryRewriteEnd):
            return
        found = self._turns.get(session.id)
        if found is None:
            return
        if isinstance(data, HistoryRewriteStart):
            attributes: dict[str, Any] = {
                "dsh.compaction.reason": data.reason,
                "dsh.compaction.tokens_before": data.tokens_before,
            }
            found.span.add_event("dsh.compaction.start", attributes)
        else:
            attributes = {"dsh.compaction.tokens_after": data.tokens_after}
            if data.error is not None:
                attributes["error.type"] = "COMPACTION_FAILED"
                attributes["dsh.compaction.error"] = data.error
            found.span.add_event("dsh.compaction.end", attributes)

    # -- model calls ---------------------------------------------------------------------------
    @hookimpl(trylast=True)
    async def dsh_llm_stream(
        self, request: LlmRequest, call_next: Callable[[LlmRequest], Awaitable[Any]]
    ) -> Any:
        """Innermost, so that each call that reaches an adapter is one ``chat`` span."""
        telemetry, harness = self._telemetry, self._harness
        if telemetry is None or harness is None:
            return await call_next(request)
        turn = self._turns.get(request.session_id) if request.session_id else None
        if turn is not None:
            telemetry.retried(turn)
        call = telemetry.start_chat(
            request, self._provider(harness, request.model), turn.context if turn else None
        )
        price = harness.llm.pricing(request.model)
        try:
            stream = await call_next(request)
        except BaseException as exc:
            telemetry.end_chat(call, price, telemetry.error_of(exc))
            raise
        return telemetry.observe(call, stream, price)

    def _provider(self, harness: Harness, model: str) -> str:
        found = self._providers_of.get(model)
        if found is None:
            found = self._providers_of[model] = provider_of(harness, model)
        return found

    # -- tool calls ----------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    async def dsh_tools_execute(
        self,
        execution: ToolExecution,
        call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        """Outermost, so that the span covers the permission decision and the approval wait."""
        telemetry = self._telemetry
        if telemetry is None:
            return await call_next(execution)
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
            found.span.add_event(
                "dsh.tool.approval_requested", {"dsh.tool.approval_reason": reason}
            )
