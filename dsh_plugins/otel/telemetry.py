"""The spans and metrics of the ``otel`` plugin, on the OpenTelemetry API only.

This module imports ``opentelemetry``; :mod:`dsh_plugins.otel` imports it only when the API is
installed. Names follow the OpenTelemetry GenAI semantic conventions (``invoke_agent``, ``chat``,
``execute_tool`` spans; ``gen_ai.*`` attributes and metrics); what the conventions do not name
(turn outcome, retries, compactions, cost) is under ``dsh.*``.

What it costs is what the SDK costs per call (tens of microseconds a span or a measurement in
the loop), so every call is made once: a span gets its attributes in one call when it starts
and one when it ends, the first chunk's event is added when the call ends (the stream itself
only notes a clock), metric attributes are built once per model and tool and reused, a turn's
cost is one measurement per model when the turn ends, and a signal whose provider is the API's
own (nothing configured) is not called at all.
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
from dsh.plugin import (
    Block,
    BlockEnd,
    Finish,
    FinishAborted,
    FinishError,
    LlmFailure,
    LlmRequest,
    Pricing,
    StreamChunk,
    TokenUsage,
    ToolExecution,
    ToolOutcome,
    UsageChunk,
    Value,
    dumps,
    unstructure,
)

__all__ = [
    "ABORTED",
    "ChatCall",
    "Instruments",
    "Telemetry",
    "ToolCallSpan",
    "TurnSpan",
    "error_of",
    "records",
]

SCOPE = "dsh"
#: ``error.type`` of a model call or tool call cut short by abort or dispose.
ABORTED = "ABORTED"
#: dsh's finish reasons as the conventions spell the common ones.
FINISH_REASONS = {"stop": "stop", "tool-calls": "tool_calls", "max-tokens": "length"}
#: The bucket boundaries the GenAI conventions recommend for these histograms.
TOKEN_BUCKETS = [4.0**n for n in range(14)]
SECONDS_BUCKETS = [0.01 * 2.0**n for n in range(14)]
#: Metric attribute sets kept for reuse; past this many (a host inventing model or tool names
#: without end) the cache starts over rather than grow.
CACHED_ATTRIBUTES = 512

#: Where the API defines its providers (the SDK's are in ``opentelemetry.sdk``).
API_PACKAGES = ("opentelemetry.trace.", "opentelemetry.metrics.")

Attributes = dict[str, AttributeValue]
#: ``(provider, model, error.type)`` of a model call: what its metric attributes depend on.
ChatKey = tuple[str, str, str | None]


def records(provider: object) -> bool:
    """Whether ``provider`` records anything. The API's own providers do not: its no-op ones,
    and the proxies that stand in for the global providers until a host sets them."""
    return not f"{type(provider).__module__}.".startswith(API_PACKAGES)


def _json(value: Any) -> str:
    return dumps(unstructure(value))


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


@define(repr=False)
class TurnSpan(Value):
    """A running turn: its ``invoke_agent`` span (``None`` when traces are not recorded), what
    its model calls left behind, and the cost of its calls by model, added when it ends."""

    span: Span | None
    context: Context | None
    agent_name: str
    failure: LlmFailure | None = None
    attempt: int = 0
    costs: dict[ChatKey, float] = field(factory=dict)
    ended: bool = False


@define(repr=False)
class ToolCallSpan(Value):
    """An open ``execute_tool`` span; ``asked`` is set when a policy asked for approval."""

    span: Span | None
    started: float
    asked: bool = False


@define(repr=False)
class ChatCall(Value):
    """What one model call reported, gathered while its stream runs."""

    span: Span | None
    request: LlmRequest
    provider: str
    turn: TurnSpan | None
    started: float
    first_chunk: float | None = None
    first_chunk_ns: int = 0
    usage: TokenUsage | None = None
    finish: str | None = None
    failure: LlmFailure | None = None
    output: list[Block] = field(factory=list)


class Instruments:
    """The plugin's metric instruments, made once from one meter."""

    def __init__(self, meter: metrics.Meter) -> None:
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
            "dsh.llm.cost",
            "{USD}",
            "What model calls cost, where the model's price is known",
        )
        self.turns = meter.create_counter("dsh.agent.turns", "{turn}", "Turns, by dsh.turn.outcome")


class Telemetry:
    """Opens spans and records metrics; ``capture_content`` adds prompts and outputs as span
    events (off by default: they are sensitive). ``traced`` and ``metered`` say which signals
    have a provider that records; :meth:`refresh` looks again (a host may set the global
    providers after the harness started)."""

    #: ``(error.type, message)`` of an exception that ended a call.
    error_of = staticmethod(error_of)

    def __init__(
        self,
        capture_content: bool = False,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.capture_content = capture_content
        self._providers = (tracer_provider, meter_provider)
        self.tracer: trace.Tracer = trace.NoOpTracer()
        self.instruments = Instruments(metrics.NoOpMeter(SCOPE))
        self.traced = self.metered = False
        self._chat_attributes: dict[ChatKey, tuple[Attributes, Attributes, Attributes]] = {}
        self._tool_attributes: dict[tuple[str, str | None], Attributes] = {}
        self.refresh()

    def refresh(self) -> bool:
        """Take up a signal whose provider now records; returns whether any signal does."""
        tracer_provider, meter_provider = self._providers
        if not self.traced:
            tracing = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
            if records(tracing):
                self.tracer = tracing.get_tracer(SCOPE, __version__)
                self.traced = True
        if not self.metered:
            metering = metrics.get_meter_provider() if meter_provider is None else meter_provider
            if records(metering):
                self.instruments = Instruments(metering.get_meter(SCOPE, __version__))
                self.metered = True
        return self.traced or self.metered

    def status_text(self, code: str, message: str) -> str:
        """The description of an error status: the error's text with content capture on; else
        only its code (``error.type``). Error texts quote what tools and models were given and
        said — a path, a command, a password a tool echoed — so they are content."""
        return message if self.capture_content else code

    # -- turns ---------------------------------------------------------------------------------
    def start_turn(self, agent_id: str, session_id: str, turn: int, model: str) -> TurnSpan:
        """The ``invoke_agent`` span, a child of whatever span is current (a host's request, or
        the tool call that started a sub-agent)."""
        if not self.traced:
            return TurnSpan(None, None, agent_id)
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
        return TurnSpan(span, trace.set_span_in_context(span), agent_id)

    def end_turn(self, turn: TurnSpan, outcome: str, failure: LlmFailure | None) -> None:
        turn.ended = True
        span = turn.span
        if span is not None:
            attributes: Attributes = {"dsh.turn.outcome": outcome}
            if failure is not None:
                attributes["error.type"] = failure.code
                span.set_status(StatusCode.ERROR, self.status_text(failure.code, failure.message))
            span.set_attributes(attributes)
            span.end()
        if self.metered:
            instruments = self.instruments
            for key, dollars in turn.costs.items():
                instruments.cost.add(dollars, self._chat_metric_attributes(key)[0])
            outcomes = {"gen_ai.agent.name": turn.agent_name, "dsh.turn.outcome": outcome}
            instruments.turns.add(1, outcomes)

    def retried(self, turn: TurnSpan) -> None:
        """The failed model call of ``turn`` is being made again: a ``dsh.llm.retry`` event."""
        failure = turn.failure
        if failure is None:
            return
        turn.failure = None
        if turn.span is None:
            return
        attributes: Attributes = {"dsh.retry.attempt": turn.attempt, "error.type": failure.code}
        if failure.status is not None:
            attributes["http.response.status_code"] = failure.status
        turn.span.add_event("dsh.llm.retry", attributes)

    # -- model calls ---------------------------------------------------------------------------
    def start_chat(self, request: LlmRequest, provider: str, turn: TurnSpan | None) -> ChatCall:
        if not self.traced:
            return ChatCall(None, request, provider, turn, time.monotonic())
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
        parent = turn.context if turn is not None else None
        span = self.tracer.start_span(f"chat {request.model}", parent, SpanKind.CLIENT, attributes)
        return ChatCall(span, request, provider, turn, time.monotonic())

    async def observe(
        self, call: ChatCall, stream: AsyncIterator[StreamChunk], price: Pricing | None
    ) -> AsyncIterator[StreamChunk]:
        """``stream``, unchanged, noting what passes on ``call`` (a clock reading for the
        first chunk, then only the usage and finish chunks); the span ends with it."""
        error: tuple[str, str] | None = None
        capture = self.capture_content
        try:
            async for chunk in stream:
                if call.first_chunk is None:
                    call.first_chunk, call.first_chunk_ns = time.monotonic(), time.time_ns()
                if isinstance(chunk, UsageChunk):
                    call.usage = chunk.usage
                elif isinstance(chunk, Finish):
                    reason = chunk.reason
                    call.finish = FINISH_REASONS.get(reason.type, reason.type)
                    if isinstance(reason, FinishError | FinishAborted):
                        call.failure = reason.failure
                elif capture and isinstance(chunk, BlockEnd):
                    call.output.append(chunk.block)
                yield chunk
        except BaseException as exc:
            error = error_of(exc)
            raise
        finally:
            close: Any = getattr(stream, "aclose", None)
            if close is not None:
                await close()
            self.end_chat(call, price, error)

    def end_chat(
        self, call: ChatCall, price: Pricing | None, error: tuple[str, str] | None = None
    ) -> None:
        """End the span with what the call reported and record its metrics. ``error`` is
        ``(code, message)`` when the stream raised instead of finishing."""
        ended = time.monotonic()
        failure = call.failure
        if failure is not None:
            error = (failure.code, failure.message)
        usage = call.usage
        dollars = None
        if usage is not None and price is not None:
            dollars = price.price_at(time.time()).cost(usage)
        if call.span is not None:
            self._end_chat_span(call, call.span, error, dollars)
        if self.metered:
            self._chat_metrics(call, error[0] if error else None, dollars, ended)

    def _end_chat_span(
        self, call: ChatCall, span: Span, error: tuple[str, str] | None, dollars: float | None
    ) -> None:
        attributes: Attributes = {"gen_ai.response.model": call.request.model}
        if call.finish is not None:
            attributes["gen_ai.response.finish_reasons"] = (call.finish,)
        if call.failure is not None and call.failure.request_id is not None:
            attributes["dsh.llm.request_id"] = call.failure.request_id
        usage = call.usage
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = _billed_input(usage)
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if dollars is not None:
            attributes["dsh.llm.cost"] = dollars
        if error is not None:
            attributes["error.type"] = error[0]
            span.set_status(StatusCode.ERROR, self.status_text(*error))
        span.set_attributes(attributes)
        if call.first_chunk is not None:
            elapsed: Attributes = {"dsh.llm.time_to_first_chunk": call.first_chunk - call.started}
            span.add_event("dsh.llm.first_chunk", elapsed, call.first_chunk_ns)
        if self.capture_content:
            span.add_event("gen_ai.client.inference.operation.details", _content(call))
        span.end()

    def _chat_metrics(
        self, call: ChatCall, error: str | None, dollars: float | None, ended: float
    ) -> None:
        key = (call.provider, call.request.model, error)
        common, inputs, outputs = self._chat_metric_attributes(key)
        instruments = self.instruments
        instruments.duration.record(ended - call.started, common)
        if call.first_chunk is not None:
            instruments.first_chunk.record(call.first_chunk - call.started, common)
        usage = call.usage
        if usage is not None:
            instruments.token_usage.record(_billed_input(usage), inputs)
            instruments.token_usage.record(usage.output_tokens, outputs)
        if dollars is None:
            return
        turn = call.turn
        if turn is None or turn.ended:  # no turn to add it up in: one measurement now
            instruments.cost.add(dollars, common)
        else:
            turn.costs[key] = turn.costs.get(key, 0.0) + dollars

    def _chat_metric_attributes(self, key: ChatKey) -> tuple[Attributes, Attributes, Attributes]:
        """The attributes of a model call's measurements (all, input tokens, output tokens),
        made once per provider, model and error: the SDK copies what it keeps."""
        found = self._chat_attributes.get(key)
        if found is None:
            provider, model, error = key
            common: Attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
            }
            if error is not None:
                common["error.type"] = error
            found = (
                common,
                {**common, "gen_ai.token.type": "input"},
                {**common, "gen_ai.token.type": "output"},
            )
            _bounded(self._chat_attributes)[key] = found
        return found

    # -- tool calls ----------------------------------------------------------------------------
    def start_tool(self, execution: ToolExecution, parent: Context | None) -> ToolCallSpan:
        if not self.traced:
            return ToolCallSpan(None, time.monotonic())
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": execution.name,
            "gen_ai.tool.call.id": execution.call_id,
            "gen_ai.tool.type": "function",
        }
        span = self.tracer.start_span(
            f"execute_tool {execution.name}", parent, attributes=attributes
        )
        return ToolCallSpan(span, time.monotonic())

    async def run_tool(
        self,
        call: ToolCallSpan,
        execution: ToolExecution,
        call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        """Run the rest of the chain with the tool span current, so that what the tool does
        (an MCP request, a sub-agent's turn, the host's own spans) nests under it."""
        span = call.span
        token = attach(trace.set_span_in_context(span)) if span is not None else None
        outcome: ToolOutcome | None = None
        error: tuple[str, str] | None = None
        try:
            outcome = await call_next(execution)
        except BaseException as exc:
            error = error_of(exc)
            raise
        finally:
            if token is not None:
                detach(token)
            self.end_tool(call, execution, outcome, error)
        return outcome

    def end_tool(
        self,
        call: ToolCallSpan,
        execution: ToolExecution,
        outcome: ToolOutcome | None,
        error: tuple[str, str] | None,
    ) -> None:
        """``outcome`` is what the call produced; ``error`` is ``(code, message)`` when the
        middleware chain raised instead."""
        seconds = time.monotonic() - call.started
        if outcome is not None and outcome.is_error:
            error = (outcome.code or "TOOL_ERROR", _text(outcome))
        span = call.span
        if span is not None:
            self._end_tool_span(call, span, execution, outcome, error)
        if self.metered:
            code = error[0] if error is not None else None
            self.instruments.duration.record(
                seconds, self._tool_metric_attributes(execution.name, code)
            )

    def _end_tool_span(
        self,
        call: ToolCallSpan,
        span: Span,
        execution: ToolExecution,
        outcome: ToolOutcome | None,
        error: tuple[str, str] | None,
    ) -> None:
        denied = error is not None and error[0] == "DENIED"
        attributes: Attributes = {
            "dsh.tool.outcome": "ok" if error is None else "error",
            "dsh.tool.permission": "denied" if denied else "approved" if call.asked else "allowed",
        }
        if error is not None:
            attributes["error.type"] = error[0]
            span.set_status(StatusCode.ERROR, self.status_text(*error))
        span.set_attributes(attributes)
        if self.capture_content:
            details: Attributes = {"gen_ai.tool.call.arguments": execution.arguments}
            if outcome is not None:
                details["gen_ai.tool.call.result"] = _json(outcome.content)
            span.add_event("dsh.tool.content", details)
        span.end()

    def _tool_metric_attributes(self, name: str, error: str | None) -> Attributes:
        found = self._tool_attributes.get((name, error))
        if found is None:
            found = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
            if error is not None:
                found["error.type"] = error
            _bounded(self._tool_attributes)[(name, error)] = found
        return found


def _bounded(cache: dict[Any, Any]) -> dict[Any, Any]:
    """``cache``, emptied first when it is full."""
    if len(cache) >= CACHED_ATTRIBUTES:
        cache.clear()
    return cache


def _billed_input(usage: TokenUsage) -> int:
    """Input tokens as the conventions count them: cache reads and writes included."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


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
