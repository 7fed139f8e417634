from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.loop._loop import LoopAgent
from dsh.testing.mockserver import MockServer
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter, OpenAISdkConfig, OpenAISdkPlugin

MakeAgent = Callable[..., Awaitable[LoopAgent]]
RawHandler = Callable[[Any, Any], Awaitable[None]]


def sdk_config(server: MockServer, **options: Any) -> dict[str, Any]:
    """Harness config pointing this adapter at ``server``."""
    return {"llm_openai_sdk": {"base_url": server.url, "api_key": "k", **options}}


@pytest.fixture
async def adapter(mock_server: MockServer) -> AsyncIterator[OpenAISdkAdapter]:
    """An adapter pointed at the mock server."""
    adapter = OpenAISdkAdapter(OpenAISdkConfig(base_url=mock_server.url, api_key="k"))
    yield adapter
    await adapter.aclose()


@pytest.fixture
def sleeps() -> list[float]:
    """What the fake clock was asked to wait, in order."""
    return []


@pytest.fixture
async def make_agent(mock_server: MockServer, sleeps: list[float]) -> AsyncIterator[MakeAgent]:
    """``await make_agent(*plugins, model=..., thinking=..., **llm_openai_sdk_config)``: an
    agent on this adapter against the mock server, in a harness with a fake clock."""
    harnesses: list[Harness] = []

    async def fake_sleep(delay_s: float) -> None:
        sleeps.append(delay_s)

    async def make(
        *plugins: object,
        model: str = "deepseek-sdk/deepseek-v4-flash",
        thinking: bool | None = None,
        **config: Any,
    ) -> LoopAgent:
        harness = Harness(
            load_entrypoints=False,
            plugins=[OpenAISdkPlugin(), *plugins],
            config=sdk_config(mock_server, **config),
            sleep=fake_sleep,
        )
        await harness.start()
        harnesses.append(harness)
        return harness.agent_loop.create("a", AgentOptions(model=model, thinking=thinking))

    yield make
    for harness in harnesses:
        await harness.close()


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[RawHandler], Awaitable[str]]]:
    """``await raw_server(handler)``: a bare TCP server on loopback answering with
    ``handler(reader, writer)``; returns its base URL."""
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
