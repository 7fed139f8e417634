"""The fallback plugin: a turn moves from a failing model (a mock-server fault) to the next
model of its chain once the retry plugin gives up, and the next turn goes back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer, reply
from dsh.values._agent import Agent
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
)
from dsh.values._content import Reasoning, Text
from dsh.values._events import RETRY_EVENT, AssistantMessage, TurnCompleted, TurnEnd, TurnError
from dsh.values._request import LlmRequest
from dsh_plugins.fallback import FALLBACK_EVENT, FallbackEvent, FallbackPlugin
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_providers import LlmProvidersPlugin
from dsh_plugins.retry import RetryPlugin
from tests.plugins.llm_providers.support import Fail, ProfileServer, Reply, serve

PRIMARY = "deepseek-flash"
BACKUP = "openrouter/m1"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-test")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
async def backup() -> AsyncIterator[ProfileServer]:
    async with serve("openrouter") as server:
        yield server


class Setup:
    """A harness with DeepSeek on the mock server and OpenRouter on its loopback server."""

    def __init__(self, mock: MockServer, backup: ProfileServer) -> None:
        self.mock, self.backup = mock, backup
        self.sleeps: list[float] = []

    def config(self, fallback: dict[str, Any], retry: dict[str, Any]) -> dict[str, Any]:
        providers = {
            "openrouter": {
                "base_url": self.backup.base_url,
                "models": {"m1": {}},
                "send_reasoning": True,
            },
            "openai": {"base_url": self.backup.base_url, "models": {"m2": {}}},
        }
        return {
            **deepseek_config(self.mock, idle_timeout_s=5.0),
            "llm_providers": providers,
            "fallback": {"chains": {PRIMARY: [BACKUP]}, **fallback},
            "retry": {"max_attempts": 2, **retry},
        }

    async def harness(
        self,
        *plugins: object,
        fallback: dict[str, Any] | None = None,
        retry: dict[str, Any] | None = None,
    ) -> Harness:
        async def fake_sleep(delay_s: float) -> None:
            self.sleeps.append(delay_s)

        chosen = plugins or (RetryPlugin(lambda: 0.0), FallbackPlugin())
        config = self.config(fallback or {}, retry or {})
        if not any(isinstance(plugin, RetryPlugin) for plugin in chosen):
            del config["retry"]
        harness = Harness(
            [DeepSeekPlugin(), LlmProvidersPlugin(), *chosen],
            config,
            load_entrypoints=False,
            sleep=fake_sleep,
        )
        await harness.start()
        return harness


@pytest.fixture
def setup(mock_server: MockServer, backup: ProfileServer) -> Setup:
    return Setup(mock_server, backup)


async def turn(agent: Agent, text: str = "go") -> None:
    agent.send(text)
    async with asyncio.timeout(10):
        await agent.wait_idle()


def of_type(events: Any, kind: type[Any]) -> list[Any]:
    return [e.data for e in events if isinstance(e.data, kind)]


def typed(events: Any, name: str) -> list[Any]:
    return [e.data for e in events if e.type == name]


def models(events: Any) -> list[str | None]:
    return [m.model for m in of_type(events, AssistantMessage)]


def ends(events: Any) -> list[Any]:
    return [e.reason for e in of_type(events, TurnEnd)]


async def test_a_turn_moves_to_the_next_model_and_the_next_turn_comes_back(
    setup: Setup,
) -> None:
    harness = await setup.harness()
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error", "server-error", reply(text="primary again"))
        setup.backup.queue(Reply(text="from the backup"))
        await turn(agent)
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert ends(events) == [TurnCompleted(), TurnCompleted()]
    assert models(events) == [BACKUP, PRIMARY]
    [retry] = typed(events, RETRY_EVENT)
    assert retry.attempt == 1  # the retry plugin tried the primary again first
    [switch] = typed(events, FALLBACK_EVENT)
    assert switch == FallbackEvent(1, 1, 2, PRIMARY, BACKUP, "SERVER", switch.message)
    assert len(setup.mock.requests) == 3 and len(setup.backup.bodies) == 1


async def test_history_is_reserialised_for_each_provider(setup: Setup) -> None:
    harness = await setup.harness()
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue(
            reply(reasoning="deepseek thinks", text="one"),
            "server-error",
            "server-error",
            reply(text="three"),
        )
        setup.backup.queue(Reply(reasoning="openrouter thinks", text="two"))
        for _ in range(3):
            await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert models(events) == [PRIMARY, BACKUP, PRIMARY]
    contents = [m.content for m in of_type(events, AssistantMessage)]
    assert contents[1] == (Reasoning("openrouter thinks"), Text("two"))  # the session keeps all
    # OpenRouter got DeepSeek's answer without DeepSeek's reasoning...
    sent = [m for m in setup.backup.bodies[0]["messages"] if m["role"] == "assistant"]
    assert sent == [{"role": "assistant", "content": "one"}]
    # ...and DeepSeek got its own reasoning back, but not OpenRouter's.
    body = setup.mock.requests[-1].body
    answers = [m for m in body["messages"] if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in answers] == ["deepseek thinks", None]
    assert [m["content"] for m in answers] == ["one", "two"]


async def test_the_fallback_model_gets_its_own_retries(setup: Setup) -> None:
    harness = await setup.harness()
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error", "server-error")
        setup.backup.queue(Fail(500, "busy"), Reply(text="second try"))
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert ends(events) == [TurnCompleted()]
    assert models(events) == [BACKUP]
    assert [r.attempt for r in typed(events, RETRY_EVENT)] == [1, 1]


@pytest.mark.parametrize("order", ["retry first", "fallback first"])
async def test_retry_and_fallback_agree_in_either_order(setup: Setup, order: str) -> None:
    plugins: list[object] = [RetryPlugin(lambda: 0.0), FallbackPlugin()]
    if order == "fallback first":
        plugins.reverse()
    harness = await setup.harness(*plugins)
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error", "server-error")
        setup.backup.queue(Reply(text="backup"))
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert models(events) == [BACKUP]
    assert len(setup.mock.requests) == 2
    assert len(typed(events, RETRY_EVENT)) == 1


async def test_without_the_retry_plugin_the_first_failure_moves_on(setup: Setup) -> None:
    harness = await setup.harness(FallbackPlugin())
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("rate-limit")
        setup.backup.queue(Reply(text="backup"))
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert models(events) == [BACKUP]
    assert len(setup.mock.requests) == 1


async def test_a_code_not_configured_fails_the_step(setup: Setup) -> None:
    harness = await setup.harness()
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("bad-request")
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    [reason] = ends(events)
    assert isinstance(reason, TurnError) and reason.failure.code == "INVALID_REQUEST"
    assert typed(events, FALLBACK_EVENT) == [] and setup.backup.bodies == []


async def test_an_exhausted_chain_fails_with_the_last_failure(setup: Setup) -> None:
    harness = await setup.harness(retry={"max_attempts": 1})
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error")
        setup.backup.queue(Fail(402, "no credits"))
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    [reason] = ends(events)
    assert isinstance(reason, TurnError)
    assert (reason.failure.code, reason.failure.status) == ("INSUFFICIENT_BALANCE", 402)
    assert len(typed(events, FALLBACK_EVENT)) == 1


async def test_unusable_models_of_the_chain_are_skipped(setup: Setup) -> None:
    chain = {PRIMARY: ["openai/m2", "nobody/serves-this", BACKUP]}
    harness = await setup.harness(fallback={"chains": chain}, retry={"max_attempts": 1})
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error")
        setup.backup.queue(Reply(text="backup"))
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert models(events) == [BACKUP]
    [switch] = typed(events, FALLBACK_EVENT)
    assert switch.to_model == BACKUP


async def test_sticky_keeps_the_fallback_model(setup: Setup) -> None:
    harness = await setup.harness(fallback={"sticky": True}, retry={"max_attempts": 1})
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error")
        setup.backup.queue(Reply(text="one"), Reply(text="two"))
        await turn(agent)
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    assert models(events) == [BACKUP, BACKUP]
    assert len(setup.mock.requests) == 1


async def test_a_model_without_a_chain_just_fails(setup: Setup) -> None:
    harness = await setup.harness(fallback={"chains": {}}, retry={"max_attempts": 1})
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error")
        await turn(agent)
        events = agent.session.events
    finally:
        await harness.close()
    [reason] = ends(events)
    assert isinstance(reason, TurnError) and reason.failure.code == "SERVER"


async def test_a_switch_is_forgotten_when_the_agent_goes(setup: Setup) -> None:
    plugin = FallbackPlugin()
    harness = await setup.harness(RetryPlugin(lambda: 0.0), plugin, retry={"max_attempts": 1})
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        setup.mock.queue("server-error")
        setup.backup.queue(Reply(text="backup"))
        await turn(agent)
        assert plugin._switches and plugin._switched
        await agent.dispose()
        assert not plugin._switches and not plugin._switched and not plugin._primary
    finally:
        await harness.close()


async def test_reasoning_of_a_model_no_longer_served_is_dropped(setup: Setup) -> None:
    harness = await setup.harness(retry={"max_attempts": 1})
    try:
        thinking: list[StreamChunk] = [
            BlockStart(0, "reasoning"),
            ReasoningDelta(0, "gone thinks"),
            BlockEnd(0, Reasoning("gone thinks")),
            BlockStart(1, "text"),
            TextDelta(1, "old answer"),
            BlockEnd(1, Text("old answer")),
            Finish(FinishStop()),
        ]
        dispose = harness.llm.register_adapter(["gone"], ScriptedAdapter([thinking]))
        first = harness.agent_loop.create("a", AgentOptions(model="gone"))
        await turn(first)
        await first.dispose()
        dispose()
        options = AgentOptions(model=PRIMARY)
        agent = harness.agent_loop.create("b", options, session=first.session)
        setup.mock.queue("server-error")
        setup.backup.queue(Reply(text="backup"))
        await turn(agent)
    finally:
        await harness.close()
    [first, *_] = [m for m in setup.backup.bodies[0]["messages"] if m["role"] == "assistant"]
    assert first == {"role": "assistant", "content": "old answer"}


async def test_requests_with_a_purpose_are_left_alone(setup: Setup) -> None:
    plugin = FallbackPlugin()
    harness = await setup.harness(RetryPlugin(lambda: 0.0), plugin)
    try:
        agent = harness.agent_loop.create("a", AgentOptions(model=PRIMARY))
        request = LlmRequest(PRIMARY, (), purpose="compaction")
        assert plugin.dsh_agent_request(agent, 1, request) is None
    finally:
        await harness.close()
