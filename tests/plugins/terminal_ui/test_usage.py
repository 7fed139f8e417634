"""The usage line: tokens, cache-hit share, cost from ``[budgets.prices]``, time."""

from __future__ import annotations

from dsh import Harness
from dsh.chunks import TokenUsage
from dsh.events import AssistantMessage, CompactionSummary, SessionEvent
from dsh_plugins.budgets import BudgetsPlugin
from dsh_plugins.terminal_ui.usage import Price, UsageMeter, prices_from_config


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
    meter.observe(SessionEvent("step/start", 0, 0.0, None))
    assert meter.line() is None


def test_tokens_cache_share_cost_and_time() -> None:
    clock = Clock()
    meter = UsageMeter({"flash": Price(input=0.27, output=1.1, cache_read=0.07)}, clock)
    meter.observe(message(TokenUsage(300, 200, cache_read_tokens=700, reasoning_tokens=50)))
    summary = CompactionSummary(1, "s", 10, 5, TokenUsage(0, 100), "flash")
    meter.observe(SessionEvent("compaction/summary", 1, 0.0, summary))
    clock.now += 2.5
    assert meter.line() == "1,000 in (70% cached) · 300 out (50 reasoning) · $0.0005 · 2.5s"
    meter.start()
    meter.add(TokenUsage(0, 7), "flash")
    assert meter.line() == "0 in · 7 out · $0.0000 · 0.0s"


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
