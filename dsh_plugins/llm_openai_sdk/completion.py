"""One streamed completion through the SDK's stream helper, as StreamChunks, every failure in
band.

``chat.completions.create(stream=True)`` sends the request and returns the SDK's raw stream;
the SDK's stream helper, ``AsyncChatCompletionStream``, wraps it (the object its
``chat.completions.stream()`` context manager yields; built here directly because that method
is ``client.beta.chat.completions.stream`` in older SDKs, which refuse any tool that is not
strict) and turns it into typed events over an accumulated snapshot; :class:`~.events.HelperEvents`
maps them. Each event is awaited under the call's :class:`~.deadline.Deadline`, which the
decoder moves as the wire progresses. Imported with the SDK (see :mod:`.sdk`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import openai
from openai import AsyncStream
from openai.lib.streaming.chat import AsyncChatCompletionStream
from openai.types.chat import ChatCompletionChunk

from dsh.plugin import Finish, FinishError, LlmFailure, StreamChunk
from dsh_plugins.llm_openai_sdk.deadline import CURRENT, Deadline
from dsh_plugins.llm_openai_sdk.failures import (
    QUOTE_CHARS,
    broke_off,
    request_failure,
    stream_failure,
    unstreamed_failure,
)
from dsh_plugins.llm_openai_sdk.sdk import DeepSeekOpenAI
from dsh_plugins.llm_openai_sdk.stream import HelperEvents

__all__ = ["stream_completion"]

EVENT_STREAM = "text/event-stream"
# How much of a body that is not an event stream is read: plenty for its message, and a huge
# page is not read whole.
_BODY_READ_LIMIT = 64 * QUOTE_CHARS
# "Not given" is ``openai.omit`` in current SDKs and ``openai.NOT_GIVEN`` in older ones; the
# helper takes either.
_NOT_GIVEN: Any = getattr(openai, "omit", openai.NOT_GIVEN)


async def stream_completion(
    client: DeepSeekOpenAI,
    params: dict[str, Any],
    url: str,
    deadline: Deadline,
) -> AsyncGenerator[StreamChunk, None]:
    """Call ``chat.completions.create(**params)`` and stream the answer's chunks; a failure
    ends the stream with ``finish{error}``. The response is closed however the stream ends."""
    raw = await _send(client, params, url, deadline)
    if isinstance(raw, LlmFailure):
        yield Finish(FinishError(raw))
        return
    try:
        failure = await _not_a_stream(raw)
        if failure is not None:
            yield Finish(FinishError(failure))
            return
        deadline.headers_arrived()
        async with aclosing(_answer(raw, deadline)) as chunks:
            async for chunk in chunks:
                yield chunk
    finally:
        await raw.close()


async def _send(
    client: DeepSeekOpenAI, params: dict[str, Any], url: str, deadline: Deadline
) -> AsyncStream[ChatCompletionChunk] | LlmFailure:
    """The raw stream once the headers are in, or why there is none."""
    token = CURRENT.set(deadline)
    try:
        async with asyncio.timeout(deadline.idle_timeout_s):
            stream: AsyncStream[ChatCompletionChunk] = await client.chat.completions.create(
                **params
            )
            return stream
    except Exception as exc:
        failure = request_failure(exc, url, deadline.idle_timeout_s)
        if failure is None:
            raise
        return failure
    finally:
        CURRENT.reset(token)


async def _not_a_stream(raw: AsyncStream[ChatCompletionChunk]) -> LlmFailure | None:
    """The failure of an HTTP 200 that is not an event stream (the SDK would read it as one
    that ended at once), with what its body said; ``None`` for an event stream."""
    response = raw.response
    content_type = response.headers.get("content-type", "")
    if content_type.partition(";")[0].strip().lower() == EVENT_STREAM:
        return None
    body = b""
    try:
        async for data in response.aiter_bytes():
            body += data
            if len(body) >= _BODY_READ_LIMIT:
                break
    except Exception as exc:
        if not broke_off(exc):
            raise
    return unstreamed_failure(content_type, response.headers, body)


async def _answer(
    raw: AsyncStream[ChatCompletionChunk], deadline: Deadline
) -> AsyncGenerator[StreamChunk, None]:
    """The StreamChunks of the helper's events, each awaited within the deadline."""
    helper: AsyncChatCompletionStream[object] = AsyncChatCompletionStream(
        raw_stream=raw, response_format=_NOT_GIVEN, input_tools=_NOT_GIVEN
    )
    mapper = HelperEvents()
    events = aiter(helper)
    try:
        while True:
            try:
                event = await deadline.wait(anext(events))
            except StopAsyncIteration:
                break
            for chunk in mapper.feed(event):
                yield chunk
        for chunk in mapper.close():
            yield chunk
    except Exception as exc:
        failure = stream_failure(exc, deadline.idle_timeout_s)
        if failure is None:
            raise
        yield Finish(FinishError(failure))
