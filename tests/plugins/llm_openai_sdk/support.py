"""Helpers for the SDK adapter tests."""

from __future__ import annotations

from collections.abc import Sequence

from dsh.testing.mockserver import MockServer
from dsh.values._chunks import Finish, FinishError, LlmFailure, StreamChunk
from dsh.values._content import Message, Text
from dsh.values._events import SessionEvent, TurnEnd, TurnEndReason
from dsh.values._request import LlmRequest
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter, OpenAISdkConfig

MODEL = "deepseek-sdk/deepseek-v4-flash"
HELLO = LlmRequest(MODEL, (Message("user", (Text("hi"),)),))


async def collect(adapter: OpenAISdkAdapter, request: LlmRequest = HELLO) -> list[StreamChunk]:
    """Every chunk of one call (this adapter never raises for a failed call)."""
    return [chunk async for chunk in adapter.stream(request)]


def failure_of(chunks: Sequence[StreamChunk]) -> LlmFailure:
    """The failure a stream ended with."""
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishError), last
    return last.reason.failure


async def failure_from(adapter: OpenAISdkAdapter, request: LlmRequest = HELLO) -> LlmFailure:
    return failure_of(await collect(adapter, request))


def quick_adapter(server: MockServer, idle_timeout_s: float = 0.5) -> OpenAISdkAdapter:
    """An adapter with a short idle timeout, for stall tests: the stall itself never ends, so
    only the deadline stops it, and it leaves the headers and the partial answer before the
    stall time to arrive on a loaded machine."""
    config = OpenAISdkConfig(base_url=server.url, api_key="k", idle_timeout_s=idle_timeout_s)
    return OpenAISdkAdapter(config)


def adapter_at(url: str, **options: object) -> OpenAISdkAdapter:
    return OpenAISdkAdapter(OpenAISdkConfig(base_url=url, api_key="k", **options))  # type: ignore[arg-type]


def turn_ends(events: Sequence[SessionEvent]) -> list[TurnEndReason]:
    return [e.data.reason for e in events if isinstance(e.data, TurnEnd)]
