"""The token meter: a cheap estimate of a request's input tokens, calibrated by real usage.

Counting tokens exactly needs the provider's tokenizer; a harness only needs to know when a
conversation approaches the context window. :func:`estimate_tokens` counts characters (ASCII
text runs about four characters a token, other scripts closer to one), and :class:`TokenMeter`
scales that estimate per model by what the provider reported for earlier requests
(``input + cache_read + cache_write``), so the estimate converges on the real count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from attrs import field, frozen

from dsh.values._chunks import TokenUsage
from dsh.values._config import at_least
from dsh.values._content import Block, Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._memo import HistoryTotal
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._value import Value

__all__ = [
    "MESSAGE_OVERHEAD",
    "PeakHours",
    "Price",
    "PriceBook",
    "PriceSchedule",
    "Pricing",
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


#: The blocks estimated by their text.
_TEXTS = (Text, Reasoning)


def _block_tokens(block: Block) -> int:
    if isinstance(block, _TEXTS):
        return estimate_text(block.text)
    if isinstance(block, ToolCall):
        return estimate_text(block.name) + estimate_text(block.arguments) + MESSAGE_OVERHEAD
    if isinstance(block, ToolResult):
        return sum(map(_block_tokens, block.content)) + MESSAGE_OVERHEAD
    assert isinstance(block, Image)
    return IMAGE_TOKENS


def message_tokens(message: Message) -> int:
    """The estimated tokens of one message, framing included."""
    return MESSAGE_OVERHEAD + sum(map(_block_tokens, message.content))


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


@frozen(repr=False, eq=False)
class Price(Value):
    """What a model's tokens cost: US dollars per million tokens, cache reads and writes priced
    separately (``[budgets.prices.<model>]`` in config)."""

    input: float = field(validator=at_least(0))
    output: float = field(validator=at_least(0))
    cache_read: float = field(default=0.0, validator=at_least(0))
    cache_write: float = field(default=0.0, validator=at_least(0))

    def cost(self, usage: TokenUsage) -> float:
        """The dollars ``usage`` (disjoint counts) cost."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000

    def price_at(self, when: float) -> Price:
        """A flat price is the same at every hour."""
        return self


class Pricing(Protocol):
    """Anything that says what a model's tokens cost at ``when`` (epoch seconds): a flat
    :class:`Price` or a :class:`PriceSchedule`."""

    def price_at(self, when: float) -> Price: ...


#: The weekday of the first epoch day (Monday = 0).
_THURSDAY = 3


def _days(days: Iterable[int]) -> frozenset[int]:
    return frozenset(days)


@frozen(repr=False, eq=False)
class PeakHours(Value):
    """The hours of a week when peak prices apply, on a clock ``utc_offset_minutes`` ahead of
    UTC (a provider bills by its own wall clock, whatever the user's time zone).

    ``windows``: ``(start, end)`` pairs of minutes after local midnight, end excluded;
    ``weekdays``: the local days they apply on, Monday = 0. Public holidays are not modelled.
    """

    windows: tuple[tuple[int, int], ...]
    weekdays: frozenset[int] = field(default=frozenset(range(5)), converter=_days)
    utc_offset_minutes: int = 0

    def contains(self, when: float) -> bool:
        """Whether ``when`` (epoch seconds) falls in a peak window. Counted, not looked up in
        a calendar (it runs for every priced response): epoch seconds have no leap seconds,
        so a local day is 86,400 of them, and 1 January 1970 was a Thursday."""
        days, seconds = divmod(when + self.utc_offset_minutes * 60, 86_400)
        if (int(days) + _THURSDAY) % 7 not in self.weekdays:
            return False
        minute = int(seconds // 60)
        return any(start <= minute < end for start, end in self.windows)


@frozen(repr=False, eq=False)
class PriceSchedule(Value):
    """Prices that depend on the hour a call is made: ``peak`` inside ``peak_hours``,
    ``off_peak`` at every other time."""

    peak: Price
    off_peak: Price
    peak_hours: PeakHours

    def price_at(self, when: float) -> Price:
        return self.peak if self.peak_hours.contains(when) else self.off_peak


class PriceBook:
    """What a call cost: configured prices first (``[budgets.prices.<model>]``, flat), then
    what the adapter serving the model publishes (``lookup``, typically
    :meth:`dsh.llm._service.LlmService.pricing`). A model found in neither has no known cost."""

    def __init__(
        self,
        configured: Mapping[str, Pricing],
        lookup: Callable[[str], Pricing | None] = lambda model: None,
    ) -> None:
        self.configured = dict(configured)
        self._lookup = lookup

    def pricing(self, model: str | None) -> Pricing | None:
        if not model:
            return None
        found = self.configured.get(model)
        return found if found is not None else self._lookup(model)

    def cost(self, model: str | None, usage: TokenUsage, when: float) -> float | None:
        """The dollars ``usage`` cost on ``model`` at ``when`` (epoch seconds); ``None`` when
        the model's price is unknown."""
        pricing = self.pricing(model)
        return None if pricing is None else pricing.price_at(when).cost(usage)


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
        # A history is estimated again at every step; each message only once (per session:
        # a step's history is the last one plus its new messages, added to the last total).
        self._messages = HistoryTotal(message_tokens)
        self._tool_tokens: dict[tuple[str, int], int] = {}

    def factor(self, model: str) -> float:
        return self.factors.get(model, 1.0)

    def raw(self, request: LlmRequest) -> int:
        """:func:`estimate_tokens`, with per-message and per-tool estimates remembered."""
        total = estimate_text(request.system or "")
        total += self._messages.total(request.session_id, request.messages)
        return total + sum(map(self._schema_tokens, request.tools))

    def forget(self, session_id: str) -> None:
        """Drop the estimates remembered for a session's history (its agent is gone)."""
        self._messages.forget(session_id)

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
