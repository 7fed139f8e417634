"""The spans and metrics of the ``otel`` plugin, on the OpenTelemetry API only.

This module imports ``opentelemetry``; :mod:`dsh_plugins.otel` imports it only when the API is
installed. Names follow the OpenTelemetry GenAI semantic conventions (``invoke_agent``, ``chat``,
``execute_tool`` spans; ``gen_ai.*`` attributes and metrics); what the conventions do not name
(turn outcome, retries, compactions, cost) is under ``dsh.*``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from attrs import define, field
from opentelemetry import metrics, trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import Span, SpanKind, StatusCode
from opentelemetry.util.types import AttributeValue

from dsh import __version__
from dsh.chunks import (
    BlockEnd,
    Finish,
    FinishAborted,
    FinishError,
    LlmFailure,
    StreamChunk,
    TokenUsage,
    UsageChunk,
)
from dsh.content import Block
from dsh.converter import dumps, unstructure
from dsh.request import LlmRequest
from dsh.tokens import Pricing
from dsh.tools import ToolExecution, ToolOutcome

__all__ = ["ABORTED", "ChatCall", "Telemetry", "ToolCallSpan", "TurnSpan", "error_of"]

SCOPE = "dsh"
#: ``error.type`` of a model call or tool call cut short by abort or dispose.
ABORTED = "ABORTED"
#: dsh's finish reasons as the conventions spell the common ones.
FINISH_REASONS = {"stop": "stop", "tool-calls": "tool_calls", "max-tokens": "length"}
#: The bucket boundaries the GenAI conventions recommend for these histograms.
TOKEN_BUCKETS = [4.0**n for n in range(14)]
SECONDS_BUCKETS = [0.01 * 2.0**n for n in range(14)]

Attributes = dict[str, AttributeValue]


def _json(value: Any) -> str:
    return dumps(unstructure(value))


def _fail(span: Span, code: str, message: str) -> None:
    span.set_attribute("error.type", code)
    span.set_status(StatusCode.ERROR, message)


def error_of(exc: BaseException) -> tuple[str, str]:
    """``(error.type, message)`` of what ended a model or tool call by raising: the failure
    code of an ``LlmError``; ``ABORTED`` when it was cancelled (abort, dispose) or its stream
    was closed before it finished; else the exception's class."""
    failure = getattr(exc, "failure", None)
    if isinstance(failure, LlmFailure):
        return failure.code, failure.message
    if isinstance(exc, GeneratorExit | asyncio.CancelledError):
        return ABORTED, "the call was cancelled before it finished"
    return type(exc).__qualname__, str(exc)


@define
class TurnSpan:
    """The ``invoke_agent`` span of a running turn, and what its model calls left behind."""

    span: Span
    context: Context
    agent_name: str
    telemetry: Telemetry
    failure: LlmFailure | None = None
    attempt: int = 0


@define
class ToolCallSpan:
    """An open ``execute_tool`` span; ``asked`` is set when a policy asked for approval."""

    span: Span
    asked: bool = False


@define
class ChatCall:
    """What one model call reported, gathered while its stream runs."""

    span: Span
    request: LlmRequest
    provider: str
    started: float
    first_chunk: float | None = None
    usage: TokenUsage | None = None
    finish: str | None = None
    failure: LlmFailure | None = None
    output: list[Block] = field(factory=list)


class Telemetry:
    """Opens spans and records metrics; ``capture_content`` adds prompts and outputs as span
    events (off by default: they are sensitive)."""

    #: ``(error.type, message)`` of an exception that ended a call.
    error_of = staticmethod(error_of)

    def __init__(
        self,
        capture_content: bool = False,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.capture_content = capture_content
        self.tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Tokens used by model calls, by gen_ai.token.type (input, output)",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            "s",
            "Duration of model calls (chat) and tool calls (execute_tool)",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            "s",
            "Time from a model call's start to its first streamed chunk",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.cost = meter.create_counter(
            "dsh.llm.cost", "{USD}", "What model calls cost, where the model's price is known"
        )
        self.turns = meter.create_counter("dsh.agent.turns", "{turn}", "Turns, by dsh.turn.outcome")

    # -- turns ---------------------------------------------------------------------------------
    def start_turn(self, agent_id: str, session_id: str, turn: int, model: str) -> TurnSpan:
        """The ``invoke_agent`` span, a child of whatever span is current (a host's request, or
        the tool call that started a sub-agent)."""
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": agent_id,
            "gen_ai.agent.name": agent_id,
            "gen_ai.conversation.id": session_id,
            "dsh.turn": turn,
        }
        if model:
            attributes["gen_ai.request.model"] = model
        span = self.tracer.start_span(f"invoke_agent {agent_id}", attributes=attributes)
        return TurnSpan(span, trace.set_span_in_context(span), agent_id, self)

    def end_turn(self, turn: TurnSpan, outcome: str, failure: LlmFailure | None) -> None:
        turn.span.set_attribute("dsh.turn.outcome", outcome)
        if failure is not None:
            _fail(turn.span, failure.code, failure.message)
        turn.span.end()
        self.turns.add(1, {"gen_ai.agent.name": turn.agent_name, "dsh.turn.outcome": outcome})

    def retried(self, turn: TurnSpan) -> None:
        """The failed model call of ``turn`` is being made again: a ``dsh.llm.retry`` event."""
        failure = turn.failure
        if failure is None:
            return
        attributes: Attributes = {"dsh.retry.attempt": turn.attempt, "error.type": failure.code}
        if failure.status is not None:
            attributes["http.response.status_code"] = failure.status
        turn.span.add_event("dsh.llm.retry", attributes)
        turn.failure = None

    # -- model calls ---------------------------------------------------------------------------
    def start_chat(self, request: LlmRequest, provider: str, parent: Context | None) -> ChatCall:
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": request.model,
        }
        if request.session_id is not None:
            attributes["gen_ai.conversation.id"] = request.session_id
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if request.purpose is not None:
            attributes["dsh.llm.purpose"] = request.purpose
        span = self.tracer.start_span(f"chat {request.model}", parent, SpanKind.CLIENT, attributes)
        return ChatCall(span, request, provider, time.monotonic())

    async def observe(
        self, call: ChatCall, stream: AsyncIterator[StreamChunk], price: Pricing | None
    ) -> AsyncIterator[StreamChunk]:
        """``stream``, unchanged, recording what passes on ``call``; the span ends with it."""
        error: tuple[str, str] | None = None
        try:
            async for chunk in stream:
                self._saw(call, chunk)
                yield chunk
        except BaseException as exc:
            error = error_of(exc)
            raise
        finally:
            close: Any = getattr(stream, "aclose", None)
            if close is not None:
                await close()
            self.end_chat(call, price, error)

    def _saw(self, call: ChatCall, chunk: StreamChunk) -> None:
        if call.first_chunk is None:
            call.first_chunk = time.monotonic()
            elapsed = call.first_chunk - call.started
            call.span.add_event("dsh.llm.first_chunk", {"dsh.llm.time_to_first_chunk": elapsed})
        if isinstance(chunk, UsageChunk):
            call.usage = chunk.usage
        elif isinstance(chunk, Finish):
            reason = chunk.reason
            call.finish = FINISH_REASONS.get(reason.type, reason.type)
            if isinstance(reason, FinishError | FinishAborted):
                call.failure = reason.failure
        elif isinstance(chunk, BlockEnd) and self.capture_content:
            call.output.append(chunk.block)

    def end_chat(
        self, call: ChatCall, price: Pricing | None, error: tuple[str, str] | None = None
    ) -> None:
        """Set what the call reported on its span, record its metrics and end it. ``error``
        is ``(code, message)`` when the stream raised instead of finishing."""
        span, request = call.span, call.request
        common: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": call.provider,
            "gen_ai.request.model": request.model,
            "gen_ai.response.model": request.model,
        }
        span.set_attribute("gen_ai.response.model", request.model)
        if call.finish is not None:
            span.set_attribute("gen_ai.response.finish_reasons", (call.finish,))
        failure = call.failure
        if failure is not None:
            error = (failure.code, failure.message)
            if failure.request_id is not None:
                span.set_attribute("dsh.llm.request_id", failure.request_id)
        if error is not None:
            _fail(span, *error)
            common = {**common, "error.type": error[0]}
        if call.usage is not None:
            self._usage(call, common, price)
        if self.capture_content:
            span.add_event("gen_ai.client.inference.operation.details", _content(call))
        end = time.monotonic()
        self.duration.record(end - call.started, common)
        if call.first_chunk is not None:
            self.first_chunk.record(call.first_chunk - call.started, common)
        span.end()

    def _usage(self, call: ChatCall, common: Attributes, price: Pricing | None) -> None:
        usage = call.usage
        assert usage is not None
        billed_input = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        call.span.set_attributes(
            {
                "gen_ai.usage.input_tokens": billed_input,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            }
        )
        self.token_usage.record(billed_input, {**common, "gen_ai.token.type": "input"})
        self.token_usage.record(usage.output_tokens, {**common, "gen_ai.token.type": "output"})
        if price is not None:
            dollars = price.price_at(time.time()).cost(usage)
            call.span.set_attribute("dsh.llm.cost", dollars)
            self.cost.add(dollars, common)

    # -- tool calls ----------------------------------------------------------------------------
    def start_tool(self, execution: ToolExecution, parent: Context | None) -> ToolCallSpan:
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": execution.name,
            "gen_ai.tool.call.id": execution.call_id,
            "gen_ai.tool.type": "function",
        }
        span = self.tracer.start_span(
            f"execute_tool {execution.name}", parent, attributes=attributes
        )
        return ToolCallSpan(span)

    async def run_tool(
        self,
        call: ToolCallSpan,
        execution: ToolExecution,
        call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        """Run the rest of the chain with the tool span current, so that what the tool does
        (an MCP request, a sub-agent's turn, the host's own spans) nests under it."""
        started = time.monotonic()
        token = attach(trace.set_span_in_context(call.span))
        outcome: ToolOutcome | None = None
        error: tuple[str, str] | None = None
        try:
            outcome = await call_next(execution)
        except BaseException as exc:
            error = error_of(exc)
            raise
        finally:
            detach(token)
            self.end_tool(call, execution, outcome, error, time.monotonic() - started)
        return outcome

    def end_tool(
        self,
        call: ToolCallSpan,
        execution: ToolExecution,
        outcome: ToolOutcome | None,
        error: tuple[str, str] | None,
        seconds: float,
    ) -> None:
        """``outcome`` is what the call produced; ``error`` is ``(code, message)`` when the
        middleware chain raised instead."""
        span = call.span
        if outcome is not None and outcome.is_error:
            error = (outcome.code or "TOOL_ERROR", _text(outcome))
        denied = error is not None and error[0] == "DENIED"
        span.set_attribute("dsh.tool.outcome", "ok" if error is None else "error")
        span.set_attribute(
            "dsh.tool.permission", "denied" if denied else "approved" if call.asked else "allowed"
        )
        metric: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": execution.name,
        }
        if error is not None:
            _fail(span, *error)
            metric["error.type"] = error[0]
        if self.capture_content:
            details: Attributes = {"gen_ai.tool.call.arguments": execution.arguments}
            if outcome is not None:
                details["gen_ai.tool.call.result"] = _json(outcome.content)
            span.add_event("dsh.tool.content", details)
        self.duration.record(seconds, metric)
        span.end()


def _text(outcome: ToolOutcome) -> str:
    return "".join(getattr(block, "text", "") for block in outcome.content)


def _content(call: ChatCall) -> Mapping[str, AttributeValue]:
    request = call.request
    details: dict[str, AttributeValue] = {
        "gen_ai.input.messages": _json(list(request.messages)),
        "gen_ai.output.messages": _json(call.output),
    }
    if request.system:
        details["gen_ai.system_instructions"] = request.system
    return details
