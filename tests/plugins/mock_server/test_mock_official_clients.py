"""The official clients against the mock server: every scenario of its catalogue, through
``openai.AsyncOpenAI`` on the chat-completions endpoint and ``anthropic.AsyncAnthropic`` on
the Messages endpoint (``/anthropic``), each configured as DeepSeek's docs say (base URL, API
key, nothing else).

A scenario that answers must be accepted; a fault must fail as the client fails on such an
answer (:data:`EXPECTED`) — or keep the client waiting, where the answer is keep-alives
forever. A scenario a real client rejects where it should not is a mock bug. An answer that
calls tools must be continuable: the client sends the assistant message back as it received it,
with a result for every call, and the mock must accept that request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anthropic
import httpx2
import openai
import pytest
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam, ToolUseBlock
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from dsh.testing.mockserver import SCENARIOS, MockServer
from dsh.testing.mockserver.catalogue import ScenarioSpec
from dsh.testing.mockserver.wire import KEEP_ALIVE

KEY = "sk-official-client"
MODEL = "deepseek-flash"
#: How long anything here may take before the test gives up (the suite must never hang).
DEADLINE_S = 20.0
#: The read timeout for the silent stall (the clients' default is 10 minutes).
_STALL_READ_S = 0.5
_READ_S = DEADLINE_S
#: Keep-alive comments after which a client that has neither raised nor finished is waiting.
_KEEP_ALIVES = 5
_PROMPT = "hi"
#: Specs for scenarios whose default is a benchmark's size: the same shape, smaller.
_SMALL: dict[str, ScenarioSpec] = {
    "long-text": {"name": "long-text", "chunks": 40},
    "deltas": {"name": "deltas", "chunks": 40},
}
#: The tools the clients offer: every function the catalogue's answers call, with a schema.
_FUNCTIONS: dict[str, dict[str, Any]] = {
    "echo": {"text": {"type": "string"}},
    "get_current_weather": {"location": {"type": "string"}, "format": {"type": "string"}},
    "weather": {"city": {"type": "string"}},
    "get_date": {},
    "get_time": {"tz": {"type": "string"}},
}


def _schema(properties: dict[str, Any]) -> dict[str, object]:
    return {"type": "object", "properties": properties}


Client = Literal["openai", "anthropic"]
Outcome = Literal["answers", "waits", "silent"]
"""``answers``: accepted, with a finish (stop) reason; ``waits``: the client keeps reading
(keep-alives forever); ``silent``: HTTP 200 that is not an event stream, which the ``openai``
client reads as a stream without events, and without an error."""

_NOT_A_STREAM = ("json-error-200", "completion-200", "html-200", "empty-200")

#: What each client does with each scenario that does not simply answer.
EXPECTED: dict[Client, dict[str, Outcome | type[BaseException]]] = {
    "openai": {
        "bad-request": openai.BadRequestError,
        "context-length": openai.BadRequestError,
        "auth": openai.AuthenticationError,
        "insufficient-balance": openai.APIStatusError,
        "unprocessable": openai.UnprocessableEntityError,
        "rate-limit": openai.RateLimitError,
        "server-error": openai.InternalServerError,
        "overloaded": openai.InternalServerError,
        "disconnect": openai.APIConnectionError,
        "stall": openai.APITimeoutError,
        "keep-alive-stall": "waits",
        "queued-stall": "waits",
        "malformed-json": json.JSONDecodeError,
        "error-event": openai.APIError,
        # An empty event after an `id:` field (wire-audit §7a): the SDK parses it as JSON.
        "framing-fields": json.JSONDecodeError,
        "invalid-utf8": UnicodeDecodeError,
        **dict.fromkeys(_NOT_A_STREAM, "silent"),
    },
    "anthropic": {
        "bad-request": anthropic.BadRequestError,
        "context-length": anthropic.BadRequestError,
        "auth": anthropic.AuthenticationError,
        "insufficient-balance": anthropic.PaymentRequiredError,
        "unprocessable": anthropic.UnprocessableEntityError,
        "rate-limit": anthropic.RateLimitError,
        "server-error": anthropic.InternalServerError,
        "overloaded": anthropic.ServiceUnavailableError,
        "disconnect": httpx2.RemoteProtocolError,
        "stall": httpx2.ReadTimeout,
        "keep-alive-stall": "waits",
        "queued-stall": "waits",
        "malformed-json": json.JSONDecodeError,
        # An `error` event mid-stream (overloaded_error, api_error), raised with the answer's
        # status, 200.
        "error-event": anthropic.APIStatusError,
        "insufficient-resource": anthropic.APIStatusError,
        "invalid-utf8": UnicodeDecodeError,
        # No message_start: the stream helper has no message, and asserts.
        **dict.fromkeys(_NOT_A_STREAM, AssertionError),
    },
}


@dataclass
class Received:
    """What a client made of one answer: the finish (stop) reason, and the next request's
    messages if it called tools (the conversation so far, the assistant message as received,
    a result for every call)."""

    finish: str | None
    follow_up: list[Any] | None = None


class _Watch(httpx2.AsyncHTTPTransport):
    """The client's transport, counting the keep-alive comments its answers bring."""

    def __init__(self) -> None:
        super().__init__()
        self.keep_alives = 0
        self.waiting = asyncio.Event()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _Counted(stream, self)
        return response


class _Counted(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, watch: _Watch) -> None:
        self.inner = inner
        self.watch = watch

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self.inner:
            self.watch.keep_alives += piece.count(KEEP_ALIVE.strip().encode())
            if self.watch.keep_alives >= _KEEP_ALIVES:
                self.watch.waiting.set()
            yield piece

    async def aclose(self) -> None:
        await self.inner.aclose()


def _timeout(scenario: str) -> httpx2.Timeout:
    return httpx2.Timeout(_STALL_READ_S if scenario == "stall" else _READ_S, connect=5.0)


# -- openai ---------------------------------------------------------------------------------

_OPENAI_TOOLS: list[ChatCompletionToolParam] = [
    {"type": "function", "function": {"name": name, "parameters": _schema(properties)}}
    for name, properties in _FUNCTIONS.items()
]


async def _openai_turn(
    client: openai.AsyncOpenAI, messages: list[ChatCompletionMessageParam]
) -> Received:
    """One streamed request; the chunks accumulated by the SDK's own stream state."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=_OPENAI_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks: list[ChatCompletionChunk] = [chunk async for chunk in stream]
    finishes = [c.finish_reason for chunk in chunks for c in chunk.choices or () if c.finish_reason]
    if not chunks:
        return Received(None)
    if finishes[-1:] != ["tool_calls"]:
        return Received(finishes[-1] if finishes else None)
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    message = state.get_final_completion().choices[0].message
    # Sent back as received (reasoning_content included, as DeepSeek's docs do it).
    assistant: Any = message.model_dump(exclude_none=True, exclude={"parsed"})
    for call in assistant.get("tool_calls", ()):
        call["function"].pop("parsed_arguments", None)
    results: list[ChatCompletionMessageParam] = [
        {"role": "tool", "tool_call_id": call.id, "content": "ok"}
        for call in message.tool_calls or ()
    ]
    return Received("tool_calls", [*messages, assistant, *results])


async def _openai(server: MockServer, scenario: str, watch: _Watch) -> Received:
    async with (
        httpx2.AsyncClient(transport=watch, timeout=_timeout(scenario)) as http,
        openai.AsyncOpenAI(
            api_key=KEY, base_url=server.url, http_client=http, max_retries=0
        ) as client,
    ):
        first = await _openai_turn(client, [{"role": "user", "content": _PROMPT}])
        if first.follow_up is not None:
            await _openai_turn(client, first.follow_up)
        return first


# -- anthropic ------------------------------------------------------------------------------

_ANTHROPIC_TOOLS: list[ToolParam] = [
    {"name": name, "input_schema": _schema(properties)} for name, properties in _FUNCTIONS.items()
]


async def _anthropic_turn(
    client: anthropic.AsyncAnthropic, messages: list[MessageParam]
) -> Received:
    """One ``messages.stream()``, read to its final message."""
    async with client.messages.stream(
        model=MODEL, max_tokens=4096, messages=messages, tools=_ANTHROPIC_TOOLS
    ) as stream:
        message = await stream.get_final_message()
    if message.stop_reason != "tool_use":
        return Received(message.stop_reason)
    results: list[ToolResultBlockParam] = [
        {"type": "tool_result", "tool_use_id": block.id, "content": "ok"}
        for block in message.content
        if isinstance(block, ToolUseBlock)
    ]
    # Sent back as received: every block, thinking blocks with their signatures.
    follow_up: list[MessageParam] = [
        *messages,
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": results},
    ]
    return Received("tool_use", follow_up)


async def _anthropic(server: MockServer, scenario: str, watch: _Watch) -> Received:
    async with (
        httpx2.AsyncClient(transport=watch, timeout=_timeout(scenario)) as http,
        anthropic.AsyncAnthropic(
            api_key=KEY, base_url=f"{server.url}/anthropic", http_client=http, max_retries=0
        ) as client,
    ):
        first = await _anthropic_turn(client, [{"role": "user", "content": _PROMPT}])
        if first.follow_up is not None:
            await _anthropic_turn(client, first.follow_up)
        return first


_CLIENTS: dict[Client, Callable[[MockServer, str, _Watch], Awaitable[Received]]] = {
    "openai": _openai,
    "anthropic": _anthropic,
}


# -- the tests ------------------------------------------------------------------------------


def test_the_expectations_name_only_scenarios_of_the_catalogue() -> None:
    for expected in EXPECTED.values():
        assert set(expected) <= set(SCENARIOS)


async def _waits(run: Awaitable[Received], watch: _Watch) -> str:
    """Run the client until it has read keep-alives enough with neither an error nor an end:
    it is waiting (then stop it); else say what it did."""
    task = asyncio.ensure_future(run)
    waiting = asyncio.ensure_future(watch.waiting.wait())
    try:
        await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
        ended = task.done()
    finally:
        task.cancel()
        waiting.cancel()
        outcome, _ = await asyncio.gather(task, waiting, return_exceptions=True)
    return f"it did not wait: {outcome!r}" if ended else "waits"


def _cases() -> list[object]:
    return [
        pytest.param(client, name, id=f"{client}-{name}")
        for client in ("openai", "anthropic")
        for name in SCENARIOS
    ]


@pytest.mark.parametrize(("client", "scenario"), _cases())
async def test_the_official_client_takes_the_scenario(client: Client, scenario: str) -> None:
    """The client answers, fails or waits as :data:`EXPECTED` says; an answer that called
    tools is continued, and the mock accepts the next request."""
    expected = EXPECTED[client].get(scenario, "answers")
    watch = _Watch()
    async with MockServer(api_key=KEY) as server, asyncio.timeout(DEADLINE_S):
        server.queue(_SMALL.get(scenario, scenario))
        run = _CLIENTS[client](server, scenario, watch)
        if expected == "waits":
            assert await _waits(run, watch) == "waits"
            return
        if isinstance(expected, type):
            with pytest.raises(expected) as raised:
                await run
            # The exact class, not a subclass that means something else.
            assert type(raised.value) is expected, raised.value
            return
        received = await run
        requests = server.requests
    if expected == "silent":
        assert received == Received(None)
        return
    assert received.finish is not None, f"{scenario}: no finish reason"
    if received.follow_up is not None:
        # The mock accepted the next request (or the client would have raised).
        assert len(requests) == 2


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


async def test_the_messages_endpoint_takes_a_bearer_key_as_deepseek_does() -> None:
    """DeepSeek's Messages endpoint takes the key as ``x-api-key`` or ``Authorization:
    Bearer``; ``Authorization`` wins when both come. The ``anthropic`` client sends Bearer."""
    watch = _Watch()
    async with MockServer(api_key=KEY) as server, asyncio.timeout(DEADLINE_S):
        server.queue("text")
        await _anthropic(server, "text", watch)
        sent = _headers(server.requests[0].headers)
    assert sent["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in sent
