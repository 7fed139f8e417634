"""Failures, all in band: HTTP errors, transport and protocol faults, timeouts, the missing key
and the missing SDK; and cancellation, which is not a failure of the call."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from dsh.llm._headers import retry_after_s
from dsh.testing.mockserver import MockServer, Scenario, reply
from dsh.values._chunks import BlockStart, Finish, FinishAborted, StreamChunk, TextDelta
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter, OpenAISdkConfig
from dsh_plugins.llm_openai_sdk.adapter import ABORTED
from dsh_plugins.llm_openai_sdk.failures import stream_failure

from .conftest import RawHandler
from .support import HELLO, MODEL, adapter_at, collect, failure_from, failure_of, quick_adapter

RawServer = Callable[[RawHandler], Awaitable[str]]


@pytest.mark.parametrize(
    ("scenario", "status", "code", "says"),
    [
        ("bad-request", 400, "INVALID_REQUEST", "invalid type: sequence"),
        ("context-length", 400, "CONTEXT_WINDOW_EXCEEDED", "maximum context length"),
        ("auth", 401, "AUTH", "api_key in the [llm_openai_sdk] config section"),
        ("insufficient-balance", 402, "INSUFFICIENT_BALANCE", "top up"),
        ("unprocessable", 422, "INVALID_REQUEST", "missing field"),
        ("rate-limit", 429, "RATE_LIMIT", "Rate Limit Reached"),
        ("server-error", 500, "SERVER", "Internal Server Error"),
        ("overloaded", 503, "SERVER", "Server overloaded"),
    ],
)
async def test_http_errors_end_the_stream_with_canonical_failures(
    scenario: str,
    status: int,
    code: str,
    says: str,
    adapter: OpenAISdkAdapter,
    mock_server: MockServer,
) -> None:
    mock_server.queue(scenario)
    chunks = await collect(adapter)
    failure = failure_of(chunks)
    assert len(chunks) == 1
    assert (failure.code, failure.status, failure.request_id) == (code, status, "mock-1")
    assert says in failure.message
    assert failure.message.startswith(f"DeepSeek answered HTTP {status}: ")


async def test_retry_after_is_read_in_seconds(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue("rate-limit", {"name": "rate-limit", "retry_after": "0.5"})
    assert (await failure_from(adapter)).retry_after_s == 2.0
    assert (await failure_from(adapter)).retry_after_s == 0.5


def test_retry_after_accepts_http_dates_and_ignores_nonsense() -> None:
    now = 1_700_000_000.0
    assert retry_after_s("Tue, 14 Nov 2023 22:13:30 GMT", now=now) == 10.0
    assert retry_after_s("Tue, 14 Nov 2023 22:13:00 GMT", now=now) == 0.0
    assert retry_after_s(" -3 ") == 0.0
    assert retry_after_s("soon") is None
    assert retry_after_s("") is None
    assert retry_after_s(None) is None
    assert (retry_after_s("Tue, 14 Nov 2100 22:13:30 GMT") or 0) > 1e9


async def test_other_statuses_keep_their_number(mock_server: MockServer) -> None:
    adapter = adapter_at(f"{mock_server.url}/nowhere")
    failure = await failure_from(adapter)
    await adapter.aclose()
    assert (failure.code, failure.status) == ("HTTP_404", 404)
    assert failure.message == "DeepSeek answered HTTP 404: 404: Not Found"


@pytest.mark.parametrize(
    ("status", "body", "code", "message"),
    [
        (403, b'{"error": {"message": "forbidden"}}', "AUTH", "forbidden"),
        (413, b"", "INVALID_REQUEST", "Request Entity Too Large"),
        (409, b'{"detail": "x"}', "HTTP_409", '{"detail": "x"}'),
    ],
)
async def test_status_classes_and_bodies_of_any_shape(
    status: int, body: bytes, code: str, message: str, raw_server: RawServer
) -> None:
    reason = {403: "Forbidden", 413: "Request Entity Too Large", 409: "Conflict"}[status]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 {status} {reason}\r\nX-DeepSeek-Request-Id: ds-1\r\n"
        writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    adapter = adapter_at(await raw_server(answer))
    failure = await failure_from(adapter)
    await adapter.aclose()
    assert (failure.code, failure.status, failure.request_id) == (code, status, "ds-1")
    assert failure.message.startswith(f"DeepSeek answered HTTP {status}: {message}")


async def test_a_refused_connection_is_a_transport_failure() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = adapter_at(f"http://127.0.0.1:{port}")
    failure = await failure_from(adapter)
    await adapter.aclose()
    assert failure.code == "TRANSPORT"
    assert failure.message.startswith(f"cannot reach DeepSeek at http://127.0.0.1:{port}")


async def test_no_response_headers_within_the_idle_timeout_is_a_timeout(
    raw_server: RawServer,
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up
        writer.close()

    url = await raw_server(silent)
    adapter = adapter_at(url, idle_timeout_s=0.2)
    failure = await failure_from(adapter)
    await adapter.aclose()
    assert failure.code == "TIMEOUT"
    assert failure.message == f"no answer from {url}/chat/completions within 0.2 s"


async def test_an_error_body_that_breaks_off_is_a_transport_failure(
    raw_server: RawServer,
) -> None:
    """The SDK lets this one escape unwrapped, straight from its HTTP stack."""

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\nshort")
        await writer.drain()
        writer.close()

    adapter = adapter_at(await raw_server(broken))
    failure = await failure_from(adapter)
    await adapter.aclose()
    assert failure.code == "TRANSPORT"
    assert "RemoteProtocolError" in failure.message


@pytest.mark.parametrize(
    ("scenario", "code", "message"),
    [
        ("disconnect", "STREAM_CLOSED", "the connection broke before [DONE]: "),
        ("missing-done", "STREAM_CLOSED", "the stream ended without [DONE]"),
        ("malformed-json", "MALFORMED_RESPONSE", "DeepSeek sent an event that is not JSON: "),
        ("error-event", "SERVER", "DeepSeek reported an error mid-stream: The server had"),
        ("stall", "TIMEOUT", "the stream made no progress for 0.5 s"),
        ("keep-alive-stall", "TIMEOUT", "the stream made no progress for 0.5 s"),
    ],
)
async def test_stream_faults_end_the_stream_after_what_streamed_before(
    scenario: str, code: str, message: str, mock_server: MockServer
) -> None:
    adapter = quick_adapter(mock_server)
    mock_server.queue(scenario)
    chunks = await collect(adapter)
    await adapter.aclose()
    failure = failure_of(chunks)
    assert (failure.code, failure.status) == (code, None)
    assert failure.message.startswith(message)
    assert chunks[:2] == [BlockStart(0, "text"), TextDelta(0, "Partial")]


async def test_a_rate_limit_error_object_in_the_stream_is_a_rate_limit(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    error = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    plain = {"error": "plain failure"}
    for payload, code, says in [(error, "RATE_LIMIT", "slow down"), (plain, "SERVER", "plain")]:
        mock_server.queue(Scenario("error", (f"data: {json.dumps(payload)}\n\n",)))
        failure = await failure_from(adapter)
        assert failure.code == code
        assert says in failure.message


async def test_a_missing_key_says_how_to_set_one_and_sends_nothing(
    mock_server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-is-not-deepseek")
    adapter = OpenAISdkAdapter(OpenAISdkConfig(base_url=mock_server.url))
    failure = await failure_from(adapter)
    assert failure.code == "AUTH"
    assert "DEEPSEEK_API_KEY" in failure.message and "[llm_openai_sdk]" in failure.message
    assert mock_server.requests == []


async def test_the_key_comes_from_the_environment_and_no_openai_account_header_is_sent(
    mock_server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-private")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-private")
    adapter = OpenAISdkAdapter(OpenAISdkConfig(base_url=mock_server.url))
    monkeypatch.delenv("DEEPSEEK_API_KEY")
    mock_server.queue("text")
    await collect(adapter)
    await adapter.aclose()
    headers = mock_server.requests[0].headers
    assert headers["Authorization"] == "Bearer sk-from-env"
    assert "OpenAI-Organization" not in headers and "OpenAI-Project" not in headers
    assert "sk-from-env" not in repr(adapter) and "sk-from-env" not in repr(adapter.config)


async def test_without_the_sdk_the_call_says_how_to_install_it(
    mock_server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now fails
    adapter = OpenAISdkAdapter(OpenAISdkConfig(base_url=mock_server.url, api_key="k"))
    failure = await failure_from(adapter)
    assert failure.code == "MISSING_DEPENDENCY"
    assert "pip install 'dsh-harness[openai]'" in failure.message
    assert "llm_deepseek adapter instead (deepseek-v4-flash)" in failure.message
    assert mock_server.requests == []
    assert adapter.unavailable(MODEL) == failure.message


def test_with_the_sdk_every_model_is_available() -> None:
    assert OpenAISdkAdapter(OpenAISdkConfig()).unavailable(MODEL) is None


async def test_an_exception_that_is_not_a_failure_of_the_call_propagates(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    """A bug (here: a tool schema that is not JSON) is not dressed up as a provider failure."""
    broken = ToolSchema("t", "d", {"type": "object", "default": {1, 2}})
    with pytest.raises(TypeError):
        await collect(adapter, attrs.evolve(HELLO, tools=(broken,)))
    assert stream_failure(RuntimeError("bug"), 1.0) is None


def slow_answer() -> Scenario:
    return attrs.evolve(reply(text="word " * 200), interval_s=0.02)


async def test_cancelling_the_consuming_task_closes_the_response_and_propagates(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(slow_answer())
    first = asyncio.Event()
    received: list[StreamChunk] = []

    async def consume() -> None:
        async for chunk in adapter.stream(HELLO):
            received.append(chunk)
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()
    assert not any(isinstance(chunk, Finish) for chunk in received)


async def test_a_cancellation_thrown_into_the_stream_ends_it_aborted(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(slow_answer())
    stream: Any = adapter.stream(HELLO)
    assert await anext(stream) == BlockStart(0, "text")
    assert await stream.athrow(asyncio.CancelledError()) == Finish(FinishAborted(ABORTED))
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()


async def test_closing_the_stream_early_closes_the_response(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(slow_answer())
    stream: Any = adapter.stream(HELLO)
    assert await anext(stream) == BlockStart(0, "text")
    await stream.aclose()
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()


async def test_the_client_is_made_lazily_reused_and_closed(
    adapter: OpenAISdkAdapter, mock_server: MockServer
) -> None:
    strict = attrs.evolve(HELLO, tools=(ToolSchema("t", "d", strict=True),))
    mock_server.queue("text", "text", "text")
    await collect(adapter)
    client = adapter._client
    await collect(adapter, strict)
    await collect(adapter, strict)
    assert adapter._client is client and adapter._beta is not None
    assert [r.path for r in mock_server.requests][1:] == ["/beta/chat/completions"] * 2
    await adapter.aclose()
    await adapter.aclose()
    assert adapter._client is None
    mock_server.queue("text")
    assert len(await collect(adapter)) == 8


def test_model_ids_carry_the_sdk_prefix_and_plain_requests_go_to_the_base_url() -> None:
    adapter = OpenAISdkAdapter(OpenAISdkConfig(models=("deepseek-x",)))
    assert adapter.model_ids() == ["deepseek-sdk/deepseek-x"]
    request = LlmRequest(MODEL, ())
    assert adapter.url_for(request) == "https://api.deepseek.com"


class BuggyStream:
    """An SDK stream whose iteration hits a bug (not a failure of the call)."""

    closed = False
    response = SimpleNamespace(headers={"content-type": "text/event-stream"})

    def __aiter__(self) -> BuggyStream:
        return self

    async def __anext__(self) -> Any:
        raise RuntimeError("bug")

    async def close(self) -> None:
        self.closed = True


async def test_a_bug_while_streaming_propagates_and_the_response_is_closed() -> None:
    from dsh_plugins.llm_openai_sdk.completion import stream_completion
    from dsh_plugins.llm_openai_sdk.deadline import Deadline

    response = BuggyStream()

    async def create(**arguments: Any) -> BuggyStream:
        return response

    client: Any = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    with pytest.raises(RuntimeError, match="bug"):
        async for _ in stream_completion(client, {}, "http://x", Deadline(1.0, 1.0)):
            pass
    assert response.closed


def stack_error(name: str) -> Exception:
    """An exception as the SDK's HTTP stack raises it (older SDKs do not wrap them)."""
    error_class = type(name, (Exception,), {"__module__": "httpx._exceptions"})
    return error_class("from the stack")  # type: ignore[no-any-return]


def test_errors_of_the_http_stack_are_recognised_unwrapped() -> None:
    timeout = stream_failure(stack_error("ReadTimeout"), 1.0)
    broken = stream_failure(stack_error("RemoteProtocolError"), 1.0)
    assert timeout is not None and timeout.code == "TIMEOUT"
    assert broken is not None and broken.code == "STREAM_CLOSED"
    assert broken.message == (
        "the connection broke before [DONE]: RemoteProtocolError: from the stack"
    )
