"""The token meter: cheap estimates calibrated by reported usage."""

from __future__ import annotations

from dsh.values._chunks import TokenUsage
from dsh.values._content import Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._tokens import (
    MESSAGE_OVERHEAD,
    Price,
    TokenMeter,
    estimate_text,
    estimate_tokens,
    schema_tokens,
)


def test_text_estimates() -> None:
    assert estimate_text("") == 0
    assert estimate_text("abcd" * 10) == 10
    assert estimate_text("模型" * 3) == 4  # six CJK characters, ~1.5 a token
    assert estimate_text("ab模型") == 1 + 2


def test_request_estimate_counts_everything() -> None:
    message = Message(
        "assistant",
        (
            Text("abcd"),
            Reasoning("abcd"),
            ToolCall("c", "abcd", "abcdabcd"),
            ToolResult("c", (Text("abcd"), Image("u"))),
            Image("data:"),
        ),
    )
    request = LlmRequest(
        "m",
        (message,),
        system="abcd" * 2,
        tools=(ToolSchema("abcd", "abcd", {}),),
    )
    blocks = 1 + 1 + (1 + 2 + MESSAGE_OVERHEAD) + (1 + 800 + MESSAGE_OVERHEAD) + 800
    assert estimate_tokens(request) == 2 + MESSAGE_OVERHEAD + blocks + 1 + 1 + 1
    assert estimate_tokens(LlmRequest("m", ())) == 0


def test_the_meter_calibrates_per_model() -> None:
    meter = TokenMeter(smoothing=0.5)
    request = LlmRequest("m", (Message("user", (Text("x" * 400),)),))
    raw = estimate_tokens(request)
    assert meter.estimate(request) == raw
    meter.calibrate("m", raw, TokenUsage(input_tokens=raw, cache_read_tokens=raw))
    assert meter.factor("m") == 2.0
    meter.calibrate("m", raw, TokenUsage(input_tokens=raw))
    assert meter.factor("m") == 1.5
    assert meter.estimate(request) == round(raw * 1.5)
    assert meter.factor("other") == 1.0
    meter.calibrate("m", 0, TokenUsage(input_tokens=5))
    meter.calibrate("m", raw, TokenUsage())
    assert meter.factor("m") == 1.5
    meter.calibrate("x", raw, TokenUsage(input_tokens=1))  # nonsense is bounded
    assert meter.factor("x") == 0.5


def test_the_meter_remembers_tool_schemas() -> None:
    tool = ToolSchema("abcd", "abcd", {"type": "object"})
    request = LlmRequest("m", (), tools=(tool, tool))
    meter = TokenMeter()
    assert meter.raw(request) == estimate_tokens(request) == 2 * schema_tokens(tool)
    assert meter.raw(request) == estimate_tokens(request)


def test_price_of_disjoint_usage() -> None:
    million = TokenUsage(1_000_000, 1_000_000, 2_000_000, 4_000_000)
    assert Price(1.0, 2.0, 0.5, 0.25).cost(million) == 5.0
    assert Price(1.0, 1.0).cost(TokenUsage(500_000)) == 0.5
