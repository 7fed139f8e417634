"""The official SDKs as reference parsers: what ``openai`` and ``anthropic`` make of an answer.

The one place in dsh's tests that reaches into the SDKs' streaming machinery. Each referee
replays a captured answer (:class:`Served`: the status, headers and exact body bytes the mock
server sent, and how the body ended) into the SDK's own client through an in-memory transport,
so the SDK reads it exactly as it reads a live answer: its SSE decoder, its chunk or event types
and its accumulator —

- ``openai``: ``AsyncOpenAI.chat.completions.create(stream=True)`` (``openai._streaming``'s
  ``SSEDecoder`` → ``ChatCompletionChunk``), accumulated by
  ``openai.lib.streaming.chat.ChatCompletionStreamState``;
- ``anthropic``: ``AsyncAnthropic.messages.stream()`` (``anthropic._streaming``'s ``SSEDecoder``
  → ``RawMessageStreamEvent`` → ``anthropic.lib.streaming._messages.accumulate_event``), read
  from its ``current_message_snapshot``.

The result is a :class:`Reading`: what the SDK accumulated (also when it raised midway), the
finish or stop reason it read, the usage in dsh's disjoint counts, and what it raised. dsh's
runtime never imports these SDKs; nothing in ``dsh/`` imports this module.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Literal

import anthropic
import httpx2
import openai
from anthropic.types import TextBlock, ThinkingBlock, ToolUseBlock
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.completion_usage import CompletionUsage

from dsh.values._chunks import TokenUsage

__all__ = [
    "Ending",
    "Reading",
    "Served",
    "StillOpen",
    "ToolCallRead",
    "arguments_json",
    "read_anthropic",
    "read_openai",
]

Ending = Literal["close", "disconnect", "stall", "keep-alive"]
"""How an answer's body ended: ``close`` (cleanly), ``disconnect`` (the connection dropped in
the middle of the body), ``stall`` (silence, the connection left open), ``keep-alive``
(``: keep-alive`` comments forever, the connection left open)."""

#: Headers of the connection, not of the answer: the replay does not carry them.
_HOP_BY_HOP = {"transfer-encoding", "content-length", "connection", "keep-alive", "date", "server"}
_MODEL = "deepseek-flash"
_KEY = "sk-referee"


@dataclass(frozen=True)
class Served:
    """An answer as the mock server sent it: status, headers, the body's bytes, its ending."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    ending: Ending


class StillOpen(Exception):
    """Raised by the replay where a live answer would keep the client reading forever
    (keep-alive comments and never another event): the SDK was still waiting."""


@dataclass(frozen=True)
class ToolCallRead:
    """A tool call as the SDK read it; ``arguments`` as the SDK keeps them (the JSON text for
    ``openai``, the parsed input for ``anthropic``)."""

    id: str
    name: str
    arguments: object


@dataclass(frozen=True)
class Reading:
    """What an official SDK made of an answer.

    ``text``, ``reasoning`` and ``tool_calls``: what it accumulated (up to the failure, if it
    raised); ``signatures``: each thinking block's signature (Messages only); ``finish``: the
    finish (``openai``) or stop (``anthropic``) reason it read, ``None`` if none; ``usage``:
    the usage it read, in dsh's disjoint counts; ``raised``: the type of what it raised (``None``:
    it accepted the answer), ``status`` that error's HTTP status if it has one; ``waiting``:
    the answer kept the SDK reading forever (:class:`StillOpen`); ``chunks``: how many chunks
    (events) the SDK yielded."""

    text: str = ""
    reasoning: str = ""
    signatures: tuple[str, ...] = ()
    tool_calls: tuple[ToolCallRead, ...] = ()
    finish: str | None = None
    usage: TokenUsage | None = None
    raised: str | None = None
    status: int | None = None
    waiting: bool = False
    chunks: int = 0


class _Body(httpx2.AsyncByteStream):
    """The captured body, then its ending as a client's transport reports it."""

    def __init__(self, served: Served) -> None:
        self.served = served

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.served.body:
            yield self.served.body
        if self.served.ending == "disconnect":
            raise httpx2.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        if self.served.ending == "stall":
            raise httpx2.ReadTimeout("the server sent nothing more")
        if self.served.ending == "keep-alive":
            raise StillOpen


def _http_client(served: Served) -> httpx2.AsyncClient:
    headers = [(k, v) for k, v in served.headers if k.lower() not in _HOP_BY_HOP]

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(served.status, headers=headers, stream=_Body(served))

    return httpx2.AsyncClient(transport=httpx2.MockTransport(answer))


def _failure(exc: Exception) -> tuple[str, int | None]:
    status = (
        exc.status_code
        if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError)
        else None
    )
    return type(exc).__name__, status


# -- openai ---------------------------------------------------------------------------------


def _openai_usage(usage: CompletionUsage | None) -> TokenUsage | None:
    """DeepSeek counts cache hits inside ``prompt_tokens`` (``prompt_cache_hit_tokens``, or the
    OpenAI-style ``prompt_tokens_details.cached_tokens``); dsh's counts are disjoint."""
    if usage is None:
        return None
    extra = usage.model_extra or {}
    hits = extra.get("prompt_cache_hit_tokens")
    if hits is None:
        details = usage.prompt_tokens_details
        hits = (details.cached_tokens if details is not None else None) or 0
    reasoning = usage.completion_tokens_details
    return TokenUsage(
        input_tokens=usage.prompt_tokens - int(hits),
        output_tokens=usage.completion_tokens,
        cache_read_tokens=int(hits),
        reasoning_tokens=(reasoning.reasoning_tokens if reasoning is not None else None) or 0,
    )


async def read_openai(served: Served) -> Reading:
    """What ``openai`` makes of ``served``: ``create(stream=True)``, every chunk through
    ``ChatCompletionStreamState``; on a failure, what it had accumulated by then."""
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    usage: CompletionUsage | None = None
    chunks = 0
    raised: tuple[str, int | None] | None = None
    waiting = accumulated = False
    async with (
        _http_client(served) as http,
        openai.AsyncOpenAI(
            api_key=_KEY, base_url="http://referee.invalid", http_client=http, max_retries=0
        ) as client,
    ):
        try:
            stream = await client.chat.completions.create(
                model=_MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async for chunk in stream:
                chunks += 1
                usage = chunk.usage or usage
                state.handle_chunk(chunk)
                accumulated = True
        except StillOpen:
            waiting = True
        except Exception as exc:
            raised = _failure(exc)
    reading = Reading(usage=_openai_usage(usage), waiting=waiting, chunks=chunks)
    if raised is not None:
        reading = replace(reading, raised=raised[0], status=raised[1])
    if not accumulated or not state.current_completion_snapshot.choices:
        return reading
    choice = state.current_completion_snapshot.choices[0]
    message = choice.message
    extra = message.model_extra or {}
    calls = tuple(
        ToolCallRead(call.id, call.function.name, call.function.arguments)
        for call in message.tool_calls or ()
    )
    return replace(
        reading,
        text=message.content or "",
        reasoning=str(extra.get("reasoning_content") or ""),
        tool_calls=calls,
        finish=choice.finish_reason,
    )


# -- anthropic ------------------------------------------------------------------------------


async def read_anthropic(served: Served) -> Reading:
    """What ``anthropic`` makes of ``served``: ``messages.stream()`` read to its end, the
    message its accumulator built (as far as it got, if it raised)."""
    events = 0
    raised: tuple[str, int | None] | None = None
    waiting = False
    snapshot: anthropic.types.Message | None = None
    async with (
        _http_client(served) as http,
        anthropic.AsyncAnthropic(
            api_key=_KEY, base_url="http://referee.invalid", http_client=http, max_retries=0
        ) as client,
    ):
        try:
            async with client.messages.stream(
                model=_MODEL, max_tokens=4096, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                try:
                    async for _event in stream:
                        events += 1
                finally:
                    snapshot = _snapshot(stream)
        except StillOpen:
            waiting = True
        except Exception as exc:
            raised = _failure(exc)
    reading = Reading(waiting=waiting, chunks=events)
    if raised is not None:
        reading = replace(reading, raised=raised[0], status=raised[1])
    if snapshot is None:
        return reading
    thinking = [b for b in snapshot.content if isinstance(b, ThinkingBlock)]
    usage = snapshot.usage
    return replace(
        reading,
        text="".join(b.text for b in snapshot.content if isinstance(b, TextBlock)),
        reasoning="".join(b.thinking for b in thinking),
        signatures=tuple(b.signature for b in thinking),
        tool_calls=tuple(
            ToolCallRead(b.id, b.name, b.input)
            for b in snapshot.content
            if isinstance(b, ToolUseBlock)
        ),
        finish=snapshot.stop_reason,
        usage=TokenUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_input_tokens or 0,
            cache_write_tokens=usage.cache_creation_input_tokens or 0,
        ),
    )


def _snapshot(stream: anthropic.AsyncMessageStream) -> anthropic.types.Message | None:
    """The message accumulated so far; ``None`` before ``message_start`` (where the SDK's
    ``current_message_snapshot`` asserts)."""
    try:
        return stream.current_message_snapshot
    except AssertionError:
        return None


def arguments_json(arguments: str) -> object:
    """dsh's arguments text as the ``anthropic`` SDK keeps them: parsed (``{}`` when empty)."""
    return json.loads(arguments) if arguments else {}
