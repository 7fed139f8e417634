"""The adapter inside a real agent loop: fault outcomes, abort, retries, and equivalence with the
scripted adapter of ``dsh.testing``."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter
from dsh.testing.mockserver import MockServer, reply
from dsh.testing.mockserver.wire import usage_json
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    FinishToolCalls,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Reasoning, Text, ToolCall
from dsh.values._events import (
    AssistantMessage,
    ErrorEvent,
    RetryEvent,
    SessionEvent,
    TurnAborted,
    TurnCompleted,
    TurnError,
)
from dsh.values._request import ToolSchema
from dsh_plugins.retry import RetryPlugin

from .conftest import MakeAgent
from .support import chunks_of_turn, turn_ends

FAULTS = [
    ("bad-request", "INVALID_REQUEST", False),
    ("context-length", "CONTEXT_WINDOW_EXCEEDED", False),
    ("auth", "AUTH", False),
    ("insufficient-balance", "INSUFFICIENT_BALANCE", False),
    ("unprocessable", "INVALID_REQUEST", False),
    ("rate-limit", "RATE_LIMIT", False),
    ("server-error", "SERVER", False),
    ("overloaded", "SERVER", False),
    ("disconnect", "STREAM_CLOSED", True),
    ("stall", "TIMEOUT", True),
    ("keep-alive-stall", "TIMEOUT", True),
    ("malformed-json", "MALFORMED_RESPONSE", True),
    ("missing-done", "STREAM_CLOSED", True),
    ("error-event", "SERVER", True),
    ("empty", "EMPTY_RESPONSE", False),
    ("content-filter", "CONTENT_FILTER", True),
    ("insufficient-resource", "SERVER", False),
]


@pytest.mark.parametrize(("scenario", "code", "partial"), FAULTS)
async def test_each_fault_ends_the_turn_keeps_what_streamed_and_the_loop_goes_on(
    scenario: str, code: str, partial: bool, make_agent: MakeAgent, mock_server: MockServer
) -> None:
    stalls = code == "TIMEOUT"
    # A stall must time out, but not before the headers and the partial text arrive: 50 ms
    # was once too short for the first connection while CI ran under load.
    agent = await make_agent(idle_timeout_s=0.5 if stalls else 5.0)
    mock_server.queue(scenario, "text-v4")
    agent.send("hi")
    await agent.wait_idle()
    agent.send("again")
    await agent.wait_idle()

    events = agent.session.events
    first, second = turn_ends(events)
    assert isinstance(first, TurnError)
    assert first.failure.code == code
    assert second == TurnCompleted()
    errors = [e.data for e in events if isinstance(e.data, ErrorEvent)]
    assert [(e.turn, e.code) for e in errors] == [(1, code)]
    assert [e.data.turn for e in events if isinstance(e.data, AssistantMessage)] == [2]
    if partial:
        assert TextDelta(0, "Partial") in chunks_of_turn(events, 1)


class Streaming:
    """A host plugin that tells when the first chunk streamed."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def dsh_agent_stream_chunk(self, chunk: StreamChunk) -> None:
        self.started.set()


async def test_abort_mid_stream_ends_the_turn_aborted_and_drops_the_connection(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    streaming = Streaming()
    agent = await make_agent(streaming)
    mock_server.queue(attrs.evolve(reply(text="word " * 100), interval_s=0.02), "text-v4")
    agent.send("talk")
    await streaming.started.wait()
    agent.abort("enough")
    await agent.wait_idle()
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()
    agent.send("again")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnAborted("enough"), TurnCompleted()]


async def test_with_the_retry_plugin_a_rate_limited_turn_completes(
    make_agent: MakeAgent, mock_server: MockServer, sleeps: list[float]
) -> None:
    agent = await make_agent(RetryPlugin(random=lambda: 0.0))
    mock_server.queue("rate-limit", "server-error", "text-v4")
    agent.send("hi")
    await agent.wait_idle()
    events = agent.session.events
    assert turn_ends(events) == [TurnCompleted()]
    retries = [e.data for e in events if isinstance(e.data, RetryEvent)]
    assert [(r.turn, r.step, r.attempt, r.code, r.delay_s) for r in retries] == [
        (1, 1, 1, "RATE_LIMIT", 2.0),
        (1, 1, 2, "SERVER", 1.0),
    ]
    assert [e.type for e in events if e.type == RetryEvent.type] == ["llm/retry"] * 2
    assert sleeps == [2.0, 1.0]
    assert not any(e.type == "error" for e in events)


async def test_a_tool_session_passes_reasoning_back_verbatim(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    agent = await make_agent(WordCount())
    agent.send('count "a b c"')
    await agent.wait_idle()
    agent.send("thanks")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnCompleted(), TurnCompleted()]
    last = mock_server.requests[2].body["messages"]
    assistants = [m for m in last if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in assistants] == [
        "To answer this I should call word_count.",
        "The tool answered; I can reply with its result.",
    ]
    tool = next(m for m in last if m["role"] == "tool")
    assert tool == {
        "role": "tool",
        "tool_call_id": assistants[0]["tool_calls"][0]["id"],
        "content": "3",
    }


async def test_every_model_id_reaches_the_configured_server(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    for model in ("deepseek-v4-pro", "deepseek/deepseek-flash", "deepseek/deepseek-v4-flash"):
        agent = await make_agent(model=model)
        agent.send("hi")
        await agent.wait_idle()
        assert turn_ends(agent.session.events) == [TurnCompleted()]
    # The legacy name is sent as the current one.
    assert [r.body["model"] for r in mock_server.requests] == [
        "deepseek-v4-pro",
        "deepseek-flash",
        "deepseek-flash",
    ]


# -- the same conversation through the adapter and through ScriptedAdapter ----------------------


class WordCount:
    """A host plugin with one tool."""

    def dsh_register_tools(self, register: Any) -> None:
        async def count(args: Any, execution: ToolExecution) -> str:
            return str(len(args["text"].split()))

        schema = ToolSchema(
            "word_count",
            "Count words.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        )
        register(Tool(schema, count))


CALL = ToolCall("call_00_abc", "word_count", '{"text": "a b c"}')
STEP_1: list[StreamChunk] = [
    BlockStart(0, "reasoning"),
    ReasoningDelta(0, "I"),
    ReasoningDelta(0, " should"),
    ReasoningDelta(0, " count."),
    BlockStart(1, "tool-call"),
    ToolCallDelta(1, CALL.id, "", name="word_count"),
    ToolCallDelta(1, CALL.id, '{"text":'),
    ToolCallDelta(1, CALL.id, ' "a b c"'),
    ToolCallDelta(1, CALL.id, "}"),
    BlockEnd(0, Reasoning("I should count.")),
    BlockEnd(1, CALL),
    UsageChunk(TokenUsage(36, 20, cache_read_tokens=64, reasoning_tokens=5)),
    Finish(FinishToolCalls()),
]
STEP_2: list[StreamChunk] = [
    BlockStart(0, "reasoning"),
    ReasoningDelta(0, "Done."),
    BlockStart(1, "text"),
    TextDelta(1, "There"),
    TextDelta(1, " are"),
    TextDelta(1, " 3"),
    TextDelta(1, " words."),
    BlockEnd(0, Reasoning("Done.")),
    BlockEnd(1, Text("There are 3 words.")),
    UsageChunk(TokenUsage(120, 6, reasoning_tokens=2)),
    Finish(FinishStop()),
]
TURN_2: list[StreamChunk] = [
    BlockStart(0, "text"),
    TextDelta(0, "Welcome!"),
    BlockEnd(0, Text("Welcome!")),
    UsageChunk(TokenUsage(150, 2)),
    Finish(FinishStop()),
]


def comparable(events: list[SessionEvent]) -> list[tuple[str, int, Any]]:
    return [(e.type, e.seq, e.data) for e in events]


async def run_conversation(agent: Any) -> list[SessionEvent]:
    agent.send('count "a b c"')
    await agent.wait_idle()
    agent.send("thanks")
    await agent.wait_idle()
    return list(agent.session.events)


async def test_the_adapter_and_the_scripted_adapter_give_the_same_session(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    mock_server.queue(
        reply(
            reasoning="I should count.",
            tool_calls=[(CALL.id, CALL.name, CALL.arguments)],
            usage=usage_json(100, 20, hits=64, reasoning=5),
        ),
        reply(reasoning="Done.", text="There are 3 words.", usage=usage_json(120, 6, reasoning=2)),
        reply(text="Welcome!", usage=usage_json(150, 2)),
    )
    over_http = await run_conversation(await make_agent(WordCount()))

    scripted = ScriptedAdapter([STEP_1, STEP_2, TURN_2])
    async with Harness(load_entrypoints=False, plugins=[WordCount()]) as harness:
        harness.llm.register_adapter(["deepseek-v4-flash"], scripted)
        agent = harness.agent_loop.create("a", AgentOptions(model="deepseek-v4-flash"))
        reference = await run_conversation(agent)

    assert comparable(over_http) == comparable(reference)
    assert turn_ends(reference) == [TurnCompleted(), TurnCompleted()]
