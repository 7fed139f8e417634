"""One streamed completion through the SDK, as StreamChunks, every failure in band.

Imported with the SDK (see :mod:`.sdk`). The idle deadline is enforced here, per chunk: the SDK
swallows DeepSeek's keep-alive comments, so they can never extend it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from openai import AsyncStream
from openai.types.chat import ChatCompletionChunk

from dsh.chunks import Finish, FinishError, StreamChunk
from dsh_plugins.llm_openai_sdk.failures import request_failure, stream_failure
from dsh_plugins.llm_openai_sdk.sdk import DeepSeekOpenAI
from dsh_plugins.llm_openai_sdk.translate import ChunkMapper

__all__ = ["stream_completion"]


async def stream_completion(
    client: DeepSeekOpenAI, arguments: dict[str, Any], url: str, idle_timeout_s: float
) -> AsyncGenerator[StreamChunk, None]:
    """Call ``chat.completions.create(**arguments)`` and stream the answer's chunks; a failure
    ends the stream with ``finish{error}``. The response is closed however the stream ends."""
    try:
        async with asyncio.timeout(idle_timeout_s):
            response = await client.chat.completions.create(**arguments)
    except Exception as exc:
        failure = request_failure(exc, url, idle_timeout_s)
        if failure is None:
            raise
        yield Finish(FinishError(failure))
        return
    try:
        async with aclosing(_answer(response, idle_timeout_s)) as chunks:
            async for chunk in chunks:
                yield chunk
    finally:
        await response.close()


async def _answer(
    response: AsyncStream[ChatCompletionChunk], idle_timeout_s: float
) -> AsyncGenerator[StreamChunk, None]:
    """The StreamChunks of the SDK's parsed chunks, each awaited within the idle deadline."""
    mapper = ChunkMapper()
    parsed = aiter(response)
    try:
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    chunk = await anext(parsed)
            except StopAsyncIteration:
                break
            for out in mapper.feed(chunk):
                yield out
        for out in mapper.close():
            yield out
    except Exception as exc:
        failure = stream_failure(exc, idle_timeout_s)
        if failure is None:
            raise
        yield Finish(FinishError(failure))
