from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.testing.mockserver import MockServer
from dsh.values._agent import Agent
from dsh_plugins.llm_anthropic import AnthropicConfig, AnthropicPlugin, MessagesAdapter, adapters

MakeAgent = Callable[..., Awaitable[Agent]]
MODEL = "deepseek-anthropic/deepseek-flash"


def section(server: MockServer, **options: Any) -> dict[str, Any]:
    """``[llm_anthropic]`` pointing DeepSeek's Messages endpoint at the mock ``server``."""
    return {
        "deepseek_base_url": server.url + "/anthropic",
        "deepseek_api_key": server.api_key or "k",
        "anthropic_models": [],
        **options,
    }


def adapter_for(server: MockServer, **options: Any) -> MessagesAdapter:
    """The ``deepseek-anthropic`` adapter against ``server``."""
    [adapter] = adapters(AnthropicConfig(**{"idle_timeout_s": 5.0, **section(server, **options)}))
    return adapter


@pytest.fixture
async def adapter(mock_server: MockServer) -> AsyncIterator[MessagesAdapter]:
    adapter = adapter_for(mock_server)
    yield adapter
    await adapter.aclose()


@pytest.fixture
async def make_agent(mock_server: MockServer) -> AsyncIterator[MakeAgent]:
    """``await make_agent(*plugins, thinking=..., **llm_anthropic_config)``: an agent on
    ``deepseek-anthropic/deepseek-flash`` against the mock server."""
    harnesses: list[Harness] = []

    async def make(*plugins: object, thinking: bool | None = None, **options: Any) -> Agent:
        harness = Harness(
            load_entrypoints=False,
            plugins=[AnthropicPlugin, *plugins],
            config={"llm_anthropic": section(mock_server, **options)},
        )
        await harness.start()
        harnesses.append(harness)
        return harness.agent_loop.create("a", AgentOptions(model=MODEL, thinking=thinking))

    yield make
    for harness in harnesses:
        await harness.close()
