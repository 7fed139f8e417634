"""Real-API tests of DeepSeek through its Anthropic-format endpoint (``deepseek-anthropic/…``,
``llm_anthropic``). Skipped without ``DEEPSEEK_API_KEY``; run with ``pytest -m e2e tests/e2e``.
The matrix: today's models, thinking off and on."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.hooks._markers import hookimpl
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._agent import Agent
from dsh.values._content import Reasoning, text_of
from dsh.values._events import AssistantMessage, SessionEvent, ToolCallEvent, TurnCompleted, TurnEnd
from dsh.values._request import ToolSchema
from dsh_plugins.llm_anthropic import AnthropicPlugin
from dsh_plugins.retry import RetryPlugin

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("DEEPSEEK_API_KEY"), reason="needs DEEPSEEK_API_KEY"),
]

SECRET = "4217"
MATRIX = [
    pytest.param(f"deepseek-anthropic/{model}", thinking, id=f"{model}-thinking_{thinking}")
    for model in ("deepseek-flash", "deepseek-v4-pro")
    for thinking in (False, True)
]
#: Only DeepSeek's endpoint: no Anthropic model ids (no ANTHROPIC_API_KEY needed).
CONFIG: dict[str, Any] = {"llm_anthropic": {"anthropic_models": []}}


class SecretNumber:
    """A host plugin with one tool whose answer the model cannot guess."""

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        async def secret(args: Any, execution: ToolExecution) -> str:
            return SECRET

        schema = ToolSchema(
            "get_secret_number", "Returns the secret number.", {"type": "object", "properties": {}}
        )
        register(Tool(schema, secret))


MakeAgent = Callable[[str, bool], Awaitable[Agent]]


@pytest.fixture
async def make_agent() -> AsyncIterator[MakeAgent]:
    harnesses: list[Harness] = []

    async def make(model: str, thinking: bool) -> Agent:
        harness = Harness(
            load_entrypoints=False,
            plugins=[AnthropicPlugin, RetryPlugin, SecretNumber()],
            config=CONFIG,
        )
        await harness.start()
        harnesses.append(harness)
        return harness.agent_loop.create("e2e", AgentOptions(model=model, thinking=thinking))

    yield make
    for harness in harnesses:
        await harness.close()


async def turn(agent: Agent, prompt: str) -> list[AssistantMessage]:
    """Run one turn; it must complete. Returns its assistant messages."""
    before = len(agent.session.events)
    agent.send(prompt)
    await agent.wait_idle()
    events: list[SessionEvent] = list(agent.session.events[before:])
    ends = [e.data for e in events if isinstance(e.data, TurnEnd)]
    assert [end.reason for end in ends] == [TurnCompleted()], ends
    return [e.data for e in events if isinstance(e.data, AssistantMessage)]


def check(messages: list[AssistantMessage], thinking: bool) -> None:
    reasoning = [b for m in messages for b in m.content if isinstance(b, Reasoning)]
    if not thinking:
        assert not [b for b in reasoning if b.text]
    for message in messages:
        assert message.usage is not None
        assert message.usage.input_tokens + message.usage.cache_read_tokens > 0
        assert message.usage.output_tokens > 0


@pytest.mark.parametrize(("model", "thinking"), MATRIX)
async def test_a_plain_answer(model: str, thinking: bool, make_agent: MakeAgent) -> None:
    agent = await make_agent(model, thinking)
    messages = await turn(agent, "Reply with the single word: pong. Do not call any tool.")
    assert "pong" in text_of(messages[-1].content).lower()
    check(messages, thinking)


@pytest.mark.parametrize(("model", "thinking"), MATRIX)
async def test_a_tool_conversation_passes_thinking_back(
    model: str, thinking: bool, make_agent: MakeAgent
) -> None:
    agent = await make_agent(model, thinking)
    messages = await turn(agent, "Call get_secret_number, then tell me the number it returned.")
    calls = [e.data for e in agent.session.events if isinstance(e.data, ToolCallEvent)]
    assert [call.name for call in calls][:1] == ["get_secret_number"]
    assert SECRET in text_of(messages[-1].content)
    # The second turn replays the first, thinking blocks (and signatures) included.
    messages = await turn(agent, "Add one to that number. Answer with the result only.")
    assert str(int(SECRET) + 1) in text_of(messages[-1].content)
    check(messages, thinking)
