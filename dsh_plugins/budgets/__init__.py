"""Budgets: stop a turn before it runs away.

A ``dsh_agent_turn_continuation`` implementation with limits on steps per turn and on tokens and
cost per turn and per session. Prices are per model, per million tokens, with cache reads (and
writes) priced separately: ``[budgets.prices.<model>]`` when configured, else the prices the
model's adapter publishes (the DeepSeek adapter knows its models' peak and off-peak prices),
each call priced at the hour it was logged. When a limit is reached the turn stops: a
``budget/exceeded`` event says which limit, and ``turn/end`` carries the reason.

A family of agents is bounded as a whole: what a sub-agent is billed counts at once against its
parent and every agent above it (a log read back on resume counts a child's ``subagent/end``
instead); a turn stops when an agent above it has reached a token or cost limit; and a guard
on ``harness.family`` refuses a sub-agent while its parent or an agent above has. A family thus
stays within a limit plus one model call per agent. See ``docs/plugins/budgets.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, cast

from attrs import define, field, frozen
from attrs.validators import optional

from dsh import Continuation, Stop, for_events, hookimpl
from dsh.plugin import (
    HISTORY_SUMMARY,
    SUBAGENT_END,
    SUBAGENT_PARENT,
    Agent,
    AssistantMessage,
    Harness,
    Price,
    PriceBook,
    Session,
    SessionEvent,
    StepStart,
    TokenUsage,
    TurnStart,
    Value,
    at_least,
    greater_than,
)

if TYPE_CHECKING:
    from dsh.plugin import HistorySummary, SubagentEnd, SubagentParent
    from dsh_plugins.budgets._family import Link, Reached

__all__ = ["BudgetExceeded", "BudgetsConfig", "BudgetsPlugin", "Price"]


@frozen(repr=False, eq=False)
class BudgetsConfig(Value):
    """Section ``budgets``; every limit is off unless set. A turn stops once a limit is
    reached, so a set limit is positive (a step or token limit at least 1)."""

    max_steps_per_turn: int | None = field(default=None, validator=optional(at_least(1)))
    max_tokens_per_turn: int | None = field(default=None, validator=optional(at_least(1)))
    max_tokens_per_session: int | None = field(default=None, validator=optional(at_least(1)))
    max_cost_per_turn: float | None = field(default=None, validator=optional(greater_than(0)))
    max_cost_per_session: float | None = field(default=None, validator=optional(greater_than(0)))
    prices: dict[str, Price] = field(factory=dict)


@frozen(repr=False, eq=False)
class BudgetExceeded(Value):
    """Data of ``budget/exceeded``: the turn that stopped, the limit reached, how far."""

    type: ClassVar[str] = "budget/exceeded"
    turn: int
    limit: str
    value: float
    maximum: float
    #: The agent above this one whose limit was reached (``None``: this agent's own), and its
    #: session: what a sub-agent spends counts against every agent above it.
    agent_id: str | None = None
    session_id: str | None = None


#: The events that bill model use (a sub-agent's ``subagent/end`` bills its parent when its
#: spending was not seen as it happened: a log read back on resume).
#: The types whose classes are defined when first needed are named by their tags: a run that
#: compacts nothing and starts no sub-agent never builds them.
_BILLED: tuple[type[Any] | str, ...] = (AssistantMessage, HISTORY_SUMMARY, SUBAGENT_END)
_BILLED_LATER = frozenset(kind for kind in _BILLED if isinstance(kind, str))
#: The events that change what a session spent (a chunk, most of a log, never does), and the
#: link from a sub-agent's session to its parent's: what a seed is read for.
_ACCOUNTED = (TurnStart, StepStart, SUBAGENT_PARENT, *_BILLED)
#: What the plugin is told of as it is appended: the same but the steps, counted by
#: ``dsh_agent_step_start`` (the loop logs a ``step/start`` and calls it at once). Observing
#: ``step/start`` would make every step build an event the log otherwise keeps packed.
_OBSERVED = (TurnStart, SUBAGENT_PARENT, *_BILLED)
#: The limits that hold a family: what a sub-agent spends is spent by every agent above it.
_FAMILY_LIMITS = frozenset(
    {"max_tokens_per_turn", "max_cost_per_turn", "max_tokens_per_session", "max_cost_per_session"}
)


@define(repr=False)
class _Spend(Value):
    """What one session spent, in total and in its current turn (its sub-agents' spending
    included)."""

    turn: int = 0
    steps: int = 0
    turn_tokens: int = 0
    turn_cost: float = 0.0
    tokens: int = 0
    cost: float = 0.0

    def add(self, tokens: int, cost: float) -> None:
        self.turn_tokens += tokens
        self.tokens += tokens
        self.turn_cost += cost
        self.cost += cost


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
        #: The parent of each sub-agent session made while this plugin watched: its spending
        #: is added to every session above it as it is billed.
        self._parents: dict[str, Link] = {}

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
        harness.family.add_guard(self.refusal)

    @hookimpl
    def dsh_session_created(self, session: Session) -> None:
        """A resumed or forked session starts with what its seed already spent (its
        sub-agents' from their ``subagent/end``)."""
        self._spend[session.id] = spend = _Spend()
        for event in session.events.select(*_ACCOUNTED):
            self._account(spend, event)
            bill = self._bill(event)
            if bill is not None:
                spend.add(*bill)

    @hookimpl
    def dsh_agent_step_start(self, agent: Agent, turn: int, step: int) -> None:
        """Count a step of the agent's session (its ``step/start`` is logged)."""
        spend = self._spend.get(agent.session.id)
        if spend is not None:
            spend.steps += 1

    @hookimpl
    @for_events(*_OBSERVED)
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        spend = self._spend.get(session.id)
        if spend is None:
            return
        if event.type == SUBAGENT_PARENT:
            link = cast("SubagentParent", event.data)
            if link.session_id in self._spend:
                from dsh_plugins.budgets._family import Link

                self._parents[session.id] = Link(link.session_id, link.agent_id)
            return
        if (
            event.type == SUBAGENT_END
            and self._parent_of(cast("SubagentEnd", event.data).session_id) == session.id
        ):
            return  # billed to this session (and those above) as the sub-agent spent it
        self._account(spend, event)
        bill = self._bill(event)
        if bill is not None:
            for _, _, above in self._lineage(session.id):
                above.add(*bill)

    def _account(self, spend: _Spend, event: SessionEvent) -> None:
        """Count a session's own turns and steps."""
        data = event.data
        if isinstance(data, TurnStart):
            spend.turn, spend.steps, spend.turn_tokens, spend.turn_cost = data.turn, 0, 0, 0.0
        elif isinstance(data, StepStart):
            spend.steps += 1

    def _bill(self, event: SessionEvent) -> tuple[int, float] | None:
        """The tokens and cost ``event`` bills, if it bills any."""
        if not (isinstance(event.data, AssistantMessage) or event.type in _BILLED_LATER):
            return None
        data = cast("AssistantMessage | HistorySummary | SubagentEnd", event.data)
        if not data.usage:
            return None
        usage: TokenUsage = data.usage
        return _tokens(usage), self.prices.cost(data.model, usage, event.time) or 0.0

    def _parent_of(self, session_id: str) -> str | None:
        link = self._parents.get(session_id)
        return None if link is None else link.session_id

    def _lineage(self, session_id: str) -> Iterator[tuple[str, str | None, _Spend]]:
        """The session and every session above it this plugin knows: (session id, agent id
        (``None`` for the first), what it spent)."""
        agent_id: str | None = None
        spend = self._spend.get(session_id)
        while spend is not None:
            yield session_id, agent_id, spend
            link = self._parents.get(session_id)
            if link is None:
                return
            session_id, agent_id = link.session_id, link.agent_id
            spend = self._spend.get(session_id)

    @hookimpl
    def dsh_session_closed(self, session: Session) -> None:
        self._spend.pop(session.id, None)
        self._parents.pop(session.id, None)

    def spent(self, session_id: str) -> _Spend | None:
        """What a session spent so far, its sub-agents' spending included (``None`` for
        sessions this plugin never saw)."""
        return self._spend.get(session_id)

    def refusal(self, parent: Agent) -> str | None:
        """Why ``parent`` may not start a sub-agent now: it, or an agent above it, has reached a
        token or cost limit (a :meth:`~dsh.plugin.Family.add_guard` guard)."""
        reached = self._reached(parent.session.id, own=False)
        if reached is None:
            return None
        return f"{reached.reason(parent.id)}; do the rest of the work without delegating it"

    @hookimpl(trylast=True)
    def dsh_agent_turn_continuation(
        self, agent: Agent, turn: int, decision: Continuation
    ) -> Stop[Continuation] | None:
        """Force-stop a turn that wants another step but has reached a limit, or whose agent
        has a parent (or an agent above that) that has reached a token or cost limit."""
        if not decision.proceed:
            return None
        reached = self._reached(agent.session.id, own=True)
        if reached is None:
            return None
        agent.session.append(
            BudgetExceeded(
                turn,
                reached.limit,
                reached.value,
                reached.maximum,
                reached.agent_id,
                reached.session_id,
            )
        )
        return Stop(Continuation(False, reached.reason()))

    def _reached(self, session_id: str, *, own: bool) -> Reached | None:
        """The first limit reached by the session (each of its limits when ``own``, else the
        family's) or by a session above it (the family's limits)."""
        for sid, agent_id, spend in self._lineage(session_id):
            mine = agent_id is None
            for limit, value, maximum in self._limits(spend):
                applies = (mine and own) or limit in _FAMILY_LIMITS
                if applies and maximum is not None and value >= maximum:
                    from dsh_plugins.budgets._family import Reached

                    return Reached(limit, value, maximum, agent_id, None if mine else sid)
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
