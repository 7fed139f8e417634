"""Helpers: run events through the translator alone, or a request through the adapter."""

from __future__ import annotations

import json
from typing import Any

from dsh.llm._sse import SseParser
from dsh.testing.mockserver import Scenario
from dsh.testing.mockserver.wire import frame_bytes
from dsh.values._chunks import StreamChunk
from dsh.values._content import Message, Text
from dsh.values._request import LlmRequest
from dsh_plugins.llm_anthropic import EventTranslator, MessagesAdapter

HELLO = LlmRequest("deepseek-anthropic/deepseek-flash", (Message("user", (Text("hi"),)),))


def translate(*events: Any) -> list[StreamChunk]:
    """The chunks of some decoded events."""
    translator = EventTranslator()
    out: list[StreamChunk] = []
    for event in events:
        out += translator.feed(event)
    return out


def translate_frames(scenario: Scenario, pieces: list[int] | None = None) -> list[StreamChunk]:
    """The chunks of a Messages-format scenario's bytes, fed in pieces of the given sizes (the
    rest at once), without HTTP; pings skipped as the adapter skips them."""
    data = frame_bytes("".join(scenario.frames))
    cuts: list[bytes] = []
    for size in pieces or ():
        cuts.append(data[:size])
        data = data[size:]
    cuts.append(data)
    parser, translator = SseParser(), EventTranslator()
    out: list[StreamChunk] = []
    for cut in cuts:
        for event in parser.feed(cut):
            if event.event != "ping":
                out += translator.feed(json.loads(event.data))
    assert translator.done
    return out


def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(reason: str | None, **usage: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage}


MESSAGE_START = {
    "type": "message_start",
    "message": {"usage": {"input_tokens": 10, "output_tokens": 1}},
}
MESSAGE_STOP = {"type": "message_stop"}


async def collect(adapter: MessagesAdapter, request: LlmRequest = HELLO) -> list[StreamChunk]:
    return [chunk async for chunk in adapter.stream(request)]


async def collect_into(
    received: list[StreamChunk], adapter: MessagesAdapter, request: LlmRequest = HELLO
) -> None:
    async for chunk in adapter.stream(request):
        received.append(chunk)
