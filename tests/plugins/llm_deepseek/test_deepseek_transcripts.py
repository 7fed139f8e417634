"""Every streamed transcript of deepseek-wire.md §4 as a test vector: the exact StreamChunk
sequence, through the translator alone and through the adapter over HTTP from the mock server."""

from __future__ import annotations

import pytest

from dsh.testing.mockserver import SCENARIOS, MockServer
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Reasoning, Text, ToolCall
from dsh.values._errors import LlmError
from dsh_plugins.llm_deepseek import DeepSeekAdapter

from .support import HELLO, collect, collect_into, translate

WEATHER_ID_0 = "call_00_JQSxFX1xOHGH6ajdpN88RMXO"
WEATHER_ID_1 = "call_01_L8UtYbkfaMFr7hzsToGPWGfI"


def fragments(city: str) -> list[str]:
    """The argument fragments of one parallel call in §4.3, as listed there."""
    return f'{{|"|location|"|: |"|{city}|"|, |"|format|"|: |"|c|elsius|"|}}'.split("|")


def weather_call(index: int, call_id: str, city: str) -> list[StreamChunk]:
    return [
        BlockStart(index, "tool-call"),
        ToolCallDelta(index, call_id, "", name="get_current_weather"),
        *(ToolCallDelta(index, call_id, piece) for piece in fragments(city)),
    ]


VECTORS: dict[str, list[StreamChunk]] = {
    # §4.1 verbatim (V3.2, usage only on the last chunk)
    "text": [
        BlockStart(0, "text"),
        TextDelta(0, "Hello"),
        TextDelta(0, "!"),
        TextDelta(0, " How can I help you today?"),
        TextDelta(0, " 😊"),
        BlockEnd(0, Text("Hello! How can I help you today? 😊")),
        UsageChunk(TokenUsage(input_tokens=12, output_tokens=11)),
        Finish(FinishStop()),
    ],
    # §4.1 composite (V4, "usage": null until the finish chunk)
    "text-v4": [
        BlockStart(0, "text"),
        TextDelta(0, "Hi"),
        TextDelta(0, " there!"),
        BlockEnd(0, Text("Hi there!")),
        UsageChunk(TokenUsage(input_tokens=88, output_tokens=4)),
        Finish(FinishStop()),
    ],
    # §4.2 reasoning, then content
    "thinking": [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "We"),
        ReasoningDelta(0, " need"),
        ReasoningDelta(0, " to compare 9.11 and 9.8."),
        BlockStart(1, "text"),
        TextDelta(1, "9.8"),
        TextDelta(1, " is greater."),
        BlockEnd(0, Reasoning("We need to compare 9.11 and 9.8.")),
        BlockEnd(1, Text("9.8 is greater.")),
        UsageChunk(TokenUsage(input_tokens=87, output_tokens=21, reasoning_tokens=14)),
        Finish(FinishStop()),
    ],
    # §4.2 stopped by length while reasoning
    "thinking-length": [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "We"),
        ReasoningDelta(0, " need"),
        BlockEnd(0, Reasoning("We need")),
        UsageChunk(TokenUsage(input_tokens=87, output_tokens=2, reasoning_tokens=2)),
        Finish(FinishMaxTokens()),
    ],
    # §4.3 text, then two parallel calls streamed one after the other
    "tool-calls-parallel": [
        BlockStart(0, "text"),
        TextDelta(0, "我可以"),
        TextDelta(0, "同时查询两个城市的天气。"),
        *weather_call(1, WEATHER_ID_0, "北京"),
        *weather_call(2, WEATHER_ID_1, "洛阳"),
        BlockEnd(0, Text("我可以同时查询两个城市的天气。")),
        BlockEnd(
            1,
            ToolCall(
                WEATHER_ID_0, "get_current_weather", '{"location": "北京", "format": "celsius"}'
            ),
        ),
        BlockEnd(
            2,
            ToolCall(
                WEATHER_ID_1, "get_current_weather", '{"location": "洛阳", "format": "celsius"}'
            ),
        ),
        UsageChunk(TokenUsage(input_tokens=43, output_tokens=129, cache_read_tokens=448)),
        Finish(FinishToolCalls()),
    ],
    # §4.3 V4 thinking mode: reasoning, then one call
    "tool-call-thinking": [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "The user wants the weather"),
        ReasoningDelta(0, " in Hangzhou."),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "call_00_IhCAliIHtM9gKpgfqbBV9873", "", name="weather"),
        ToolCallDelta(1, "call_00_IhCAliIHtM9gKpgfqbBV9873", '{"'),
        ToolCallDelta(1, "call_00_IhCAliIHtM9gKpgfqbBV9873", "city"),
        ToolCallDelta(1, "call_00_IhCAliIHtM9gKpgfqbBV9873", '":"'),
        ToolCallDelta(1, "call_00_IhCAliIHtM9gKpgfqbBV9873", "Hangzhou"),
        ToolCallDelta(1, "call_00_IhCAliIHtM9gKpgfqbBV9873", '"}'),
        BlockEnd(0, Reasoning("The user wants the weather in Hangzhou.")),
        BlockEnd(1, ToolCall("call_00_IhCAliIHtM9gKpgfqbBV9873", "weather", '{"city":"Hangzhou"}')),
        UsageChunk(
            TokenUsage(
                input_tokens=118, output_tokens=61, cache_read_tokens=256, reasoning_tokens=17
            )
        ),
        Finish(FinishToolCalls()),
    ],
    # §4.3 both first fragments in one chunk, later fragments out of order
    "tool-calls-one-chunk": [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, "call_00_a", "", name="get_date"),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "call_01_b", "", name="get_time"),
        ToolCallDelta(1, "call_01_b", '{"tz":'),
        ToolCallDelta(0, "call_00_a", "{}"),
        ToolCallDelta(1, "call_01_b", '"UTC"}'),
        BlockEnd(0, ToolCall("call_00_a", "get_date", "{}")),
        BlockEnd(1, ToolCall("call_01_b", "get_time", '{"tz":"UTC"}')),
        UsageChunk(TokenUsage(input_tokens=40, output_tokens=20)),
        Finish(FinishToolCalls()),
    ],
    # §4.4 (b) usage in a trailing chunk with "choices": []
    "usage-trailing": [
        BlockStart(0, "text"),
        TextDelta(0, "Hi"),
        BlockEnd(0, Text("Hi")),
        UsageChunk(TokenUsage(input_tokens=9, output_tokens=1)),
        Finish(FinishStop()),
    ],
    # §4.4 (c) running usage on every chunk: the last one counts
    "usage-running": [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Hmm"),
        BlockStart(1, "text"),
        TextDelta(1, "Hello"),
        BlockEnd(0, Reasoning("Hmm")),
        BlockEnd(1, Text("Hello")),
        UsageChunk(TokenUsage(input_tokens=10, output_tokens=3)),
        Finish(FinishStop()),
    ],
    # §4.5 keep-alive comments before and between chunks
    "keep-alive": [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Let"),
        ReasoningDelta(0, " me think."),
        BlockStart(1, "text"),
        TextDelta(1, "Done."),
        BlockEnd(0, Reasoning("Let me think.")),
        BlockEnd(1, Text("Done.")),
        UsageChunk(TokenUsage(input_tokens=20, output_tokens=6, reasoning_tokens=4)),
        Finish(FinishStop()),
    ],
}


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_translator_produces_the_exact_chunks(name: str) -> None:
    assert translate(SCENARIOS[name]({})) == VECTORS[name]


@pytest.mark.parametrize("name", sorted(VECTORS))
async def test_adapter_streams_the_exact_chunks_over_http(
    name: str, adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    mock_server.queue(name)
    assert await collect(adapter, HELLO) == VECTORS[name]


async def test_a_mid_stream_error_payload_raises_after_the_chunks_before_it(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    """§4.6: an OpenAI-style ``{"error": {...}}`` payload in the stream."""
    mock_server.queue("error-event")
    received: list[StreamChunk] = []
    with pytest.raises(LlmError, match="The server had an error") as caught:
        await collect_into(received, adapter)
    assert caught.value.failure.code == "SERVER"
    assert received == [BlockStart(0, "text"), TextDelta(0, "Partial"), TextDelta(0, " answer")]
