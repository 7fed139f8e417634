"""The SDK client set up for DeepSeek: the [DONE] check on its event decoder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh_plugins.llm_openai_sdk.sdk import MissingDone, make_client


class Event:
    def __init__(self, data: str) -> None:
        self.data = data


class Decoder:
    """Stands in for the SDK's decoder: one event per byte string."""

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[Event]:
        async for data in iterator:
            yield Event(data.decode())


async def chunks(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def events_of(*items: bytes) -> list[str]:
    client = make_client("http://127.0.0.1:9", "k", 1.0, 1.0)
    decoder: Any = client._make_sse_decoder()
    decoder._decoder = Decoder()
    try:
        return [event.data async for event in decoder.aiter_bytes(chunks(*items))]
    finally:
        await client.close()


async def test_a_stream_read_past_done_ends_normally() -> None:
    assert await events_of(b"{}", b"[DONE]", b"after") == ["{}", "[DONE]", "after"]


async def test_a_stream_that_ends_before_done_raises() -> None:
    with pytest.raises(MissingDone):
        await events_of(b"{}", b"{}")
