"""Budgets: steps, tokens and cost per turn and per session."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, Continuation, Harness, Tool
from dsh.session._session import Session
from dsh.testing import MemoryStore, ScriptedAdapter, text_response, tool_call_response
from dsh.values._chunks import TokenUsage
from dsh.values._events import AssistantMessage, SessionEvent, TurnCompleted, TurnEnd, TurnStart
from dsh.values._request import ToolSchema
from dsh_plugins.budgets import BudgetExceeded, BudgetsPlugin, Price
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from tests.helpers import data_of, of_type


def endless_tool_loop(n: int = 50) -> list[Any]:
    return [tool_call_response(f"c{i}", "noop", {}) for i in range(n)]


async def make(budgets: dict[str, Any], *plugins: Any) -> tuple[Harness, BudgetsPlugin]:
    plugin = BudgetsPlugin()
    h = Harness(load_entrypoints=False, plugins=[plugin, *plugins], config={"budgets": budgets})
    await h.start()

    async def noop(args: Any, execution: Any) -> str:
        return "ok"

    h.tools.register(Tool(ToolSchema("noop", "does nothing"), noop))
    return h, plugin


async def run(h: Harness, script: list[Any], model: str = "m", agent_id: str = "a") -> Any:
    h.llm.register_adapter([model], ScriptedAdapter(script))
    agent = h.agent_loop.create(
        agent_id, AgentOptions(model=model), session_id=f"{agent_id}-session"
    )
    agent.send("go")
    await agent.wait_idle()
    return agent


async def test_a_tool_loop_stops_at_its_step_limit() -> None:
    h, plugin = await make({"max_steps_per_turn": 3})
    agent = await run(h, endless_tool_loop())
    events = agent.session.events
    assert len(of_type(events, "step/start")) == 3
    assert data_of(events, BudgetExceeded)[0] == BudgetExceeded(1, "max_steps_per_turn", 3, 3)
    reason = data_of(events, TurnEnd)[0].reason
    assert reason == TurnCompleted("budget: max_steps_per_turn reached (3 of 3)")
    spent = plugin.spent(agent.session.id)
    assert spent is not None and spent.steps == 3
    assert plugin.spent("unknown") is None
    # The next turn gets a fresh step budget.
    agent.send("again")
    await agent.wait_idle()
    assert len(of_type(agent.session.events, "step/start")) == 6
    await h.close()


async def test_token_and_cost_limits_per_turn_and_session() -> None:
    usage = TokenUsage(input_tokens=10, output_tokens=5)  # what tool_call_response reports
    assert (
        Price(1.0, 2.0, 0.5, 0.25).cost(TokenUsage(1_000_000, 1_000_000, 2_000_000, 4_000_000))
        == 5.0
    )
    h, _ = await make({"max_tokens_per_turn": 40})
    agent = await run(h, endless_tool_loop())
    assert len(of_type(agent.session.events, "step/start")) == 3  # 15, 30, 45 >= 40
    await h.close()
    prices = {"m": {"input": 1_000_000.0, "output": 0.0}}  # $10 per step of 10 input tokens
    h, _ = await make({"max_cost_per_turn": 25.0, "prices": prices})
    agent = await run(h, endless_tool_loop())
    assert data_of(agent.session.events, BudgetExceeded)[0].limit == "max_cost_per_turn"
    await h.close()
    h, _ = await make({"max_cost_per_session": 15.0, "prices": prices})
    agent = await run(h, [*endless_tool_loop(1), text_response("x"), *endless_tool_loop()])
    agent.send("more")
    await agent.wait_idle()
    exceeded = data_of(agent.session.events, BudgetExceeded)[0]
    assert (exceeded.limit, exceeded.turn) == ("max_cost_per_session", 2)
    await h.close()
    assert usage.output_tokens == 5


async def test_a_resumed_session_keeps_what_it_spent() -> None:
    store = MemoryStore()
    h, _ = await make({}, store)
    await run(h, [*endless_tool_loop(2), text_response("done")])
    await h.close()
    h, plugin = await make({"max_tokens_per_session": 40}, store)
    h.llm.register_adapter(["m"], ScriptedAdapter(endless_tool_loop()))
    agent = await h.agent_loop.resume("a-session", AgentOptions(model="m"))
    spent = plugin.spent("a-session")
    assert spent is not None and spent.tokens == 10 + 5 + 10 + 5 + 10 + len("done")
    agent.send("go on")
    await agent.wait_idle()
    assert data_of(agent.session.events, BudgetExceeded)[0].limit == "max_tokens_per_session"
    await h.close()


async def test_no_limits_and_stopped_turns_are_left_alone() -> None:
    h, plugin = await make({})
    agent = await run(h, [*endless_tool_loop(2), text_response("done")])
    assert of_type(agent.session.events, "budget/exceeded") == []
    stop = Continuation(False)
    assert plugin.dsh_agent_turn_continuation(agent, 1, stop) is None
    await h.close()


def test_events_of_sessions_it_never_saw_are_ignored() -> None:
    plugin = BudgetsPlugin()
    session = Session("x")
    plugin.dsh_session_event(session, SessionEvent("turn/start", 0, 0.0, TurnStart(1)))
    agent: Any = SimpleNamespace(session=session)
    plugin.dsh_agent_step_start(agent, 1, 1)
    assert plugin.spent("x") is None


async def test_a_closed_session_is_forgotten() -> None:
    h, plugin = await make({})
    agent = await run(h, [text_response("done")])
    await agent.dispose()
    assert plugin.spent(agent.session.id) is None
    await h.close()


# -- DeepSeek's prices out of the box -----------------------------------------------------------


def billed(seq: int, when: float, model: str) -> SessionEvent:
    usage = TokenUsage(1_000_000, 1_000_000, cache_read_tokens=1_000_000)
    return SessionEvent("assistant/message", seq, when, AssistantMessage(1, seq, (), usage, model))


async def test_deepseek_models_cost_what_the_hour_of_each_call_costs() -> None:
    peak = datetime(2026, 11, 30, 2, tzinfo=UTC).timestamp()  # Monday 10:00 in Beijing
    night = datetime(2026, 11, 30, 14, tzinfo=UTC).timestamp()  # Monday 22:00 in Beijing
    h, plugin = await make({}, DeepSeekPlugin())
    seed = [
        SessionEvent("turn/start", 0, peak, TurnStart(1)),
        billed(1, peak, "deepseek-flash"),  # 0.006 + 0.30 + 1.20
        billed(2, night, "deepseek/deepseek-v4-flash"),  # half
        billed(3, night, "unpriced"),
    ]
    plugin.dsh_session_created(Session("s", seed))
    spent = plugin.spent("s")
    assert spent is not None and spent.cost == pytest.approx(1.506 + 0.753)
    await h.close()
    # A configured price wins over the built-in one.
    h, plugin = await make({"prices": {"deepseek-flash": {"input": 0.0, "output": 1.0}}})
    plugin.dsh_session_created(Session("s", seed))
    spent = plugin.spent("s")
    assert spent is not None and spent.cost == pytest.approx(1.0)
    await h.close()


def test_a_model_call_that_reported_no_usage_counts_as_no_spend() -> None:
    plugin = BudgetsPlugin()
    seed = [
        SessionEvent("turn/start", 0, 0.0, TurnStart(1)),
        SessionEvent("assistant/message", 1, 0.0, AssistantMessage(1, 1, (), None, "m")),
    ]
    plugin.dsh_session_created(Session("s", seed))
    spent = plugin.spent("s")
    assert spent is not None and (spent.turn, spent.tokens, spent.cost) == (1, 0, 0.0)


# -- what the plugin keeps as a session runs is what its log says ----------------------------


def replayed(plugin: BudgetsPlugin, session: Session) -> Any:
    """The reference: what a session spent, read back from its whole log (as a resumed
    session's seed is), with ``plugin``'s prices."""
    reader = BudgetsPlugin()
    reader.prices = plugin.prices
    reader.dsh_session_created(Session(session.id, session.events))
    return reader.spent(session.id)


@settings(max_examples=25, deadline=None)
@given(
    turns=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    limit=st.none() | st.integers(1, 3),
    resume_after=st.none() | st.integers(1, 3),
)
def test_the_steps_and_spending_kept_are_those_the_log_says(
    turns: list[int], limit: int | None, resume_after: int | None
) -> None:
    """Steps are counted from ``dsh_agent_step_start``, spending from the events observed:
    after every turn (and across a resume) both are what a replay of the log finds."""

    async def scenario() -> None:
        store = MemoryStore()
        config = {"max_steps_per_turn": limit, "prices": {"m": {"input": 1.0, "output": 2.0}}}
        h, plugin = await make({k: v for k, v in config.items() if v is not None}, store)
        script = [
            reply for calls in turns for reply in [*endless_tool_loop(calls), text_response("ok")]
        ]
        h.llm.register_adapter(["m"], ScriptedAdapter(script))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="s")
        for number in range(len(turns)):
            if number == resume_after:
                await h.close()
                h, plugin = await make({k: v for k, v in config.items() if v is not None}, store)
                answered = len(data_of(agent.session.events, AssistantMessage))
                h.llm.register_adapter(["m"], ScriptedAdapter(script[answered:]))
                agent = await h.agent_loop.resume("s", AgentOptions(model="m"))
                assert plugin.spent("s") == replayed(plugin, agent.session)
            agent.send(f"turn {number}")
            await agent.wait_idle()
            assert plugin.spent("s") == replayed(plugin, agent.session)
        await h.close()

    asyncio.run(scenario())
