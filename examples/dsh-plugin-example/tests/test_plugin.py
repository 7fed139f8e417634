"""The plugin inside a harness: the model (a script) calls the tool and sees the hint.

Written with ``dsh.testing``: the ``dsh_harness_factory`` fixture builds started harnesses (and
closes them after the test) and ``ScriptedAdapter`` plays the model's side of the conversation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from dsh import Agent, AgentOptions, ConfigError, Harness, hookimpl
from dsh.plugin import LlmRequest, ToolResultEvent, text_of
from dsh.testing import ScriptedAdapter, text_response, tool_call_response

from dsh_example import CalculatorConfig, CalculatorPlugin

Factory = Callable[..., Awaitable[Harness]]
HINT = CalculatorConfig().hint


async def ask(harness: Harness, question: str, *script: Any) -> tuple[Agent, ScriptedAdapter]:
    """Run one turn of a new agent whose model plays ``script``."""
    adapter = ScriptedAdapter(list(script))
    harness.llm.register_adapter(["scripted"], adapter)
    agent = harness.agent_loop.create(
        "a", AgentOptions(model="scripted", system_prompt="Be brief.")
    )
    agent.send(question)
    await agent.wait_idle()
    return agent, adapter


def results(agent: Agent) -> list[ToolResultEvent]:
    return [e.data for e in agent.session.events if isinstance(e.data, ToolResultEvent)]


async def test_the_model_gets_an_exact_answer(dsh_harness_factory: Factory) -> None:
    harness = await dsh_harness_factory(plugins=[CalculatorPlugin()])
    agent, adapter = await ask(
        harness,
        "What is 0.1 + 0.2?",
        tool_call_response("c1", "calculate", {"expression": "0.1 + 0.2"}),
        text_response("0.3"),
    )
    [result] = results(agent)
    assert (text_of(result.content), result.is_error) == ("0.3", False)
    first = adapter.requests[0]
    assert [t.name for t in first.tools] == ["calculate"]
    assert first.tools[0].parameters["required"] == ["expression"]
    assert first.system == f"Be brief.\n\n{HINT}"


async def test_a_bad_expression_is_an_error_the_model_can_read(
    dsh_harness_factory: Factory,
) -> None:
    harness = await dsh_harness_factory(plugins=[CalculatorPlugin()])
    agent, adapter = await ask(
        harness,
        "What is x squared?",
        tool_call_response("c1", "calculate", {"expression": "x ** 2"}),
        text_response("I need a number for x."),
    )
    [result] = results(agent)
    assert result.is_error
    assert result.code == "BAD_EXPRESSION"
    assert "'x' is not arithmetic" in text_of(result.content)
    assert len(adapter.requests) == 2  # a tool failure is not a turn failure: the model answered


async def test_config_sets_the_precision_and_the_hint(dsh_harness_factory: Factory) -> None:
    config = {"calculator": {"precision": 3, "hint": ""}}
    harness = await dsh_harness_factory(plugins=[CalculatorPlugin()], config=config)
    agent, adapter = await ask(
        harness,
        "1/7?",
        tool_call_response("c1", "calculate", {"expression": "1 / 7"}),
        text_response("about 0.143"),
    )
    assert text_of(results(agent)[0].content) == "approximately 0.143 (exactly 1/7)"
    assert adapter.requests[0].system == "Be brief."


async def test_no_hint_when_another_plugin_removed_the_tool(dsh_harness_factory: Factory) -> None:
    class NoTools:
        @hookimpl
        def dsh_agent_request(self, request: LlmRequest) -> LlmRequest:
            return LlmRequest(request.model, request.messages, request.system)

    harness = await dsh_harness_factory(plugins=[CalculatorPlugin(), NoTools()])
    _, adapter = await ask(harness, "hi", text_response("hello"))
    assert adapter.requests[0].system == "Be brief."


async def test_a_misspelt_key_fails_at_start(dsh_harness_factory: Factory) -> None:
    with pytest.raises(ConfigError, match="precison"):
        await dsh_harness_factory(
            plugins=[CalculatorPlugin()], config={"calculator": {"precison": 3}}
        )
