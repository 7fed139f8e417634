"""The adapter's own edges: keys, transport failures, a server that never answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from dsh.values._content import Message, Reasoning, Text
from dsh.values._errors import LlmError
from dsh.values._request import LlmRequest
from dsh_plugins.llm_providers import ProviderAdapter, ProviderSettings, resolve
from dsh_plugins.llm_providers.config import ModelSettings
from dsh_plugins.llm_providers.request import body_for

HELLO = LlmRequest("openai/m", (Message("user", (Text("hi"),)),))


def adapter(name: str = "openai", **settings: object) -> ProviderAdapter:
    table = ProviderSettings(models={"m": ModelSettings()}, **settings)  # type: ignore[arg-type]
    return ProviderAdapter(resolve(name, table))


async def drain(target: ProviderAdapter, request: LlmRequest = HELLO) -> None:
    try:
        async for _ in target.stream(request):
            pass
    finally:
        await target.aclose()


async def test_a_provider_that_wants_a_key_says_how_to_give_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    target = adapter()
    problem = target.unavailable("openai/m")
    assert problem == (
        "no API key for openai: set OPENAI_API_KEY or store one with 'dsh keys set openai'"
    )
    with pytest.raises(LlmError) as raised:
        await drain(target)
    assert (raised.value.failure.code, raised.value.failure.message) == ("AUTH", problem)
    assert repr(target) == "<ProviderAdapter openai https://api.openai.com/v1>"


async def test_a_stored_key_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh.app import _keys as keys

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keys.store("openai", "sk-stored")
    assert adapter().unavailable("openai/m") is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_nobody_listening_is_transport() -> None:
    target = adapter("ollama", base_url=f"http://127.0.0.1:{_free_port()}/v1")
    with pytest.raises(LlmError) as raised:
        await drain(target, LlmRequest("ollama/m", HELLO.messages))
    assert raised.value.failure.code == "TRANSPORT"
    assert "cannot reach ollama" in raised.value.failure.message


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    """A server that takes the request and never answers."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    release.set()
    await runner.cleanup()


async def test_no_headers_within_the_idle_timeout_is_timeout(silent: str) -> None:
    target = adapter("vllm", base_url=silent, idle_timeout_s=0.05)
    with pytest.raises(LlmError) as raised:
        await drain(target, LlmRequest("vllm/m", HELLO.messages))
    assert raised.value.failure.code == "TIMEOUT"
    assert "within 0.05 s" in raised.value.failure.message


@pytest.fixture
async def half_error() -> AsyncIterator[str]:
    """A server that sends an error status, then never the body."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500, headers={"Content-Length": "100"})
        await response.prepare(request)
        await release.wait()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    release.set()
    await runner.cleanup()


async def test_an_error_body_that_never_comes_is_timeout(half_error: str) -> None:
    target = adapter("vllm", base_url=half_error, idle_timeout_s=0.1)
    with pytest.raises(LlmError) as raised:
        await drain(target, LlmRequest("vllm/m", HELLO.messages))
    assert raised.value.failure.code == "TIMEOUT"


def test_blocks_a_user_message_cannot_carry_are_not_sent() -> None:
    target = adapter("vllm")
    message = Message("user", (Reasoning("stray"), Text("hi")))
    body = body_for(target.provider, "m", LlmRequest("vllm/m", (message,)))
    assert body["messages"] == [{"role": "user", "content": "hi"}]
