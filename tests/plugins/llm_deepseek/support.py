"""Helpers for the DeepSeek adapter tests: run a scenario through the translator alone, or
through the adapter over HTTP, and build agents on the adapter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dsh.llm._sse import SseParser
from dsh.testing.mockserver import MockServer, Scenario
from dsh.testing.mockserver.wire import frame_bytes
from dsh.values._chunks import StreamChunk
from dsh.values._content import Message, Text
from dsh.values._events import AssistantChunk, SessionEvent, TurnEnd, TurnEndReason
from dsh.values._request import LlmRequest
from dsh_plugins.llm_deepseek import ChunkTranslator, DeepSeekAdapter, DeepSeekConfig

HELLO = LlmRequest("deepseek-v4-flash", (Message("user", (Text("hi"),)),))


def translate(scenario: Scenario) -> list[StreamChunk]:
    """The chunks the translator makes of a scenario's frames, without HTTP."""
    parser, translator = SseParser(), ChunkTranslator()
    out: list[StreamChunk] = []
    for frame in scenario.frames:
        for event in parser.feed(frame_bytes(frame)):
            out += translator.feed(json.loads(event.data))
    assert parser.done
    return out + translator.done()


def translate_payloads(*payloads: Any) -> list[StreamChunk]:
    """The chunks of some chunk payloads followed by ``[DONE]``."""
    translator = ChunkTranslator()
    out: list[StreamChunk] = []
    for payload in payloads:
        out += translator.feed(payload)
    return out + translator.done()


def choice(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    """A minimal chunk payload with one choice."""
    body: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if delta is not None:
        body["delta"] = delta
    return {"choices": [body]}


async def collect(adapter: DeepSeekAdapter, request: LlmRequest = HELLO) -> list[StreamChunk]:
    return [chunk async for chunk in adapter.stream(request)]


async def collect_into(
    received: list[StreamChunk], adapter: DeepSeekAdapter, request: LlmRequest = HELLO
) -> None:
    """Like :func:`collect`, keeping what arrived before a failure in ``received``."""
    async for chunk in adapter.stream(request):
        received.append(chunk)


def quick_adapter(server: MockServer, idle_timeout_s: float = 0.5) -> DeepSeekAdapter:
    """An adapter whose idle timeout is short, for stall tests: the stall itself never ends, so
    only the deadline stops it, and it leaves the headers and the partial answer before the
    stall time to arrive on a loaded machine (50 ms did not)."""
    config = DeepSeekConfig(base_url=server.url, api_key="k", idle_timeout_s=idle_timeout_s)
    return DeepSeekAdapter(config)


def turn_ends(events: Sequence[SessionEvent]) -> list[TurnEndReason]:
    return [e.data.reason for e in events if isinstance(e.data, TurnEnd)]


def chunks_of_turn(events: Sequence[SessionEvent], turn: int) -> list[StreamChunk]:
    return [
        e.data.chunk for e in events if isinstance(e.data, AssistantChunk) and e.data.turn == turn
    ]
