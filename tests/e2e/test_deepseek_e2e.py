"""Real-API tests of the DeepSeek adapter. Skipped without ``DEEPSEEK_API_KEY``; run with
``pytest -m e2e tests/e2e``. The matrix: today's models (``deepseek-flash``,
``deepseek-v4-pro``), thinking off and on, effort high and max."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.loop._loop import LoopAgent
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._content import Reasoning, Text, text_of
from dsh.values._events import AssistantMessage, SessionEvent, ToolCallEvent, TurnCompleted, TurnEnd
from dsh.values._request import ReasoningEffort, ToolSchema
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.retry import RetryPlugin

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("DEEPSEEK_API_KEY"), reason="needs DEEPSEEK_API_KEY"),
]

SECRET = "4217"
MATRIX = [
    pytest.param(model, thinking, effort, id=f"{model}-thinking_{thinking}-{effort}")
    for model in ("deepseek-flash", "deepseek-v4-pro")
    for thinking in (False, True)
    for effort in ("high", "max")
]


class SecretNumber:
    """A host plugin with one tool whose answer the model cannot guess."""

    def dsh_register_tools(self, register: Any) -> None:
        async def secret(args: Any, execution: ToolExecution) -> str:
            return SECRET

        schema = ToolSchema(
            "get_secret_number", "Returns the secret number.", {"type": "object", "properties": {}}
        )
        register(Tool(schema, secret))


MakeAgent = Callable[[str, bool, ReasoningEffort], Awaitable[LoopAgent]]


@pytest.fixture
async def make_agent() -> AsyncIterator[MakeAgent]:
    harnesses: list[Harness] = []

    async def make(model: str, thinking: bool, effort: ReasoningEffort) -> LoopAgent:
        harness = Harness(
            load_entrypoints=False, plugins=[DeepSeekPlugin, RetryPlugin, SecretNumber()]
        )
        await harness.start()
        harnesses.append(harness)
        options = AgentOptions(model=model, thinking=thinking, reasoning_effort=effort)
        return harness.agent_loop.create("e2e", options)

    yield make
    for harness in harnesses:
        await harness.close()


async def turn(agent: LoopAgent, prompt: str) -> list[AssistantMessage]:
    """Run one turn; it must complete. Returns its assistant messages."""
    before = len(agent.session.events)
    agent.send(prompt)
    await agent.wait_idle()
    events: list[SessionEvent] = list(agent.session.events[before:])
    ends = [e.data for e in events if isinstance(e.data, TurnEnd)]
    assert [end.reason for end in ends] == [TurnCompleted()], ends
    return [e.data for e in events if isinstance(e.data, AssistantMessage)]


def check_reasoning(messages: list[AssistantMessage], thinking: bool) -> None:
    reasoned = any(isinstance(b, Reasoning) for m in messages for b in m.content)
    if not thinking:
        assert not reasoned
    for message in messages:
        assert message.usage is not None
        assert message.usage.input_tokens + message.usage.cache_read_tokens > 0
        assert message.usage.reasoning_tokens <= message.usage.output_tokens


@pytest.mark.parametrize(("model", "thinking", "effort"), MATRIX)
async def test_a_plain_answer(
    model: str, thinking: bool, effort: ReasoningEffort, make_agent: MakeAgent
) -> None:
    agent = await make_agent(model, thinking, effort)
    messages = await turn(agent, "Reply with the single word: pong. Do not call any tool.")
    assert "pong" in text_of(messages[-1].content).lower()
    check_reasoning(messages, thinking)


@pytest.mark.parametrize(("model", "thinking", "effort"), MATRIX)
async def test_a_tool_round_trip(
    model: str, thinking: bool, effort: ReasoningEffort, make_agent: MakeAgent
) -> None:
    agent = await make_agent(model, thinking, effort)
    messages = await turn(agent, "Call get_secret_number, then tell me the number it returned.")
    calls = [e.data for e in agent.session.events if isinstance(e.data, ToolCallEvent)]
    assert [call.name for call in calls][:1] == ["get_secret_number"]
    assert SECRET in text_of(messages[-1].content)
    check_reasoning(messages, thinking)


@pytest.mark.parametrize(("model", "thinking", "effort"), MATRIX)
async def test_multi_turn_with_reasoning_passed_back(
    model: str, thinking: bool, effort: ReasoningEffort, make_agent: MakeAgent
) -> None:
    agent = await make_agent(model, thinking, effort)
    await turn(agent, "Call get_secret_number and tell me the number.")
    # The second request replays the first turn, reasoning included; without it the API
    # answers 400 in thinking mode.
    messages = await turn(agent, "Add one to that number. Answer with the result only.")
    assert str(int(SECRET) + 1) in text_of(messages[-1].content)
    texts = [b for m in messages for b in m.content if isinstance(b, Text)]
    assert texts


@pytest.mark.parametrize("model", ["deepseek-flash", "deepseek-v4-pro"])
async def test_json_output_mode(model: str) -> None:
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin, RetryPlugin]) as harness:
        options = AgentOptions(
            model=model,
            system_prompt='Answer as a JSON object like {"capital": "..."}.',
            response_format="json_object",
        )
        agent = harness.agent_loop.create("e2e-json", options)
        messages = await turn(agent, "What is the capital of France?")
        answer = json.loads(text_of(messages[-1].content))
        assert isinstance(answer, dict) and "Paris" in json.dumps(answer)


async def test_the_legacy_flash_name_still_answers_and_is_priced() -> None:
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin, RetryPlugin]) as harness:
        agent = harness.agent_loop.create("e2e-legacy", AgentOptions(model="deepseek-v4-flash"))
        messages = await turn(agent, "Reply with the single word: pong.")
        assert "pong" in text_of(messages[-1].content).lower()
        usage = messages[-1].usage
        pricing = harness.llm.pricing("deepseek-v4-flash")
        assert usage is not None and pricing is not None
        assert pricing.price_at(time.time()).cost(usage) > 0
