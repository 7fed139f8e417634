"""Failures of the adapter: HTTP errors, transport and protocol faults, timeouts, cancellation,
and the missing key."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import pytest
from multidict import CIMultiDict

from dsh.llm._headers import retry_after_s
from dsh.testing.mockserver import MockServer, Scenario, reply
from dsh.values._chunks import BlockStart, StreamChunk, TextDelta
from dsh.values._errors import LlmError
from dsh_plugins.llm_deepseek import ChunkTranslator, DeepSeekAdapter, DeepSeekConfig
from dsh_plugins.llm_deepseek.failures import body_message, http_failure

from .support import HELLO, choice, collect, collect_into, quick_adapter

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[RawHandler], Awaitable[str]]]:
    """``await raw_server(handler)``: a bare TCP server on loopback answering with ``handler``;
    returns its base URL."""
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


async def failure_of(adapter: DeepSeekAdapter) -> LlmError:
    with pytest.raises(LlmError) as caught:
        await collect(adapter)
    return caught.value


@pytest.mark.parametrize(
    ("scenario", "status", "code", "says"),
    [
        ("bad-request", 400, "INVALID_REQUEST", "invalid type: sequence"),
        ("context-length", 400, "CONTEXT_WINDOW_EXCEEDED", "maximum context length"),
        ("auth", 401, "AUTH", "check DEEPSEEK_API_KEY"),
        ("insufficient-balance", 402, "INSUFFICIENT_BALANCE", "top up"),
        ("unprocessable", 422, "INVALID_REQUEST", "missing field"),
        ("rate-limit", 429, "RATE_LIMIT", "Rate Limit Reached"),
        ("server-error", 500, "SERVER", "Internal Server Error"),
        ("overloaded", 503, "SERVER", "Server overloaded"),
    ],
)
async def test_http_errors_map_to_canonical_failures(
    scenario: str,
    status: int,
    code: str,
    says: str,
    adapter: DeepSeekAdapter,
    mock_server: MockServer,
) -> None:
    mock_server.queue(scenario)
    failure = (await failure_of(adapter)).failure
    assert (failure.code, failure.status, failure.request_id) == (code, status, "mock-1")
    assert says in failure.message
    assert failure.message.startswith(f"DeepSeek answered HTTP {status}: ")


async def test_retry_after_is_read_in_seconds(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("rate-limit", {"name": "rate-limit", "retry_after": "0.5"})
    assert (await failure_of(adapter)).failure.retry_after_s == 2.0
    assert (await failure_of(adapter)).failure.retry_after_s == 0.5


async def test_other_statuses_keep_their_number(mock_server: MockServer) -> None:
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=f"{mock_server.url}/nowhere", api_key="k"))
    failure = (await failure_of(adapter)).failure
    await adapter.aclose()
    assert (failure.code, failure.status) == ("HTTP_404", 404)
    assert failure.message == "DeepSeek answered HTTP 404: 404: Not Found"


def test_retry_after_accepts_http_dates_and_ignores_nonsense() -> None:
    now = 1_700_000_000.0
    assert retry_after_s("Tue, 14 Nov 2023 22:13:30 GMT", now=now) == 10.0
    assert retry_after_s("Tue, 14 Nov 2023 22:13:00 GMT", now=now) == 0.0
    assert retry_after_s("-3") == 0.0
    assert retry_after_s("soon") is None
    assert retry_after_s(None) is None
    assert (retry_after_s("Tue, 14 Nov 2100 22:13:30 GMT") or 0) > 1e9


def test_body_messages_come_from_json_or_plain_text() -> None:
    assert body_message(b'{"error": {"message": "nope"}}') == "nope"
    assert body_message(b'{"detail": "x"}') == '{"detail": "x"}'
    assert body_message(b'["x"]') == '["x"]'
    assert body_message(b"  plain  ") == "plain"


def test_request_ids_are_read_from_the_usual_headers() -> None:
    headers = CIMultiDict({"X-DeepSeek-Request-Id": "ds-1"})
    assert http_failure(500, "err", headers, b"").request_id == "ds-1"
    assert http_failure(500, "Internal Server Error", CIMultiDict(), b"").message.endswith(
        "Internal Server Error"
    )


async def test_a_refused_connection_is_a_transport_failure() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=f"http://127.0.0.1:{port}", api_key="k"))
    error = await failure_of(adapter)
    await adapter.aclose()
    assert error.failure.code == "TRANSPORT"
    assert f"127.0.0.1:{port}" in error.failure.message


async def test_no_response_headers_within_the_idle_timeout_is_a_timeout(
    raw_server: Callable[[RawHandler], Awaitable[str]],
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up
        writer.close()

    url = await raw_server(silent)
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=url, api_key="k", idle_timeout_s=0.05))
    error = await failure_of(adapter)
    await adapter.aclose()
    assert error.failure.code == "TIMEOUT"


async def test_an_error_body_that_breaks_off_still_gives_the_status(
    raw_server: Callable[[RawHandler], Awaitable[str]],
) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\nshort")
        await writer.drain()
        writer.close()

    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=await raw_server(broken), api_key="k"))
    failure = (await failure_of(adapter)).failure
    await adapter.aclose()
    assert (failure.code, failure.status) == ("SERVER", 503)
    assert failure.message == "DeepSeek answered HTTP 503: Service Unavailable"


@pytest.mark.parametrize(
    ("scenario", "code"),
    [
        ("disconnect", "STREAM_CLOSED"),
        ("missing-done", "STREAM_CLOSED"),
        ("malformed-json", "MALFORMED_RESPONSE"),
        ("error-event", "SERVER"),
        ("stall", "TIMEOUT"),
        ("keep-alive-stall", "TIMEOUT"),
    ],
)
async def test_stream_faults_raise_after_what_streamed_before(
    scenario: str, code: str, mock_server: MockServer
) -> None:
    adapter = quick_adapter(mock_server, 0.5 if code == "TIMEOUT" else 5.0)
    mock_server.queue(scenario)
    received: list[StreamChunk] = []
    with pytest.raises(LlmError) as caught:
        await collect_into(received, adapter)
    await adapter.aclose()
    assert caught.value.failure.code == code
    assert received[:2] == [BlockStart(0, "text"), TextDelta(0, "Partial")]


@pytest.mark.parametrize(
    "payload",
    [
        ["not", "an", "object"],
        choice({"content": 5}),
        choice({"reasoning_content": ["x"]}),
        choice({"tool_calls": [{"index": 0, "function": {"arguments": ["x"]}}]}),
        {"choices": {"0": {}}},
    ],
)
def test_payloads_of_the_wrong_shape_are_malformed(payload: object) -> None:
    with pytest.raises(LlmError) as caught:
        ChunkTranslator().feed(payload)
    assert caught.value.failure.code == "MALFORMED_RESPONSE"


def test_done_without_a_finish_reason_is_malformed() -> None:
    translator = ChunkTranslator()
    translator.feed(choice({"content": "x"}))
    with pytest.raises(LlmError, match="without a finish_reason") as caught:
        translator.done()
    assert caught.value.failure.code == "MALFORMED_RESPONSE"


@pytest.mark.parametrize(
    ("error", "code", "says"),
    [
        ({"message": "slow down", "type": "rate_limit_error"}, "RATE_LIMIT", "slow down"),
        ({"message": "boom", "type": None}, "SERVER", "boom"),
        ("plain failure", "SERVER", "plain failure"),
    ],
)
def test_error_objects_in_the_stream_raise(error: object, code: str, says: str) -> None:
    with pytest.raises(LlmError, match=says) as caught:
        ChunkTranslator().feed({"error": error})
    assert caught.value.failure.code == code


async def test_a_missing_key_says_how_to_set_one_or_try_the_demo(
    mock_server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=mock_server.url))
    failure = (await failure_of(adapter)).failure
    assert failure.code == "AUTH"
    assert "DEEPSEEK_API_KEY" in failure.message
    assert "dsh demo" in failure.message
    assert mock_server.requests == []


async def test_the_key_is_read_from_the_environment_when_the_adapter_is_built(
    mock_server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-from-env")
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=mock_server.url))
    monkeypatch.delenv("DEEPSEEK_API_KEY")
    mock_server.queue("text")
    await collect(adapter)
    await adapter.aclose()
    assert mock_server.requests[0].headers["Authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in repr(adapter)
    assert "sk-from-env" not in repr(adapter.config)


def slow_answer() -> Scenario:
    return attrs.evolve(reply(text="word " * 200), interval_s=0.02)


async def test_cancelling_the_consumer_closes_the_response_at_once(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(slow_answer())
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in adapter.stream(HELLO):
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()
    assert mock_server.disconnects == 1


async def test_closing_the_stream_early_closes_the_response(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(slow_answer())
    stream = adapter.stream(HELLO)
    assert await anext(stream) == BlockStart(0, "text")
    await stream.aclose()
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()


async def test_the_session_is_made_lazily_reused_and_closed(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("text", "text")
    await collect(adapter)
    await collect(adapter)
    await adapter.aclose()
    await adapter.aclose()
    mock_server.queue("text")
    assert len(await collect(adapter)) == 8
