"""The usage line: tokens, cache-hit share, cost from ``[budgets.prices]``, time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dsh import Harness
from dsh.app._usage import (
    Price,
    UsageMeter,
    dollars,
    price_book,
    prices_from_config,
)
from dsh.values._chunks import TokenUsage
from dsh.values._events import AssistantMessage, SessionEvent, StepStart
from dsh.values._rare_events import HistorySummary
from dsh_plugins.budgets import BudgetsPlugin
from dsh_plugins.llm_deepseek import DeepSeekPlugin


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def message(usage: TokenUsage | None, model: str = "flash") -> SessionEvent:
    return SessionEvent("assistant/message", 0, 0.0, AssistantMessage(1, 1, (), usage, model))


def test_a_turn_without_model_calls_has_no_line() -> None:
    meter = UsageMeter({})
    meter.observe(message(None))
    meter.observe(SessionEvent("step/start", 0, 0.0, StepStart(1, 1)))
    assert meter.line() is None


def test_tokens_cache_share_cost_and_time() -> None:
    clock = Clock()
    meter = UsageMeter({"flash": Price(input=0.27, output=1.1, cache_read=0.07)}, clock)
    meter.observe(message(TokenUsage(300, 200, cache_read_tokens=700, reasoning_tokens=50)))
    summary = HistorySummary(1, "s", 10, 5, TokenUsage(0, 100), "flash")
    meter.observe(SessionEvent("compaction/summary", 1, 0.0, summary))
    clock.now += 2.5
    assert meter.line() == "1,000 in (70% cached) · 300 out (50 reasoning) · $0.00046 · 2.5s"
    meter.start()
    meter.add(TokenUsage(0, 7), "flash")
    assert meter.line() == "0 in · 7 out · $0.0000077 · 0.0s"


def test_one_unpriced_model_makes_the_cost_unknown() -> None:
    meter = UsageMeter({"flash": Price(1, 1)})
    meter.add(TokenUsage(10, 10), "flash")
    meter.add(TokenUsage(10, 10), "pro")
    meter.add(TokenUsage(10, 10), "flash")
    line = meter.line()
    assert line is not None and "$" not in line


def test_prices_come_from_the_budgets_section() -> None:
    config = {"budgets": {"prices": {"flash": {"input": 0.27, "output": 1.1}}}}
    harness = Harness(load_entrypoints=False, plugins=[BudgetsPlugin()], config=config)
    harness.load()
    assert prices_from_config(harness.config.dump()) == {"flash": Price(0.27, 1.1)}
    assert prices_from_config({}) == {}


# -- DeepSeek's prices out of the box -----------------------------------------------------------

MONDAY_PEAK = datetime(2026, 11, 30, 1, tzinfo=UTC).timestamp()  # Monday 09:00 in Beijing
SATURDAY = datetime(2026, 12, 5, 2, tzinfo=UTC).timestamp()  # Saturday 10:00 in Beijing
MILLION = TokenUsage(1_000_000, 1_000_000, cache_read_tokens=1_000_000)


def at(when: float, usage: TokenUsage, model: str = "deepseek-flash") -> SessionEvent:
    return SessionEvent("assistant/message", 0, when, AssistantMessage(1, 1, (), usage, model))


def deepseek_harness(config: dict[str, Any] | None = None) -> Harness:
    harness = Harness(
        load_entrypoints=False, plugins=[DeepSeekPlugin(), BudgetsPlugin()], config=config
    )
    harness.load()
    return harness


def test_deepseek_models_are_priced_without_config_by_the_hour_of_each_call() -> None:
    meter = UsageMeter(price_book(deepseek_harness()))
    meter.observe(at(MONDAY_PEAK, MILLION))  # 0.006 + 0.30 + 1.20
    assert meter.cost == 1.506
    meter.observe(at(SATURDAY, MILLION))  # half
    assert meter.cost == 1.506 + 0.753
    meter.observe(at(SATURDAY, MILLION, "deepseek/deepseek-v4-pro"))  # 0.022 + 0.66 + 1.98
    assert meter.cost == pytest.approx(1.506 + 0.753 + 2.662)
    line = meter.line()
    assert line is not None and "$4.9210" in line


def test_a_call_counted_without_a_time_is_priced_at_the_wall_clock() -> None:
    book = price_book(deepseek_harness())
    peak = UsageMeter(book, wall_clock=lambda: MONDAY_PEAK)
    peak.add(MILLION, "deepseek-v4-flash")  # the legacy name is billed as deepseek-flash
    off_peak = UsageMeter(book, wall_clock=lambda: SATURDAY)
    off_peak.add(MILLION, "deepseek-v4-flash")
    assert (peak.cost, off_peak.cost) == (1.506, 0.753)


def test_configured_prices_override_the_built_in_ones() -> None:
    config = {"budgets": {"prices": {"deepseek-flash": {"input": 1.0, "output": 0.0}}}}
    meter = UsageMeter(price_book(deepseek_harness(config)))
    meter.observe(at(MONDAY_PEAK, MILLION))
    assert meter.cost == 1.0


def test_small_costs_keep_two_significant_digits() -> None:
    assert [dollars(c) for c in (0.0, 0.000045, 0.00123, 0.0123, 2.5)] == [
        "$0.0000",
        "$0.000045",
        "$0.0012",
        "$0.0123",
        "$2.5000",
    ]
