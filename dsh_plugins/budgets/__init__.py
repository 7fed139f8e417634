"""Budgets: stop a turn before it runs away.

A ``dsh_agent_turn_continuation`` implementation with limits on steps per turn and on tokens and
cost per turn and per session. Prices are per model, per million tokens, with cache reads (and
writes) priced separately: ``[budgets.prices.<model>]`` when configured, else the prices the
model's adapter publishes (the DeepSeek adapter knows its models' peak and off-peak prices),
each call priced at the hour it was logged; a sub-agent's usage (its ``subagent/end``) counts in
its parent's session. When a limit is reached the turn stops: a
``budget/exceeded`` event says which limit, and ``turn/end`` carries the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from attrs import define, field, frozen
from attrs.validators import optional

from dsh import Continuation, Stop, for_events, hookimpl
from dsh.agent import Agent
from dsh.chunks import TokenUsage
from dsh.config import at_least, greater_than
from dsh.events import (
    AssistantMessage,
    HistorySummary,
    SessionEvent,
    StepStart,
    SubagentEnd,
    TurnStart,
)
from dsh.harness import Harness
from dsh.session import Session
from dsh.tokens import Price, PriceBook
from dsh.value import Value

__all__ = ["BudgetExceeded", "BudgetsConfig", "BudgetsPlugin", "Price"]


@frozen(repr=False)
class BudgetsConfig(Value):
    """Section ``budgets``; every limit is off unless set. A turn stops once a limit is
    reached, so a set limit is positive (a step or token limit at least 1)."""

    max_steps_per_turn: int | None = field(default=None, validator=optional(at_least(1)))
    max_tokens_per_turn: int | None = field(default=None, validator=optional(at_least(1)))
    max_tokens_per_session: int | None = field(default=None, validator=optional(at_least(1)))
    max_cost_per_turn: float | None = field(default=None, validator=optional(greater_than(0)))
    max_cost_per_session: float | None = field(default=None, validator=optional(greater_than(0)))
    prices: dict[str, Price] = field(factory=dict)


@frozen(repr=False)
class BudgetExceeded(Value):
    """Data of ``budget/exceeded``."""

    type: ClassVar[str] = "budget/exceeded"
    turn: int
    limit: str
    value: float
    maximum: float


#: The events that bill model use (a sub-agent's ``subagent/end`` counts in its parent's budgets).
_BILLED = (AssistantMessage, HistorySummary, SubagentEnd)
#: The events that change what a session spent (a chunk, most of a log, never does).
_ACCOUNTED = (TurnStart, StepStart, *_BILLED)


@define(repr=False)
class _Spend(Value):
    """What one session spent, in total and in its current turn."""

    turn: int = 0
    steps: int = 0
    turn_tokens: int = 0
    turn_cost: float = 0.0
    tokens: int = 0
    cost: float = 0.0


def _tokens(usage: TokenUsage) -> int:
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
    )


class BudgetsPlugin:
    def __init__(self) -> None:
        self.config = BudgetsConfig()
        self.prices = PriceBook({})
        self._spend: dict[str, _Spend] = {}

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register("budgets", BudgetsConfig)

    @hookimpl
    def dsh_register_event_types(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(BudgetExceeded.type, BudgetExceeded)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        self.config = harness.config.section("budgets", BudgetsConfig)
        self.prices = PriceBook(self.config.prices, harness.llm.pricing)

    @hookimpl
    def dsh_session_created(self, session: Session) -> None:
        """A resumed or forked session starts with what its seed already spent."""
        self._spend[session.id] = spend = _Spend()
        for event in session.events.select(*_ACCOUNTED):
            self._account(spend, event)

    @hookimpl
    @for_events(*_ACCOUNTED)
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        spend = self._spend.get(session.id)
        if spend is not None:
            self._account(spend, event)

    def _account(self, spend: _Spend, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, TurnStart):
            spend.turn, spend.steps, spend.turn_tokens, spend.turn_cost = data.turn, 0, 0, 0.0
        elif isinstance(data, StepStart):
            spend.steps += 1
        elif isinstance(data, _BILLED) and data.usage:
            usage: TokenUsage = data.usage
            cost = self.prices.cost(data.model, usage, event.time) or 0.0
            spend.turn_tokens += _tokens(usage)
            spend.tokens += _tokens(usage)
            spend.turn_cost += cost
            spend.cost += cost

    @hookimpl
    def dsh_session_closed(self, session: Session) -> None:
        self._spend.pop(session.id, None)

    def spent(self, session_id: str) -> _Spend | None:
        """What a session spent so far (``None`` for sessions this plugin never saw)."""
        return self._spend.get(session_id)

    @hookimpl(trylast=True)
    def dsh_agent_turn_continuation(
        self, agent: Agent, turn: int, decision: Continuation
    ) -> Stop[Continuation] | None:
        """Force-stop a turn that wants another step but has reached a limit."""
        spend = self._spend.get(agent.session.id)
        if not decision.proceed or spend is None:
            return None
        for limit, value, maximum in self._limits(spend):
            if maximum is not None and value >= maximum:
                agent.session.append(BudgetExceeded(turn, limit, value, maximum))
                reason = f"budget: {limit} reached ({value:g} of {maximum:g})"
                return Stop(Continuation(False, reason))
        return None

    def _limits(self, spend: _Spend) -> list[tuple[str, float, float | None]]:
        config = self.config
        return [
            ("max_steps_per_turn", spend.steps, config.max_steps_per_turn),
            ("max_tokens_per_turn", spend.turn_tokens, config.max_tokens_per_turn),
            ("max_cost_per_turn", spend.turn_cost, config.max_cost_per_turn),
            ("max_tokens_per_session", spend.tokens, config.max_tokens_per_session),
            ("max_cost_per_session", spend.cost, config.max_cost_per_session),
        ]
