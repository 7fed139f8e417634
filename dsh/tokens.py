"""The token meter: a cheap estimate of a request's input tokens, calibrated by real usage.

Counting tokens exactly needs the provider's tokenizer; a harness only needs to know when a
conversation approaches the context window. :func:`estimate_tokens` counts characters (ASCII
text runs about four characters a token, other scripts closer to one), and :class:`TokenMeter`
scales that estimate per model by what the provider reported for earlier requests
(``input + cache_read + cache_write``), so the estimate converges on the real count.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from attrs import frozen

from dsh.chunks import TokenUsage
from dsh.content import Block, Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.request import LlmRequest, ToolSchema

__all__ = [
    "MESSAGE_OVERHEAD",
    "Price",
    "TokenMeter",
    "estimate_text",
    "estimate_tokens",
    "message_tokens",
    "schema_tokens",
]

MESSAGE_OVERHEAD = 4
IMAGE_TOKENS = 800


def estimate_text(text: str) -> int:
    """Tokens in ``text``: ~4 ASCII characters a token, ~1.5 other characters a token."""
    if text.isascii():
        return (len(text) + 3) // 4
    ascii_chars = sum(ch.isascii() for ch in text)
    return (ascii_chars + 3) // 4 + (2 * (len(text) - ascii_chars) + 2) // 3


def _block_tokens(block: Block) -> int:
    if isinstance(block, Text | Reasoning):
        return estimate_text(block.text)
    if isinstance(block, ToolCall):
        return estimate_text(block.name) + estimate_text(block.arguments) + MESSAGE_OVERHEAD
    if isinstance(block, ToolResult):
        return sum(_block_tokens(b) for b in block.content) + MESSAGE_OVERHEAD
    assert isinstance(block, Image)
    return IMAGE_TOKENS


def message_tokens(message: Message) -> int:
    """The estimated tokens of one message, framing included."""
    return MESSAGE_OVERHEAD + sum(_block_tokens(b) for b in message.content)


def schema_tokens(tool: ToolSchema) -> int:
    """The estimated tokens of one tool schema as the model receives it."""
    parameters = json.dumps(tool.parameters)
    return estimate_text(tool.name) + estimate_text(tool.description) + estimate_text(parameters)


def estimate_tokens(
    request: LlmRequest,
    per_message: Callable[[Message], int] = message_tokens,
    per_tool: Callable[[ToolSchema], int] = schema_tokens,
) -> int:
    """The uncalibrated estimate of ``request``'s input: system prompt, messages, tool schemas."""
    total = estimate_text(request.system or "")
    total += sum(map(per_message, request.messages))
    return total + sum(map(per_tool, request.tools))


@frozen
class Price:
    """What a model's tokens cost: US dollars per million tokens, cache reads and writes priced
    separately (``[budgets.prices.<model>]`` in config)."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0

    def cost(self, usage: TokenUsage) -> float:
        """The dollars ``usage`` (disjoint counts) cost."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


class TokenMeter:
    """Per-model calibrated estimates.

    ``estimate(request)`` is the raw estimate times the model's factor; ``calibrate(model,
    estimated, usage)`` moves the factor towards ``actual / estimated`` (an exponential moving
    average, so one odd response does not swing it). The factor stays within ``bounds``: real
    tokenizers land well inside them, so a provider (or a fake) reporting nonsense can skew the
    estimate but never switch compaction off.
    """

    def __init__(self, smoothing: float = 0.5, bounds: tuple[float, float] = (0.5, 2.0)) -> None:
        self.smoothing = smoothing
        self.bounds = bounds
        self.factors: dict[str, float] = {}
        # A history is estimated again at every step; each message only once.
        self._message_tokens = functools.lru_cache(maxsize=16_384)(message_tokens)
        self._tool_tokens: dict[tuple[str, int], int] = {}

    def factor(self, model: str) -> float:
        return self.factors.get(model, 1.0)

    def raw(self, request: LlmRequest) -> int:
        """:func:`estimate_tokens`, with per-message and per-tool estimates remembered."""
        return estimate_tokens(request, self._message_tokens, self._schema_tokens)

    def _schema_tokens(self, tool: ToolSchema) -> int:
        # Schemas are registered once and offered at every step; their parameters are a dict
        # (unhashable), so they are remembered by identity, with the name as a guard.
        key = (tool.name, id(tool.parameters))
        found = self._tool_tokens.get(key)
        if found is None:
            found = self._tool_tokens[key] = schema_tokens(tool)
        return found

    def estimate(self, request: LlmRequest, raw: int | None = None) -> int:
        """The calibrated estimate (of ``raw``, the uncalibrated one, when already known)."""
        raw = self.raw(request) if raw is None else raw
        return round(raw * self.factor(request.model))

    def calibrate(self, model: str, estimated_raw: int, usage: TokenUsage) -> None:
        """Learn from a response: ``estimated_raw`` is the uncalibrated estimate of its request."""
        actual = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if estimated_raw <= 0 or actual <= 0:
            return
        low, high = self.bounds
        observed = min(max(actual / estimated_raw, low), high)
        previous = self.factors.get(model)
        self.factors[model] = (
            observed if previous is None else previous + self.smoothing * (observed - previous)
        )
