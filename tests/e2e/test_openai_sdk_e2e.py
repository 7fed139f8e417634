"""Real-API tests of the SDK adapter (llm_openai_sdk), the same matrix as the hand-rolled
adapter's, plus one conversation run through both adapters whose messages must have the same
shape. Skipped without ``DEEPSEEK_API_KEY``; run with ``pytest -m e2e tests/e2e``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.loop._loop import LoopAgent
from dsh.values._chunks import TextDelta
from dsh.values._content import Message, Text, ToolCall, text_of
from dsh.values._events import AssistantMessage, ToolCallEvent
from dsh.values._request import ReasoningEffort
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_openai_sdk import OpenAISdkPlugin
from dsh_plugins.retry import RetryPlugin

from .test_deepseek_e2e import MATRIX, SECRET, MakeAgent, SecretNumber, check_reasoning, turn

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("DEEPSEEK_API_KEY"), reason="needs DEEPSEEK_API_KEY"),
]


@pytest.fixture
async def make_agent() -> AsyncIterator[MakeAgent]:
    """Agents on ``deepseek-sdk/<model>``, each in a harness of its own."""
    harnesses: list[Harness] = []

    async def make(model: str, thinking: bool, effort: ReasoningEffort) -> LoopAgent:
        plugins = [OpenAISdkPlugin(), RetryPlugin(), SecretNumber()]
        harness = Harness(load_entrypoints=False, plugins=plugins)
        await harness.start()
        harnesses.append(harness)
        options = AgentOptions(
            model=f"deepseek-sdk/{model}", thinking=thinking, reasoning_effort=effort
        )
        return harness.agent_loop.create("e2e", options)

    yield make
    for harness in harnesses:
        await harness.close()


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
    assert [b for m in messages for b in m.content if isinstance(b, Text)]


def shape(messages: list[AssistantMessage]) -> list[tuple[Any, ...]]:
    """What two runs of one conversation share: each message's block kinds (reasoning may
    take several blocks' place, so runs of a kind count once), its tool calls' names, and
    whether its usage counts input and output."""
    shapes = []
    for message in messages:
        kinds: list[str] = []
        for block in message.content:
            if not kinds or kinds[-1] != block.type:
                kinds.append(block.type)
        calls = tuple(b.name for b in message.content if isinstance(b, ToolCall))
        usage = message.usage
        counted = (
            ()
            if usage is None
            else (usage.input_tokens + usage.cache_read_tokens > 0, usage.output_tokens > 0)
        )
        shapes.append((tuple(kinds), calls, counted))
    return shapes


async def test_both_adapters_give_messages_of_the_same_shape() -> None:
    plugins = [DeepSeekPlugin(), OpenAISdkPlugin(), RetryPlugin(), SecretNumber()]
    runs = []
    async with Harness(load_entrypoints=False, plugins=plugins) as harness:
        for model in ("deepseek-flash", "deepseek-sdk/deepseek-flash"):
            options = AgentOptions(model=model, thinking=True, reasoning_effort="high")
            agent = harness.agent_loop.create(model.replace("/", "-"), options)
            messages = await turn(agent, "Call get_secret_number, then tell me the number.")
            assert SECRET in text_of(messages[-1].content)
            runs.append(shape(messages))
    assert runs[0] == runs[1]
    assert runs[0][0][1] == ("get_secret_number",)


async def test_json_output_mode_answers_one_json_object() -> None:
    """JSON output mode through the SDK's typed ``response_format``."""
    import json

    from dsh.values._request import LlmRequest
    from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter, OpenAISdkConfig

    adapter = OpenAISdkAdapter(OpenAISdkConfig())
    prompt = 'Answer in json: {"capital": <the capital of France>}.'
    request = LlmRequest(
        "deepseek-sdk/deepseek-flash",
        (Message("user", (Text(prompt),)),),
        response_format="json_object",
        thinking=False,
    )
    try:
        chunks = [chunk async for chunk in adapter.stream(request)]
    finally:
        await adapter.aclose()
    text = "".join(chunk.text for chunk in chunks if isinstance(chunk, TextDelta))
    assert "paris" in str(json.loads(text).get("capital")).lower()
