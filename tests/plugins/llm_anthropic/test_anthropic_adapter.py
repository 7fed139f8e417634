"""The adapter over real loopback HTTP: what it sends, the faults of the mock server on its
Messages endpoint, keep-alives and deadlines, transport failures, cancellation."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import attrs
import pytest
import structlog
from aiohttp import web

from dsh import Harness
from dsh.cli import main
from dsh.testing.mockserver import MockServer, reply
from dsh.values._chunks import Finish, FinishStop, StreamChunk, TextDelta
from dsh.values._content import Message, Text
from dsh.values._errors import LlmError
from dsh.values._request import LlmRequest
from dsh_plugins.llm_anthropic import (
    ANTHROPIC,
    DEEPSEEK,
    AnthropicConfig,
    AnthropicPlugin,
    MessagesAdapter,
)
from dsh_plugins.llm_anthropic.adapter import API_VERSION
from dsh_plugins.terminal_ui import startup

from .conftest import adapter_for
from .support import HELLO, collect, collect_into

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[[Handler], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``url = await serve(handler)``: a loopback server answering ``POST /v1/messages``."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/v1/messages", handler)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def anthropic(url: str, **options: object) -> MessagesAdapter:
    config = AnthropicConfig(**{"idle_timeout_s": 2.0, **options})  # type: ignore[arg-type]
    return MessagesAdapter(ANTHROPIC, config, url, ("claude-haiku-4-5",), "sk-ant")


CLAUDE = LlmRequest("anthropic/claude-haiku-4-5", (Message("user", (Text("hi"),)),))
EVENTS = (
    b'event: message_start\ndata: {"type":"message_start",'
    b'"message":{"usage":{"input_tokens":3}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hello"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


async def test_it_sends_the_messages_api_headers_and_the_wire_model_name(
    mock_server: MockServer, adapter: MessagesAdapter
) -> None:
    mock_server.queue("text-v4")
    request = LlmRequest("deepseek-anthropic/deepseek-v4-flash", HELLO.messages)
    chunks = await collect(adapter, request)
    assert chunks[-1] == Finish(FinishStop())
    sent = mock_server.requests[0]
    assert sent.path == "/anthropic/v1/messages"
    assert sent.headers["x-api-key"] == "k"
    assert sent.headers["anthropic-version"] == API_VERSION
    assert "Authorization" not in sent.headers
    assert sent.body["model"] == "deepseek-flash"


async def test_anthropic_models_are_sent_as_named_and_events_stream(serve: Serve) -> None:
    seen: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append((request.headers["x-api-key"], body["model"]))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(PING + EVENTS)
        return response

    adapter = anthropic(await serve(handler))
    try:
        chunks = await collect(adapter, CLAUDE)
    finally:
        await adapter.aclose()
    assert seen == [("sk-ant", "claude-haiku-4-5")]
    assert TextDelta(0, "Hello") in chunks and chunks[-1] == Finish(FinishStop())


def test_ids_info_and_repr() -> None:
    config = AnthropicConfig()
    claude = MessagesAdapter(ANTHROPIC, config, "https://api.anthropic.com/", ("m",), "key")
    deepseek = MessagesAdapter(DEEPSEEK, config, config.deepseek_base_url, ("deepseek-flash",), "k")
    assert claude.model_ids() == ["anthropic/m"]
    assert deepseek.model_ids() == ["deepseek-anthropic/deepseek-flash"]
    assert claude.model_info("anthropic/m") is None
    info = deepseek.model_info("deepseek-anthropic/deepseek-flash")
    assert info is not None and info.context_window == 1_000_000
    assert info.image_input is False  # DeepSeek's Messages endpoint takes no images
    assert repr(claude) == "<MessagesAdapter anthropic https://api.anthropic.com>"


@pytest.mark.parametrize(
    ("provider", "variable", "hint"),
    [(ANTHROPIC, "ANTHROPIC_API_KEY", "anthropic"), (DEEPSEEK, "DEEPSEEK_API_KEY", "deepseek")],
)
async def test_without_a_key_the_call_fails_auth_and_says_where_keys_come_from(
    monkeypatch: pytest.MonkeyPatch, provider: object, variable: str, hint: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    adapter = MessagesAdapter(provider, AnthropicConfig(), "http://127.0.0.1:9", ("m",), None)  # type: ignore[arg-type]
    with pytest.raises(LlmError) as raised:
        await collect(adapter, LlmRequest(f"{adapter.provider.prefix}/m", HELLO.messages))
    assert raised.value.failure.code == "AUTH"
    assert variable in raised.value.failure.message
    assert f"dsh keys set {hint}" in raised.value.failure.message


async def test_the_key_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, serve: Serve
) -> None:
    keys: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        keys.append(request.headers["x-api-key"])
        return web.json_response(
            {"type": "error", "error": {"type": "x", "message": "no"}}, status=400
        )

    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    adapter = MessagesAdapter(ANTHROPIC, AnthropicConfig(), await serve(handler), ("m",), None)
    with pytest.raises(LlmError):
        await collect(adapter, LlmRequest("anthropic/m", HELLO.messages))
    await adapter.aclose()
    assert keys == ["from-env"]


@pytest.mark.parametrize(
    ("scenario", "code", "status"),
    [
        ("rate-limit", "RATE_LIMIT", 429),
        ("overloaded", "SERVER", 503),
        ("unprocessable", "INVALID_REQUEST", 422),
        ("json-error-200", "RATE_LIMIT", 200),
        ("html-200", "MALFORMED_RESPONSE", 200),
        ("completion-200", "MALFORMED_RESPONSE", 200),
    ],
)
async def test_http_faults(
    mock_server: MockServer, adapter: MessagesAdapter, scenario: str, code: str, status: int
) -> None:
    mock_server.queue(scenario)
    with pytest.raises(LlmError) as raised:
        await collect(adapter)
    failure = raised.value.failure
    assert (failure.code, failure.status, failure.request_id) == (code, status, "mock-1")


async def test_a_wrong_key_is_auth(mock_server: MockServer) -> None:
    mock_server.api_key = "the-right-key"
    adapter = adapter_for(mock_server, deepseek_api_key="a-wrong-key")
    with pytest.raises(LlmError) as raised:
        await collect(adapter)
    await adapter.aclose()
    assert raised.value.failure.code == "AUTH"
    assert "invalid API key" in raised.value.failure.message


@pytest.mark.parametrize(
    ("scenario", "code", "partial"),
    [
        ("disconnect", "STREAM_CLOSED", "Partial answer"),
        ("missing-done", "STREAM_CLOSED", "Partial answer"),
        ("malformed-json", "MALFORMED_RESPONSE", "Partial answer"),
        ("error-event", "SERVER", "Partial answer"),
    ],
)
async def test_stream_faults_keep_what_streamed(
    mock_server: MockServer, adapter: MessagesAdapter, scenario: str, code: str, partial: str
) -> None:
    mock_server.queue(scenario)
    received: list[StreamChunk] = []
    with pytest.raises(LlmError) as raised:
        await collect_into(received, adapter)
    assert raised.value.failure.code == code
    assert "".join(c.text for c in received if isinstance(c, TextDelta)) == partial


@pytest.mark.parametrize("scenario", ["stall", "keep-alive-stall"])
async def test_a_stalled_stream_times_out(mock_server: MockServer, scenario: str) -> None:
    mock_server.queue(scenario)
    # The stall never ends by itself; 2 s leaves the headers and the partial answer time to
    # arrive on a loaded machine (they come under the same deadline).
    adapter = adapter_for(mock_server, idle_timeout_s=2.0)
    with pytest.raises(LlmError) as raised:
        await collect(adapter)
    await adapter.aclose()
    assert raised.value.failure.code == "TIMEOUT"
    assert "no progress for 2.0 s" in raised.value.failure.message


async def test_a_queued_request_is_waited_for_and_a_stuck_queue_times_out(
    mock_server: MockServer,
) -> None:
    # Keep-alives 50 ms apart (the scenarios' default) for 0.75 s: traffic, never near the
    # idle timeout even on a loaded machine; the queue that ends is waited for.
    patient = adapter_for(mock_server, idle_timeout_s=5.0, first_data_timeout_s=30.0)
    mock_server.queue({"name": "queued", "wait_s": 0.75})
    chunks = await collect(patient)
    await patient.aclose()
    assert chunks[-1] == Finish(FinishStop())
    # The queue that never ends: only the first-data deadline stops it.
    adapter = adapter_for(mock_server, idle_timeout_s=2.0, first_data_timeout_s=3.0)
    mock_server.queue("queued-stall")
    with pytest.raises(LlmError) as raised:
        await collect(adapter)
    await adapter.aclose()
    assert raised.value.failure.code == "TIMEOUT"
    assert "stayed queued" in raised.value.failure.message


async def test_pings_hold_off_the_first_data_but_are_not_progress_after_it(serve: Serve) -> None:
    async def pings_then(request: web.Request, after: bytes, before: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(before):
            await response.write(PING)
            await asyncio.sleep(0.05)
        await response.write(after)
        while True:
            await response.write(PING)
            await asyncio.sleep(0.05)

    async def queued(request: web.Request) -> web.StreamResponse:
        return await pings_then(request, EVENTS, before=15)  # 0.75 s of pings

    async def stalled(request: web.Request) -> web.StreamResponse:
        first_two = b"\n\n".join(EVENTS.split(b"\n\n")[:2]) + b"\n\n"
        return await pings_then(request, first_two, before=1)

    # Pings 50 ms apart against an idle timeout they never come near on a loaded machine; after
    # the first data they go on forever, so only the deadline ends the second stream.
    waited = anthropic(await serve(queued), idle_timeout_s=5.0)
    assert (await collect(waited, CLAUDE))[-1] == Finish(FinishStop())
    await waited.aclose()
    stuck = anthropic(await serve(stalled), idle_timeout_s=2.0)
    with pytest.raises(LlmError) as raised:
        await collect(stuck, CLAUDE)
    await stuck.aclose()
    assert raised.value.failure.code == "TIMEOUT"


async def test_headers_that_never_come_time_out(serve: Serve) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.Event().wait()  # never: only the client's deadline ends the call
        return web.Response()

    adapter = anthropic(await serve(slow), idle_timeout_s=0.2)
    with pytest.raises(LlmError) as raised:
        await collect(adapter, CLAUDE)
    await adapter.aclose()
    assert raised.value.failure.code == "TIMEOUT"
    assert "no answer from" in raised.value.failure.message


async def test_a_closed_port_is_a_transport_failure() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = anthropic(f"http://127.0.0.1:{port}")
    with pytest.raises(LlmError) as raised:
        await collect(adapter, CLAUDE)
    await adapter.aclose()
    assert raised.value.failure.code == "TRANSPORT"
    assert "cannot reach Anthropic" in raised.value.failure.message


async def test_an_error_body_that_breaks_off_is_judged_by_its_status(serve: Serve) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500, headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b'{"type": "err')
        assert request.transport is not None
        request.transport.close()
        return response

    adapter = anthropic(await serve(broken))
    with pytest.raises(LlmError) as raised:
        await collect(adapter, CLAUDE)
    await adapter.aclose()
    assert (raised.value.failure.code, raised.value.failure.status) == ("SERVER", 500)


async def test_an_oversized_event_is_malformed(mock_server: MockServer) -> None:
    mock_server.queue({"name": "long-text", "chunks": 50})
    adapter = adapter_for(mock_server, max_event_bytes=64)
    with pytest.raises(LlmError) as raised:
        await collect(adapter)
    await adapter.aclose()
    assert raised.value.failure.code == "MALFORMED_RESPONSE"


async def test_cancelling_the_consumer_closes_the_response(mock_server: MockServer) -> None:
    mock_server.queue(attrs.evolve(reply(text="word " * 200), interval_s=0.02))
    adapter = adapter_for(mock_server)
    streaming = asyncio.Event()

    async def consume() -> None:
        async for _ in adapter.stream(HELLO):
            streaming.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):  # bounds a hang only
        await streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()
    await adapter.aclose()
    await adapter.aclose()


async def test_the_connection_is_reused_after_message_stop(mock_server: MockServer) -> None:
    adapter = adapter_for(mock_server)
    mock_server.queue("text-v4", "text-v4")
    await collect(adapter)
    await collect(adapter)
    await adapter.aclose()
    ports = {request.headers.get("Host") for request in mock_server.requests}
    assert len(ports) == 1


async def test_session_errors_while_streaming_are_stream_closed(serve: Serve) -> None:
    async def half(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(EVENTS[:120])
        assert request.transport is not None
        request.transport.close()
        return response

    adapter = anthropic(await serve(half))
    with pytest.raises(LlmError) as raised:
        await collect(adapter, CLAUDE)
    await adapter.aclose()
    assert raised.value.failure.code == "STREAM_CLOSED"
    assert isinstance(raised.value.__cause__, aiohttp.ClientError | type(None))


async def test_any_anthropic_model_is_served_through_the_harness(
    monkeypatch: pytest.MonkeyPatch, serve: Serve
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((await request.json())["model"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(EVENTS)
        return response

    config = {"llm_anthropic": {"anthropic_base_url": await serve(handler)}}
    async with Harness(load_entrypoints=False, plugins=[AnthropicPlugin()], config=config) as h:
        assert "anthropic/claude-next-1" not in h.llm.models()  # listed: the table's only
        assert h.llm.serves("anthropic/claude-next-1")  # served: under the prefix
        assert h.llm.unavailable("anthropic/claude-next-1") is None
        assert h.llm.model_info("anthropic/claude-next-1") is None  # unknown, not guessed
        message = await h.llm.complete(LlmRequest("anthropic/claude-next-1", HELLO.messages))
    assert message.message.content == (Text("Hello"),)
    assert seen == ["claude-next-1"]


async def test_without_a_key_the_models_are_unavailable_and_say_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-ds")
    async with Harness(load_entrypoints=False, plugins=[AnthropicPlugin()]) as harness:
        problem = harness.llm.unavailable("anthropic/claude-haiku-4-5")
        offered = startup.usable_models(harness)  # what /model offers
    assert problem is not None and "ANTHROPIC_API_KEY" in problem
    assert "dsh keys set anthropic" in problem
    assert offered == ["deepseek-anthropic/deepseek-flash", "deepseek-anthropic/deepseek-v4-pro"]


def test_dsh_models_marks_the_models_without_a_key_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no dsh.toml
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    try:
        assert main(["models"]) == 0
    finally:
        structlog.reset_defaults()  # the CLI configures logging process-wide
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("anthropic/claude-haiku-4-5"))
    assert lines[at + 1].strip().startswith("unavailable: no Anthropic API key")
