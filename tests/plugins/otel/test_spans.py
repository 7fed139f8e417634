"""The otel plugin's span tree, attributes, events and metrics, read from the SDK's in-memory
exporters: a tool-using turn, failed model calls and retries, aborts, content capture."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.app._harness import Harness as HarnessType
from dsh.llm._service import ModelInfo
from dsh.testing import (
    ScriptedAdapter,
    error_response,
    hang,
    raise_error,
    text_response,
    tool_call_response,
)
from dsh.tools._registry import ToolExecution, ToolOutcome
from dsh.values._agent import Agent
from dsh.values._chunks import (
    BlockStart,
    Finish,
    FinishError,
    LlmFailure,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from dsh.values._content import Message, Text
from dsh.values._rare_events import HistoryRewriteEnd, HistoryRewriteStart
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._tokens import Price
from dsh_plugins.otel import provider_of
from tests.plugins.otel.support import Telemetry, agent_on, run_turn


async def echo(args: Any, execution: ToolExecution) -> str:
    return f"echo: {args['text']}"


ECHO = Tool(ToolSchema("echo", "Echo the text."), echo)


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def sums(telemetry: Telemetry, metric: str, **where: Any) -> list[float]:
    points = telemetry.points(metric)
    return [
        p.sum if hasattr(p, "sum") else p.value
        for p in points
        if all(p.attributes.get(k) == v for k, v in where.items())
    ]


def everything_recorded(telemetry: Telemetry) -> str:
    """Every attribute and event attribute value of every span, as one text."""
    values: list[str] = []
    for span in telemetry.spans():
        values += [str(v) for v in (span.attributes or {}).values()]
        for event in span.events:
            values += [str(v) for v in (event.attributes or {}).values()]
    return "\n".join(values)


async def test_a_tool_using_turn_is_one_trace_under_its_invoke_agent_span(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.tools.register(ECHO)
    agent = agent_on(
        harness, tool_call_response("c1", "echo", {"text": "x"}), text_response("done")
    )
    await run_turn(agent)

    turn = telemetry.one("invoke_agent a")
    chats = telemetry.named("chat scripted")
    tool = telemetry.one("execute_tool echo")
    assert len(chats) == 2 and turn.parent is None
    assert {parent_of(s) for s in [*chats, tool]} == {span_id(turn)}
    assert {trace_id(s) for s in [*chats, tool]} == {trace_id(turn)}
    assert chats[0].end_time is not None and tool.start_time is not None
    assert chats[0].end_time <= tool.start_time  # the tool ran after the model asked for it
    assert dict(turn.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": "a",
        "gen_ai.agent.name": "a",
        "gen_ai.conversation.id": agent.session.id,
        "dsh.turn": 1,
        "gen_ai.request.model": "scripted",
        "dsh.turn.outcome": "completed",
    }
    assert turn.status.status_code is StatusCode.UNSET
    first = dict(chats[0].attributes or {})
    assert first == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "dsh",  # the package of the adapter (dsh.testing)
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": "scripted",
        "gen_ai.conversation.id": agent.session.id,
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "gen_ai.usage.cache_creation.input_tokens": 0,
    }
    assert (chats[1].attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)
    assert [e.name for e in chats[0].events] == ["dsh.llm.first_chunk"]
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "dsh.tool.outcome": "ok",
        "dsh.tool.permission": "allowed",
    }


async def test_a_turn_records_token_duration_first_chunk_and_turn_metrics(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.tools.register(ECHO)
    agent = agent_on(
        harness, tool_call_response("c1", "echo", {"text": "x"}), text_response("done")
    )
    await run_turn(agent)
    usage = "gen_ai.client.token.usage"
    assert sums(telemetry, usage, **{"gen_ai.token.type": "input"}) == [20]
    assert sums(telemetry, usage, **{"gen_ai.token.type": "output"}) == [5 + 4]
    durations = telemetry.points("gen_ai.client.operation.duration")
    by_operation = {p.attributes["gen_ai.operation.name"]: p.count for p in durations}
    assert by_operation == {"chat": 2, "execute_tool": 1}
    tool_point = next(p for p in durations if p.attributes.get("gen_ai.tool.name") == "echo")
    assert tool_point.sum > 0
    first = telemetry.points("gen_ai.client.operation.time_to_first_chunk")
    assert [p.count for p in first] == [2]
    turns = sums(telemetry, "dsh.agent.turns", **{"dsh.turn.outcome": "completed"})
    assert turns == [1]
    assert telemetry.points("dsh.llm.cost") == []  # the scripted model has no price


class PricedAdapter(ScriptedAdapter):
    """A scripted model whose tokens cost $1 (input), $2 (output), $0.5 (cache read) per
    million."""

    def model_info(self, model_id: str) -> ModelInfo:
        return ModelInfo(pricing=Price(1.0, 2.0, cache_read=0.5))


async def test_cost_and_cache_reads_are_recorded_when_the_price_is_known(
    harness: Harness, telemetry: Telemetry
) -> None:
    usage = TokenUsage(input_tokens=1000, output_tokens=500, cache_read_tokens=4000)
    reply = [*text_response("ok")[:-2], UsageChunk(usage), text_response("ok")[-1]]
    harness.llm.register_adapter(["priced"], PricedAdapter([reply]))
    agent = harness.agent_loop.create("p", AgentOptions(model="priced"))
    await run_turn(agent)
    chat = dict(telemetry.one("chat priced").attributes or {})
    dollars = (1000 * 1.0 + 500 * 2.0 + 4000 * 0.5) / 1_000_000
    assert chat["gen_ai.usage.input_tokens"] == 5000  # billed input: cache reads included
    assert chat["gen_ai.usage.cache_read.input_tokens"] == 4000
    assert chat["dsh.llm.cost"] == pytest.approx(dollars)
    assert sums(telemetry, "dsh.llm.cost") == [pytest.approx(dollars)]


async def test_failed_model_calls_are_error_spans_and_their_retries_turn_events(
    harness: Harness, telemetry: Telemetry
) -> None:
    agent = agent_on(
        harness,
        raise_error("RATE_LIMIT", "slow down"),
        error_response("SERVER", "boom", status=503),
        text_response("ok"),
    )
    await run_turn(agent)
    first, second, third = telemetry.named("chat scripted")
    assert (first.attributes or {})["error.type"] == "RATE_LIMIT"
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "RATE_LIMIT"  # the code: the text is content
    assert "gen_ai.response.finish_reasons" not in (first.attributes or {})
    assert (second.attributes or {})["error.type"] == "SERVER"
    assert (second.attributes or {})["gen_ai.response.finish_reasons"] == ("error",)
    assert third.status.status_code is StatusCode.UNSET
    turn = telemetry.one("invoke_agent a")
    retries = [(e.name, dict(e.attributes or {})) for e in turn.events]
    assert retries == [
        ("dsh.llm.retry", {"dsh.retry.attempt": 1, "error.type": "RATE_LIMIT"}),
        (
            "dsh.llm.retry",
            {"dsh.retry.attempt": 2, "error.type": "SERVER", "http.response.status_code": 503},
        ),
    ]
    assert (turn.attributes or {})["dsh.turn.outcome"] == "completed"
    failed = sums(telemetry, "gen_ai.client.operation.duration", **{"error.type": "SERVER"})
    assert len(failed) == 1


async def test_a_failure_that_ends_the_turn_marks_the_turn_span_with_its_code(
    harness: Harness, telemetry: Telemetry
) -> None:
    failure = LlmFailure("bad request", "INVALID_REQUEST", 400, request_id="req-42")
    agent = agent_on(harness, [Finish(FinishError(failure))])
    await run_turn(agent)
    chat = telemetry.one("chat scripted")
    assert (chat.attributes or {})["dsh.llm.request_id"] == "req-42"
    turn = telemetry.one("invoke_agent a")
    assert (turn.attributes or {})["dsh.turn.outcome"] == "error"
    assert (turn.attributes or {})["error.type"] == "INVALID_REQUEST"
    assert turn.status.status_code is StatusCode.ERROR
    assert [e.name for e in turn.events] == []  # not retried
    assert sums(telemetry, "dsh.agent.turns", **{"dsh.turn.outcome": "error"}) == [1]


async def test_a_model_without_an_adapter_is_a_chat_span_with_the_failure_code(
    harness: Harness, telemetry: Telemetry
) -> None:
    agent = harness.agent_loop.create("n", AgentOptions(model="nowhere"))
    await run_turn(agent)
    chat = telemetry.one("chat nowhere")
    assert (chat.attributes or {})["error.type"] == "NO_ADAPTER"
    assert (chat.attributes or {})["gen_ai.provider.name"] == "unknown"
    assert parent_of(chat) == span_id(telemetry.one("invoke_agent n"))


async def test_an_adapter_that_raises_a_plain_exception_names_its_class(
    harness: Harness, telemetry: Telemetry
) -> None:
    async def broken(request: LlmRequest) -> list[StreamChunk]:
        raise RuntimeError("the adapter broke")

    agent = agent_on(harness, broken)
    await run_turn(agent)
    chat = telemetry.one("chat scripted")
    assert (chat.attributes or {})["error.type"] == "RuntimeError"
    assert chat.status.description == "RuntimeError"


async def test_an_agent_without_a_model_still_has_its_turn_span(
    harness: Harness, telemetry: Telemetry
) -> None:
    agent = harness.agent_loop.create("m")
    await run_turn(agent)
    turn = telemetry.one("invoke_agent m")
    assert "gen_ai.request.model" not in (turn.attributes or {})
    assert (turn.attributes or {})["error.type"] == "NO_MODEL"
    assert telemetry.named("chat") == []


async def test_an_aborted_model_call_is_an_aborted_chat_span_in_an_aborted_turn(
    harness: Harness, telemetry: Telemetry
) -> None:
    adapter = ScriptedAdapter([hang([BlockStart(0, "text"), TextDelta(0, "par")])])
    harness.llm.register_adapter(["scripted"], adapter)
    agent = harness.agent_loop.create("a", AgentOptions(model="scripted"))
    agent.send("hi")
    await adapter.started.wait()
    await asyncio.sleep(0)
    agent.abort("the user pressed Esc")
    await agent.wait_idle()
    chat = telemetry.one("chat scripted")
    assert (chat.attributes or {})["error.type"] == "ABORTED"
    assert chat.status.status_code is StatusCode.ERROR
    turn = telemetry.one("invoke_agent a")
    assert (turn.attributes or {})["dsh.turn.outcome"] == "aborted"
    assert turn.status.status_code is StatusCode.UNSET
    assert parent_of(chat) == span_id(turn)
    assert sums(telemetry, "dsh.agent.turns", **{"dsh.turn.outcome": "aborted"}) == [1]


async def test_an_aborted_tool_call_is_an_aborted_tool_span(
    telemetry: Telemetry,
) -> None:
    started = asyncio.Event()

    async def forever(args: Any, execution: ToolExecution) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    config = {"otel": {"capture_content": True}}
    async with Harness(load_entrypoints=False, plugins=[telemetry.plugin()], config=config) as h:
        h.tools.register(Tool(ToolSchema("wait", "Wait."), forever))
        agent = agent_on(h, tool_call_response("c9", "wait", {}))
        agent.send("hi")
        await started.wait()
        agent.abort()
        await agent.wait_idle()
    tool = telemetry.one("execute_tool wait")
    assert (tool.attributes or {})["error.type"] == "ABORTED"
    assert (tool.attributes or {})["dsh.tool.outcome"] == "error"
    details = {e.name: dict(e.attributes or {}) for e in tool.events}["dsh.tool.content"]
    assert details == {"gen_ai.tool.call.arguments": "{}"}  # no result: it never returned


async def test_no_prompt_or_output_is_recorded_unless_capture_content_is_on(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.tools.register(ECHO)
    agent = agent_on(
        harness,
        tool_call_response("c1", "echo", {"text": "secret-argument"}),
        text_response("secret-answer"),
    )
    await run_turn(agent, "secret-prompt")
    recorded = everything_recorded(telemetry)
    assert len(telemetry.spans()) == 4
    for secret in ("secret-prompt", "secret-argument", "secret-answer"):
        assert secret not in recorded


async def test_capture_content_adds_prompts_outputs_and_tool_io_as_events(
    telemetry: Telemetry,
) -> None:
    config = {"otel": {"capture_content": True}}
    async with Harness(load_entrypoints=False, plugins=[telemetry.plugin()], config=config) as h:
        h.tools.register(ECHO)
        h.llm.register_adapter(
            ["scripted"],
            ScriptedAdapter(
                [tool_call_response("c1", "echo", {"text": "arg"}), text_response("answer")]
            ),
        )
        agent = h.agent_loop.create("a", AgentOptions("scripted", system_prompt="Be brief."))
        await run_turn(agent, "the prompt")
    chat = telemetry.named("chat scripted")[-1]
    details = {e.name: dict(e.attributes or {}) for e in chat.events}
    io = details["gen_ai.client.inference.operation.details"]
    assert "Be brief." in str(io["gen_ai.system_instructions"])
    assert "the prompt" in str(io["gen_ai.input.messages"])
    assert '"text":"echo: arg"' in str(io["gen_ai.input.messages"])
    assert io["gen_ai.output.messages"] == '[{"text":"answer","type":"text"}]'
    tool = telemetry.one("execute_tool echo")
    content = {e.name: dict(e.attributes or {}) for e in tool.events}["dsh.tool.content"]
    assert content == {
        "gen_ai.tool.call.arguments": '{"text": "arg"}',
        "gen_ai.tool.call.result": '[{"text":"echo: arg","type":"text"}]',
    }


async def test_a_request_without_a_system_prompt_captures_no_instructions(
    telemetry: Telemetry,
) -> None:
    config = {"otel": {"capture_content": True}}
    async with Harness(load_entrypoints=False, plugins=[telemetry.plugin()], config=config) as h:
        h.llm.register_adapter(["scripted"], ScriptedAdapter([text_response("hi")]))
        request = LlmRequest("scripted", (Message("user", (Text("q"),)),), purpose="title")
        await h.llm.complete(request)
    chat = telemetry.one("chat scripted")
    assert chat.parent is None  # outside any turn
    assert (chat.attributes or {})["dsh.llm.purpose"] == "title"
    io = {e.name: dict(e.attributes or {}) for e in chat.events}
    assert "gen_ai.system_instructions" not in io["gen_ai.client.inference.operation.details"]


async def test_request_parameters_are_chat_attributes(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.llm.register_adapter(["scripted"], ScriptedAdapter([text_response("ok")]))
    options = AgentOptions("scripted", max_tokens=256, temperature=0.25)
    await run_turn(harness.agent_loop.create("t", options))
    chat = dict(telemetry.one("chat scripted").attributes or {})
    assert (chat["gen_ai.request.max_tokens"], chat["gen_ai.request.temperature"]) == (256, 0.25)


class AskingPolicy:
    """A permission policy that asks the host before every call; ``answer`` is the host's."""

    def __init__(self, harness: HarnessType, answer: bool) -> None:
        self.harness = harness
        self.answer = answer

    @hookimpl
    async def dsh_tools_execute(
        self,
        execution: ToolExecution,
        call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        if await self.harness.hooks.tools_approve(execution, "it writes files"):
            return await call_next(execution)
        return ToolOutcome.error("DENIED", "the user said no")

    @hookimpl
    def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool:
        return self.answer


@pytest.mark.parametrize(("answer", "permission"), [(True, "approved"), (False, "denied")])
async def test_the_permission_decision_is_a_tool_span_attribute(
    telemetry: Telemetry, answer: bool, permission: str
) -> None:
    async with Harness(load_entrypoints=False, plugins=[telemetry.plugin()]) as h:
        h.plugins.register(AskingPolicy(h, answer), "asking")
        h.tools.register(ECHO)
        agent = agent_on(h, tool_call_response("c1", "echo", {"text": "x"}), text_response("k"))
        await run_turn(agent)
    tool = telemetry.one("execute_tool echo")
    assert (tool.attributes or {})["dsh.tool.permission"] == permission
    asked = [(e.name, dict(e.attributes or {})) for e in tool.events]
    assert asked == [("dsh.tool.approval_requested", {})]  # the reason is content
    if not answer:
        assert (tool.attributes or {})["error.type"] == "DENIED"
        assert tool.status.status_code is StatusCode.ERROR


async def test_a_call_the_core_denies_without_a_policy_is_denied(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.tools.register(Tool(ToolSchema("write", "Write."), echo, effect="write"))
    agent = agent_on(harness, tool_call_response("c1", "write", {}), text_response("k"))
    await run_turn(agent)
    tool = dict(telemetry.one("execute_tool write").attributes or {})
    assert (tool["dsh.tool.permission"], tool["error.type"]) == ("denied", "DENIED")


async def test_a_middleware_that_raises_is_recorded_on_the_tool_span(
    telemetry: Telemetry,
) -> None:
    class Raising:
        @hookimpl
        async def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> Any:
            raise ValueError("the sandbox is gone")

    async with Harness(load_entrypoints=False, plugins=[Raising(), telemetry.plugin()]) as h:
        h.tools.register(ECHO)
        outcome = await h.tools.execute(ToolExecution("c1", "echo", '{"text": "x"}'))
    assert outcome.is_error
    tool = telemetry.one("execute_tool echo")
    assert tool.parent is None  # no agent, no turn
    assert (tool.attributes or {})["error.type"] == "HookError"


async def test_what_a_tool_does_nests_under_its_span_and_so_does_a_sub_agent(
    harness: Harness, telemetry: Telemetry
) -> None:
    """A span the tool opens (as an MCP client or the host would) and the turn of an agent the
    tool runs (a sub-agent) are children of the ``execute_tool`` span."""
    tracer = telemetry.tracer_provider.get_tracer("host")
    harness.llm.register_adapter(["sub"], ScriptedAdapter([text_response("sub answer")]))

    async def delegate(args: Any, execution: ToolExecution) -> str:
        with tracer.start_as_current_span("host work"):
            pass
        sub = harness.agent_loop.create("helper", AgentOptions(model="sub"))
        await run_turn(sub, "help")
        await sub.dispose()
        return "delegated"

    harness.tools.register(Tool(ToolSchema("delegate", "Delegate."), delegate))
    agent = agent_on(harness, tool_call_response("c1", "delegate", {}), text_response("k"))
    await run_turn(agent)
    tool = telemetry.one("execute_tool delegate")
    sub_turn = telemetry.one("invoke_agent helper")
    assert parent_of(telemetry.one("host work")) == span_id(tool)
    assert parent_of(sub_turn) == span_id(tool)
    assert parent_of(telemetry.one("chat sub")) == span_id(sub_turn)
    assert trace_id(sub_turn) == trace_id(telemetry.one("invoke_agent a"))


class Compacting:
    """Logs a compaction's events in the first request of each turn, as the compaction plugin
    does; ``error`` makes it a failed one."""

    def __init__(self, error: str | None) -> None:
        self.error = error

    @hookimpl
    def dsh_agent_request(self, agent: Agent, step: int, request: LlmRequest) -> None:
        if step == 1:
            agent.session.append(HistoryRewriteStart(1, "threshold", 9000))
            agent.session.append(HistoryRewriteEnd(2000, self.error))


@pytest.mark.parametrize("error", [None, "the summary call failed"])
async def test_compactions_are_events_of_the_turn_span(
    telemetry: Telemetry, error: str | None
) -> None:
    plugins = [Compacting(error), telemetry.plugin()]
    async with Harness(load_entrypoints=False, plugins=plugins) as h:
        agent = agent_on(h, text_response("ok"))
        await run_turn(agent)
        # outside a turn (a manual compaction): no span to attach it to, nothing recorded
        agent.session.append(HistoryRewriteStart(1, "manual", 9000))
    events = [(e.name, dict(e.attributes or {})) for e in telemetry.one("invoke_agent a").events]
    end: dict[str, Any] = {"dsh.compaction.tokens_after": 2000}
    if error is not None:
        end |= {"error.type": "COMPACTION_FAILED"}  # not its text: content
    assert events == [
        (
            "dsh.compaction.start",
            {"dsh.compaction.reason": "threshold", "dsh.compaction.tokens_before": 9000},
        ),
        ("dsh.compaction.end", end),
    ]


class Bare:
    """A chunk stream with no ``aclose``: the plugin closes only what can be closed."""

    def __init__(self, chunks: list[StreamChunk]) -> None:
        self.chunks = iter(chunks)

    def __aiter__(self) -> Bare:
        return self

    async def __anext__(self) -> StreamChunk:
        try:
            return next(self.chunks)
        except StopIteration:
            raise StopAsyncIteration from None


class BareAdapter:
    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        return Bare(text_response("bare"))


async def test_a_stream_without_aclose_is_observed_too(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.llm.register_adapter(["bare"], BareAdapter())
    await run_turn(harness.agent_loop.create("b", AgentOptions(model="bare")))
    chat = dict(telemetry.one("chat bare").attributes or {})
    assert chat["gen_ai.usage.output_tokens"] == 4
    assert chat["gen_ai.provider.name"] == "tests"  # the package of the adapter's class


async def test_provider_names_come_from_the_model_id_or_the_adapters_package() -> None:
    from dsh_plugins.llm_deepseek import DeepSeekPlugin

    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin()]) as h:
        assert provider_of(h, "openrouter/some-model") == "openrouter"
        assert provider_of(h, "deepseek-v4-flash") == "deepseek"
        assert provider_of(h, "unheard-of") == "unknown"
