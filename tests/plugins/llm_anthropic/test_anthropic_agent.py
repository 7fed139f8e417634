"""Agents on ``deepseek-anthropic/``: a tool-using conversation in thinking mode against the
mock's Messages endpoint, with every thinking block and its signature passed back; what the
mock (as the API) refuses; the plugin and its config."""

from __future__ import annotations

from typing import Any

import pytest

from dsh import Harness
from dsh.hooks._markers import hookimpl
from dsh.testing.mockserver import MockServer
from dsh.testing.mockserver.anthropic import signature_of
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._content import Message, Reasoning, Text, ToolCall, ToolResult, text_of
from dsh.values._errors import ConfigError, LlmError
from dsh.values._events import AssistantMessage, TurnCompleted, TurnEnd
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_anthropic import AnthropicConfig, AnthropicPlugin, MessagesAdapter, adapters

from .conftest import MODEL, MakeAgent
from .support import collect


class Echo:
    """A host plugin with the tool the mock's tool loop calls."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        async def echo(args: Any, execution: ToolExecution) -> str:
            self.calls.append(args)
            return f"echo: {args['text']}"

        schema = ToolSchema(
            "echo",
            "Repeat the text.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        )
        register(Tool(schema, echo))


def ends(events: Any) -> list[Any]:
    return [e.data.reason for e in events if isinstance(e.data, TurnEnd)]


@pytest.mark.parametrize("thinking", [True, None])
async def test_a_tool_using_conversation_in_thinking_mode_passes_signatures_back(
    make_agent: MakeAgent, mock_server: MockServer, thinking: bool | None
) -> None:
    echo = Echo()
    agent = await make_agent(echo, thinking=thinking)
    mock_server.queue(*[{"name": "tool-loop", "steps": 3}] * 4)
    agent.send("echo three times")
    await agent.wait_idle()
    events = list(agent.session.events)
    assert ends(events) == [TurnCompleted()]
    assert [call["text"] for call in echo.calls] == ["step 0", "step 1", "step 2"]
    messages = [e.data for e in events if isinstance(e.data, AssistantMessage)]
    assert text_of(messages[-1].content) == "finished after 3 steps"
    for message in messages:
        reasoning = message.content[0]
        assert isinstance(reasoning, Reasoning)
        assert reasoning.signature == signature_of(reasoning.text)
    # Each later request carried every earlier turn's thinking block first, signed.
    last = mock_server.requests[-1].body
    turns = [m for m in last["messages"] if m["role"] == "assistant"]
    assert len(turns) == 3
    for turn in turns:
        first = turn["content"][0]
        assert first["type"] == "thinking"
        assert first["signature"] == signature_of(first["thinking"])
    results = [m for m in last["messages"] if m["role"] == "user"][1:]
    assert [r["content"][0]["type"] for r in results] == ["tool_result"] * 3


async def test_the_scripted_model_answers_with_the_tool_result(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    agent = await make_agent(Echo(), thinking=True)
    agent.send('echo "hello"')
    await agent.wait_idle()
    messages = [e.data for e in agent.session.events if isinstance(e.data, AssistantMessage)]
    assert text_of(messages[-1].content) == "The tool returned: echo: hello"
    assert ends(agent.session.events) == [TurnCompleted()]


class Weather:
    """The tool of the ``tool-calls-parallel`` transcript."""

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        async def get_current_weather(args: Any, execution: ToolExecution) -> str:
            return f"sunny in {args['location']}"

        schema = ToolSchema(
            "get_current_weather",
            "The weather of a city.",
            {"type": "object", "properties": {"location": {"type": "string"}}},
        )
        register(Tool(schema, get_current_weather))


async def test_a_transcript_without_reasoning_served_in_thinking_mode_can_be_continued(
    make_agent: MakeAgent, mock_server: MockServer
) -> None:
    """``tool-calls-parallel`` was written without reasoning; served to a thinking-mode request
    on the Messages endpoint, it starts with an empty signed thinking block, so the turn can be
    passed back (before, the mock refused the second step: thinking not passed back)."""
    agent = await make_agent(Weather(), thinking=True)
    mock_server.queue("tool-calls-parallel", "text-v4")
    agent.send("weather in two cities")
    await agent.wait_idle()
    assert ends(agent.session.events) == [TurnCompleted()]
    first = next(e.data for e in agent.session.events if isinstance(e.data, AssistantMessage))
    assert first.content[0] == Reasoning("", signature_of(""))
    [turn] = [m for m in mock_server.requests[-1].body["messages"] if m["role"] == "assistant"]
    assert turn["content"][0] == {"type": "thinking", "thinking": "", "signature": signature_of("")}


def _tool_turn(*reasoning: Reasoning) -> tuple[Message, ...]:
    return (
        Message("user", (Text("go"),)),
        Message("assistant", (*reasoning, ToolCall("toolu_1", "echo", '{"text": "x"}'))),
        Message("user", (ToolResult("toolu_1", (Text("x"),)),)),
    )


@pytest.mark.parametrize(
    ("history", "says"),
    [
        (_tool_turn(), "must be passed back to the API"),
        (_tool_turn(Reasoning("thought, from another provider")), "must be passed back"),
        (_tool_turn(Reasoning("thought", "forged")), "Invalid `signature`"),
    ],
)
async def test_the_mock_refuses_a_tool_turn_without_its_signed_thinking_as_the_api_does(
    adapter: MessagesAdapter, history: tuple[Message, ...], says: str
) -> None:
    with pytest.raises(LlmError) as raised:
        await collect(adapter, LlmRequest(MODEL, history, thinking=True))
    assert raised.value.failure.code == "INVALID_REQUEST"
    assert says in raised.value.failure.message


async def test_deepseek_serves_thinking_under_1024_max_tokens_so_dsh_does_not_refuse_it(
    adapter: MessagesAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("thinking")
    history = (Message("user", (Text("go"),)),)
    chunks = await collect(adapter, LlmRequest(MODEL, history, thinking=True, max_tokens=1000))
    assert chunks
    assert mock_server.requests[-1].body["max_tokens"] == 1000


async def test_anthropic_still_refuses_a_budget_it_cannot_take_before_sending(
    mock_server: MockServer,
) -> None:
    [adapter] = adapters(
        AnthropicConfig(
            anthropic_base_url=mock_server.url,
            anthropic_api_key="k",
            anthropic_models=("claude-sonnet-5",),
            deepseek_models=(),
        )
    )
    request = LlmRequest(
        "anthropic/claude-sonnet-5",
        (Message("user", (Text("go"),)),),
        thinking=True,
        max_tokens=1000,
    )
    try:
        with pytest.raises(LlmError) as raised:
            await collect(adapter, request)
    finally:
        await adapter.aclose()
    assert raised.value.failure.code == "INVALID_REQUEST"
    assert mock_server.requests == []


async def test_with_thinking_off_a_tool_turn_needs_no_thinking(
    adapter: MessagesAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("text-v4")
    chunks = await collect(adapter, LlmRequest(MODEL, _tool_turn(), thinking=False))
    assert chunks


async def test_the_plugin_is_an_entry_point_and_serves_both_providers() -> None:
    async with Harness() as harness:
        models = harness.llm.models()
    assert "anthropic/claude-haiku-4-5" in models
    assert "deepseek-anthropic/deepseek-flash" in models
    assert "deepseek-anthropic/deepseek-v4-pro" in models


async def test_a_provider_without_models_is_not_registered() -> None:
    config = {"llm_anthropic": {"anthropic_models": [], "deepseek_models": ["deepseek-flash"]}}
    async with Harness(load_entrypoints=False, plugins=[AnthropicPlugin], config=config) as h:
        assert h.llm.models() == ["deepseek-anthropic/deepseek-flash"]
        assert h.llm.prefixes() == ["deepseek-anthropic/"]
        assert "anthropic/claude-haiku-4-5" not in h.llm.models()
    assert adapters(AnthropicConfig(anthropic_models=(), deepseek_models=())) == []


@pytest.mark.parametrize(
    ("option", "value"),
    [("thinking_budget_tokens", 512), ("max_tokens", 0), ("idle_timeout_s", 0)],
)
async def test_bad_config_fails_at_start(option: str, value: object) -> None:
    config = {"llm_anthropic": {option: value}}
    with pytest.raises(ConfigError) as raised:
        async with Harness(load_entrypoints=False, plugins=[AnthropicPlugin], config=config):
            pass
    assert option in str(raised.value)
