"""The adapter inside a real agent loop: retries of in-band failures, abort, a tool session with
reasoning passed back, the missing SDK, and switching adapters by model id."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import attrs
import pytest

from dsh import AgentOptions, Harness
from dsh.testing.mockserver import MockServer, reply
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._chunks import StreamChunk
from dsh.values._content import text_of
from dsh.values._events import AssistantMessage, RetryEvent, TurnAborted, TurnCompleted, TurnError
from dsh.values._request import ToolSchema
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_openai_sdk import OpenAISdkPlugin
from dsh_plugins.retry import RetryPlugin

from .conftest import MakeAgent, sdk_config
from .support import turn_ends


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


class Streaming:
    """A host plugin that tells when the first chunk streamed."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def dsh_agent_stream_chunk(self, chunk: StreamChunk) -> None:
        self.started.set()


async def test_the_retry_plugin_retries_in_band_failures(
    make_agent: MakeAgent, mock_server: MockServer, sleeps: list[float]
) -> None:
    agent = await make_agent(RetryPlugin(random=lambda: 0.0))
    mock_server.queue("rate-limit", "server-error", "text-v4")
    agent.send("hi")
    await agent.wait_idle()
    events = agent.session.events
    assert turn_ends(events) == [TurnCompleted()]
    retries = [e.data for e in events if isinstance(e.data, RetryEvent)]
    assert [e.type for e in events if e.type == RetryEvent.type] == ["llm/retry"] * 2
    assert [(r.attempt, r.code, r.delay_s) for r in retries] == [
        (1, "RATE_LIMIT", 2.0),
        (2, "SERVER", 1.0),
    ]
    assert sleeps == [2.0, 1.0]
    assert not any(e.type == "error" for e in events)


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
    assert not any(e.type == "error" for e in agent.session.events)


async def test_a_tool_session_passes_reasoning_back_verbatim(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    agent = await make_agent(WordCount(), thinking=True)
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


async def test_without_the_sdk_the_turn_fails_saying_how_to_install_it(
    mock_server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    plugins = [DeepSeekPlugin(), OpenAISdkPlugin()]
    config = {**sdk_config(mock_server), "llm_deepseek": {"base_url": mock_server.url}}
    monkeypatch.setenv("DEEPSEEK_API_KEY", "k")
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as harness:
        for model in ("deepseek-sdk/deepseek-v4-flash", "deepseek-v4-flash"):
            agent = harness.agent_loop.create(model, AgentOptions(model=model))
            agent.send("hi")
            await agent.wait_idle()
            (end,) = turn_ends(agent.session.events)
            if model.startswith("deepseek-sdk/"):
                assert isinstance(end, TurnError)
                assert end.failure.code == "MISSING_DEPENDENCY"
                assert "pip install 'dsh-harness[openai]'" in end.failure.message
            else:
                assert end == TurnCompleted()
    assert len(mock_server.requests) == 1


async def test_switching_adapters_is_changing_the_model_id(mock_server: MockServer) -> None:
    plugins = [DeepSeekPlugin(), OpenAISdkPlugin()]
    config = {
        **sdk_config(mock_server),
        "llm_deepseek": {"base_url": mock_server.url, "api_key": "k"},
    }
    answers = []
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as harness:
        for model in ("deepseek-v4-pro", "deepseek-sdk/deepseek-v4-pro"):
            agent = harness.agent_loop.create(model, AgentOptions(model=model, thinking=True))
            agent.send("hello")
            await agent.wait_idle()
            (message,) = [
                e.data for e in agent.session.events if isinstance(e.data, AssistantMessage)
            ]
            answers.append((message.content, message.usage))
    assert answers[0] == answers[1]
    assert "You said" in text_of(answers[0][0])
    assert [r.body["model"] for r in mock_server.requests] == ["deepseek-v4-pro"] * 2


class Echo:
    """A host plugin with the ``echo`` tool the mock's ``tool-loop`` scenario calls."""

    def dsh_register_tools(self, register: Any) -> None:
        async def echo(args: Any, execution: ToolExecution) -> str:
            return str(args.get("text", ""))

        schema = ToolSchema(
            "echo",
            "Echo the text.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        )
        register(Tool(schema, echo))


def calling_turns(server: MockServer) -> list[dict[str, Any]]:
    """Every assistant message with tool calls in every request the server received."""
    return [
        message
        for request in server.requests
        for message in request.body["messages"]
        if message["role"] == "assistant" and message.get("tool_calls")
    ]


@pytest.mark.parametrize("thinking", [True, None])
async def test_point1_a_tool_step_that_streamed_only_empty_reasoning_completes_its_turn(
    thinking: bool | None, make_agent: MakeAgent, mock_server: MockServer
) -> None:
    """The mock answers a missing passback with the API's 400; the turn must complete."""
    agent = await make_agent(Echo(), thinking=thinking)
    mock_server.queue({"name": "tool-loop", "steps": 1, "reasoning": ""})
    agent.send("go")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnCompleted()]
    (called,) = calling_turns(mock_server)
    assert called["reasoning_content"] == ""
    assert ("thinking" in mock_server.requests[-1].body) == (thinking is not None)


async def test_point1_thinking_switched_on_mid_session_passes_earlier_calls_back_empty(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    agent = await make_agent(Echo(), thinking=False)
    mock_server.queue({"name": "tool-loop", "steps": 1})
    agent.send("first, without thinking")
    await agent.wait_idle()
    first = calling_turns(mock_server)
    assert first and all("reasoning_content" not in turn for turn in first)
    agent.options = attrs.evolve(agent.options, thinking=True)
    agent.send("now think")
    await agent.wait_idle()
    assert turn_ends(agent.session.events) == [TurnCompleted(), TurnCompleted()]
    last = mock_server.requests[-1].body
    assert last["thinking"] == {"type": "enabled"}
    earlier, *later = [m for m in last["messages"] if m.get("tool_calls")]
    assert earlier["reasoning_content"] == ""
    assert all(isinstance(turn["reasoning_content"], str) for turn in later)
