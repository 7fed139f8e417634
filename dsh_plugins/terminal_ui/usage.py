"""The usage line shown after each turn: tokens, the share of input served from the cache, the
cost when prices are configured, and the time the turn took."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from dsh.chunks import TokenUsage
from dsh.events import SessionEvent
from dsh.tokens import Price

__all__ = ["Price", "UsageMeter", "prices_from_config"]

_BILLED = ("assistant/message", "compaction/summary")


def prices_from_config(dump: Mapping[str, Any]) -> dict[str, Price]:
    """The prices of ``[budgets.prices]`` in a config dump (none when the budgets plugin is
    not loaded). The section belongs to the budgets plugin; the usage line only reads its
    documented keys."""
    prices = (dump.get("budgets") or {}).get("prices") or {}
    return {model: Price(**price) for model, price in prices.items()}


class UsageMeter:
    """Adds up the usage of one turn from its session events."""

    def __init__(
        self, prices: Mapping[str, Price], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.prices = dict(prices)
        self._clock = clock
        self.start()

    def start(self) -> None:
        """A turn starts: count from zero."""
        self.usage = TokenUsage()
        self.cost: float | None = 0.0
        self.started = self._clock()

    def observe(self, event: SessionEvent) -> None:
        if event.type in _BILLED and event.data.usage is not None:
            self.add(event.data.usage, event.data.model)

    def add(self, usage: TokenUsage, model: str | None) -> None:
        self.usage += usage
        price = self.prices.get(model or "")
        # One call of a model without a price makes the turn's cost unknown.
        self.cost = None if price is None or self.cost is None else self.cost + price.cost(usage)

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
            parts.append(f"${self.cost:.4f}")
        parts.append(f"{self._clock() - self.started:.1f}s")
        return " · ".join(parts)
