"""Budgets bound a family of agents: a sub-agent's usage counts against every ancestor's
budget as it is billed, a sub-agent cannot start once an ancestor has nothing left, and a
family stays within its limit plus one model call per agent under fan-out and nesting.

Real agents and the real ``task`` tool in a real harness; only the model is scripted. Every
model call here bills 15 tokens (``tool_calls_response``: 10 in, 5 out) unless it answers text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.session._session import Session
from dsh.testing import text_response, tool_call_response, tool_calls_response
from dsh.values._agent import Agent
from dsh.values._chunks import StreamChunk, TokenUsage
from dsh.values._content import ToolResult, text_of
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    ToolResultEvent,
    TurnCompleted,
    TurnEnd,
)
from dsh.values._rare_events import SubagentEnd, SubagentParent
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.budgets import BudgetExceeded, BudgetsPlugin
from dsh_plugins.subagents import TASK, SubagentsPlugin
from tests.helpers import data_of

CALL = 15  # tokens billed by each tool-calling model call


def task(call_id: str, **extra: str) -> tuple[str, str, dict[str, Any]]:
    return (call_id, TASK, {"description": "work", "prompt": f"work {call_id}", **extra})


def loop_forever(request: LlmRequest) -> list[StreamChunk]:
    """A child that never finishes by itself: it calls ``noop`` at every step."""
    return tool_call_response("n", "noop", {})


class Family:
    """Model ``m``: the top-level agent ``main`` plays ``parent`` (a list of script entries, one
    per call); a sub-agent plays ``child`` and a sub-agent's sub-agent ``grandchild`` (each a
    function of the request, called for every model call). Records every agent made."""

    def __init__(self, parent: list[Any], child: Any = loop_forever, grandchild: Any = None):
        self.parent = parent
        self.child = child
        self.grandchild = grandchild or loop_forever
        self.agents: dict[str, Agent] = {}
        self.parent_requests: list[LlmRequest] = []

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        depth = (request.session_id or "").count(".task-")
        if depth == 0:
            self.parent_requests.append(request)
            chunks = self.parent.pop(0)
        else:
            chunks = (self.child if depth == 1 else self.grandchild)(request)
        for chunk in chunks:
            yield chunk

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["m"], self)

    @hookimpl
    def dsh_agent_created(self, agent: Agent) -> None:
        self.agents[agent.id] = agent

    def spent(self) -> int:
        """Every token billed by every agent of the family, from their own logs."""
        return sum(
            (m.usage.input_tokens + m.usage.output_tokens) if m.usage else 0
            for agent in self.agents.values()
            for m in data_of(agent.session.events, AssistantMessage)
        )

    def model_calls(self) -> int:
        return sum(len(data_of(a.session.events, AssistantMessage)) for a in self.agents.values())


def make(family: Family, budgets: BudgetsPlugin, **agent_loop: Any) -> Harness:
    config = {
        "budgets": {"max_tokens_per_turn": 100},
        "permissions": {"mode": "full"},
        "agent_loop": agent_loop,
    }
    return Harness([family, SubagentsPlugin(), budgets], config, load_entrypoints=False)


async def noop(args: Any, execution: Any) -> str:
    return "ok"


async def run_main(harness: Harness, prompt: str = "go") -> Agent:
    harness.tools.register(Tool(ToolSchema("noop", "does nothing"), noop, effect="read"))
    parent = harness.agent_loop.create("main", AgentOptions(model="m"))
    parent.send(prompt)
    await parent.wait_idle()
    return parent


def results(agent: Agent) -> list[ToolResultEvent]:
    return data_of(agent.session.events, ToolResultEvent)


def end_reason(agent: Agent) -> Any:
    return data_of(agent.session.events, TurnEnd)[-1].reason


async def test_twenty_children_in_parallel_stay_within_the_parents_limit() -> None:
    family = Family([tool_calls_response([task(f"c{n}") for n in range(20)])])
    budgets = BudgetsPlugin()
    async with make(family, budgets, max_parallel_tools=20) as harness:
        parent = await run_main(harness)
        spent = budgets.spent(parent.session.id)
        assert spent is not None and spent.tokens == family.spent()
    agents = len(family.agents)
    assert agents == 21  # every child started: the parent had spent 15 when the step began
    assert family.spent() <= 100 + agents * CALL  # was 2,115: 15 + 20 children x 105
    assert len(family.parent_requests) == 1
    reason = end_reason(parent)
    assert isinstance(reason, TurnCompleted)
    assert (reason.reason or "").startswith("budget: max_tokens_per_turn reached (")
    for n in range(20):
        child = family.agents[f"main.task-{n + 1}"]
        [exceeded] = data_of(child.session.events, BudgetExceeded)
        assert (exceeded.limit, exceeded.agent_id) == ("max_tokens_per_turn", "main")
        assert end_reason(child).reason.startswith(
            "budget: max_tokens_per_turn of agent 'main' reached ("
        )


async def test_children_that_would_start_once_the_budget_is_spent_are_refused() -> None:
    family = Family(
        [tool_calls_response([task(f"c{n}") for n in range(20)]), text_response("I see")]
    )
    budgets = BudgetsPlugin()
    async with make(family, budgets) as harness:  # 8 tool calls at a time
        parent = await run_main(harness)
        started = len(family.agents) - 1
        assert started == 8  # the first 8 spent the budget; the 12 others could not start
        assert family.spent() <= 100 + (started + 1) * CALL
        refused = [r for r in results(parent) if r.code == "SUBAGENT_REFUSED"]
        assert len(refused) == 12
        message = text_of(refused[0].content)
        assert message.startswith("Error: agent 'main.task-9' cannot start under 'main': budget: ")
        assert "max_tokens_per_turn of agent 'main' reached (" in message
        assert (end_reason(parent).reason or "").startswith("budget: max_tokens_per_turn reached (")
        # The parent's model reads why when it goes on (a new turn has a new turn budget).
        parent.send("what happened?")
        await parent.wait_idle()
    seen = [
        block
        for message in family.parent_requests[-1].messages
        for block in message.content
        if isinstance(block, ToolResult)
    ]
    assert sum("cannot start under 'main': budget" in text_of(b.content) for b in seen) == 12
    assert end_reason(parent) == TurnCompleted()


async def test_nested_children_count_against_every_ancestor_as_they_spend() -> None:
    profiles = [{"id": "lead", "tools": [TASK, "noop"]}]  # a child that delegates again

    def lead(request: LlmRequest) -> list[StreamChunk]:
        return tool_calls_response([task("g1"), task("g2")])

    family = Family([tool_calls_response([task("c1", agent="lead")])], child=lead)
    budgets = BudgetsPlugin()
    async with make(family, budgets, agents=profiles) as harness:
        parent = await run_main(harness)
        spent = budgets.spent(parent.session.id)
        assert spent is not None and spent.tokens == family.spent()
    assert sorted(family.agents) == [
        "lead",  # the profile's own agent, made when the harness started
        "main",
        "main.task-1",
        "main.task-1.task-2",
        "main.task-1.task-3",
    ]
    assert family.spent() <= 100 + 4 * CALL
    grandchild = family.agents["main.task-1.task-2"]
    assert end_reason(grandchild).reason.startswith(
        "budget: max_tokens_per_turn of agent 'main' reached ("
    )
    assert (end_reason(parent).reason or "").startswith("budget: max_tokens_per_turn reached (")
    # The lead's own turn counts what its children spent: it reached its own limit too.
    assert end_reason(family.agents["main.task-1"]).reason.startswith(
        "budget: max_tokens_per_turn reached ("
    )


async def test_a_grandchild_cannot_start_when_its_grandparent_has_nothing_left() -> None:
    profiles = [{"id": "lead", "tools": [TASK, "noop"]}]
    calls = iter(range(100))

    def lead(request: LlmRequest) -> list[StreamChunk]:
        # Spend the family's budget on its own, then try to delegate.
        if next(calls) < 5:
            return tool_call_response("n", "noop", {})
        return tool_calls_response([task("g1")])

    family = Family([tool_calls_response([task("c1", agent="lead")])], child=lead)
    budgets = BudgetsPlugin()
    async with make(family, budgets, agents=profiles) as harness:
        await run_main(harness)
    lead_agent = family.agents["main.task-1"]
    [*_, refused] = results(lead_agent)
    assert refused.code == "SUBAGENT_REFUSED"
    assert "cannot start under 'main.task-1': budget: max_tokens_per_turn of agent 'main'" in (
        text_of(refused.content)
    )
    assert "main.task-1.task-2" not in family.agents


def logged(seq: int, data: Any) -> SessionEvent:
    return SessionEvent(data.type, seq, 0.0, data)


def test_what_is_billed_where_when_a_family_is_only_partly_known() -> None:
    plugin = BudgetsPlugin()
    parent, child, orphan = Session("p"), Session("c"), Session("o")
    for session in (parent, child, orphan):
        plugin.dsh_session_created(session)
    plugin.dsh_session_event(child, logged(0, SubagentParent("main", "p", 1, 1, "t1")))
    plugin.dsh_session_event(orphan, logged(0, SubagentParent("gone", "unseen", 1, 1)))
    usage = TokenUsage(10, 5)
    plugin.dsh_session_event(child, logged(1, AssistantMessage(1, 1, (), usage, "m")))
    plugin.dsh_session_event(orphan, logged(1, AssistantMessage(1, 1, (), usage, "m")))

    def tokens(session_id: str) -> int:
        spent = plugin.spent(session_id)
        assert spent is not None
        return spent.tokens

    assert (tokens("p"), tokens("c"), tokens("o")) == (15, 15, 15)  # an unseen parent: no link
    # The end of a child billed as it spent bills nothing more; a child not seen spending (a
    # log written before a restart) bills its parent at its end.
    plugin.dsh_session_event(parent, logged(1, SubagentEnd("main.c", "c", "completed", usage)))
    plugin.dsh_session_event(parent, logged(2, SubagentEnd("old", "o2", "completed", usage)))
    assert tokens("p") == 30
    plugin.dsh_session_closed(parent)  # a child that outlives its parent's session bills itself
    plugin.dsh_session_event(child, logged(2, AssistantMessage(1, 2, (), usage, "m")))
    assert tokens("c") == 30 and plugin.spent("p") is None
