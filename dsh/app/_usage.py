"""The usage line shown after each turn: tokens, the share of input served from the cache, the
cost when the price of every model called is known (configured in ``[budgets.prices]``, else
published by the model's adapter: DeepSeek's models are priced out of the box, each call at the
peak or off-peak price of the hour it was made), and the time the turn took."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from dsh.app._harness import Harness
from dsh.values._chunks import TokenUsage
from dsh.values._events import AssistantMessage, SessionEvent
from dsh.values._rare_events import HistorySummary
from dsh.values._tokens import Price, PriceBook, Pricing

__all__ = ["Price", "UsageMeter", "dollars", "price_book", "prices_from_config"]

_BILLED = (AssistantMessage, HistorySummary)


def prices_from_config(dump: Mapping[str, Any]) -> dict[str, Price]:
    """The prices of ``[budgets.prices]`` in a config dump (none when the budgets plugin is
    not loaded). The section belongs to the budgets plugin; the usage line only reads its
    documented keys."""
    prices = (dump.get("budgets") or {}).get("prices") or {}
    return {model: Price(**price) for model, price in prices.items()}


def price_book(harness: Harness) -> PriceBook:
    """Configured prices first, then those the adapters publish."""
    return PriceBook(prices_from_config(harness.config.dump()), harness.llm.pricing)


def dollars(cost: float) -> str:
    """``$0.0123``; a cost under a cent keeps two significant digits (``$0.000045``), since
    a short turn on a cheap model costs less than a hundredth of a cent."""
    if cost == 0 or cost >= 0.01:
        return f"${cost:.4f}"
    return f"${cost:.{max(4, 1 - math.floor(math.log10(cost)))}f}"


class UsageMeter:
    """Adds up the usage of one turn from its session events."""

    def __init__(
        self,
        prices: PriceBook | Mapping[str, Pricing],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.prices = prices if isinstance(prices, PriceBook) else PriceBook(prices)
        self._clock = clock
        self._wall_clock = wall_clock
        self.start()

    def start(self) -> None:
        """A turn starts: count from zero."""
        self.usage = TokenUsage()
        self.cost: float | None = 0.0
        self.started = self._clock()

    def observe(self, event: SessionEvent) -> None:
        if isinstance(event.data, _BILLED) and event.data.usage is not None:
            self.add(event.data.usage, event.data.model, event.time)

    def add(self, usage: TokenUsage, model: str | None, when: float | None = None) -> None:
        """Count one call made at ``when`` (epoch seconds; default: now)."""
        self.usage += usage
        cost = self.prices.cost(model, usage, self._wall_clock() if when is None else when)
        # One call of a model without a price makes the turn's cost unknown.
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    def line(self) -> str | None:
        """``1,234 in (56% cached) · 321 out (200 reasoning) · $0.0012 · 2.1s``; ``None``
        when the turn made no model call."""
        u = self.usage
        billed_in = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        if billed_in + u.output_tokens == 0:
            return None
        parts = [f"{billed_in:,} in"]
        if billed_in:
            parts[0] += f" ({round(100 * u.cache_read_tokens / billed_in)}% cached)"
        out = f"{u.output_tokens:,} out"
        parts.append(f"{out} ({u.reasoning_tokens:,} reasoning)" if u.reasoning_tokens else out)
        if self.cost is not None:
            parts.append(dollars(self.cost))
        parts.append(f"{self._clock() - self.started:.1f}s")
        return " · ".join(parts)
