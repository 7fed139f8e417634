from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.loop._loop import LoopAgent
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig, DeepSeekPlugin

MakeAgent = Callable[..., Awaitable[LoopAgent]]


@pytest.fixture
async def adapter(mock_server: MockServer) -> AsyncIterator[DeepSeekAdapter]:
    """An adapter pointed at the mock server, with a short idle timeout."""
    config = DeepSeekConfig(base_url=mock_server.url, api_key="k", idle_timeout_s=5.0)
    adapter = DeepSeekAdapter(config)
    yield adapter
    await adapter.aclose()


@pytest.fixture
def sleeps() -> list[float]:
    """What the fake clock was asked to wait, in order."""
    return []


@pytest.fixture
async def make_agent(mock_server: MockServer, sleeps: list[float]) -> AsyncIterator[MakeAgent]:
    """``await make_agent(*plugins, thinking=..., **llm_deepseek_config)``: an agent on the
    DeepSeek adapter against the mock server, in a harness with a fake clock."""
    harnesses: list[Harness] = []

    async def fake_sleep(delay_s: float) -> None:
        sleeps.append(delay_s)

    async def make(
        *plugins: object,
        model: str = "deepseek-v4-flash",
        thinking: bool | None = None,
        **config: Any,
    ) -> LoopAgent:
        harness = Harness(
            load_entrypoints=False,
            plugins=[DeepSeekPlugin, *plugins],
            config=deepseek_config(mock_server, **config),
            sleep=fake_sleep,
        )
        await harness.start()
        harnesses.append(harness)
        return harness.agent_loop.create("a", AgentOptions(model=model, thinking=thinking))

    yield make
    for harness in harnesses:
        await harness.close()
