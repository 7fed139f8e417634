"""Deferred approvals and the ``task`` tool: a sub-agent that parks a call holds its parent
``waiting`` (the call is listed and decided from the parent), the parent's ``task`` call goes on
with the child's answer once it is decided, and a parent closed meanwhile leaves the child's call
parked in the child's session, to be decided there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh import AgentOptions, Harness, hookimpl
from dsh.loop._loop import LoopAgent
from dsh.testing import MemoryStore, ScriptedAdapter, text_response, tool_calls_response
from dsh.values._chunks import StreamChunk
from dsh.values._content import text_of
from dsh.values._events import (
    SessionEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnEnd,
)
from dsh.values._rare_events import ApprovalRequested, SubagentStart
from dsh.values._request import LlmRequest
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.subagents import SubagentsPlugin
from tests.helpers import data_of
from tests.test_approvals import Tools

LEAD = "lead-session"


def tasks(*prompts: str) -> list[Any]:
    """The lead's first step: one ``task`` call per prompt, in parallel."""
    return tool_calls_response(
        [(f"t{n}", "task", {"description": p, "prompt": p}) for n, p in enumerate(prompts)]
    )


class Models:
    """The lead plays ``lead``; the sub-agent given prompt ``p`` plays ``children[p]``."""

    def __init__(self, lead: list[Any], children: dict[str, list[Any]]) -> None:
        self.lead = ScriptedAdapter(lead)
        self.children = {prompt: ScriptedAdapter(script) for prompt, script in children.items()}

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        adapter = self.lead
        if (request.session_id or "").startswith("lead.task-"):
            first = request.messages[0].content[0]
            adapter = self.children[getattr(first, "text", "")]
        async for chunk in adapter.stream(request):
            yield chunk


class World:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.tools = Tools()
        self.requests = 0
        self.more = asyncio.Event()

    @hookimpl
    def dsh_session_event(self, session: Any, event: SessionEvent) -> None:
        if isinstance(event.data, ApprovalRequested):
            self.requests += 1
            self.more.set()

    async def parked(self, calls: int) -> None:
        """Wait until ``calls`` calls have been parked in all."""
        while self.requests < calls:
            self.more.clear()
            await self.more.wait()

    async def harness(self, models: Models | None = None) -> Harness:
        plugins = [self.store, PermissionsPlugin, SubagentsPlugin(), self]
        config = {"permissions": {"approval": "defer"}}
        harness = Harness(load_entrypoints=False, plugins=plugins, config=config)
        await harness.start()
        self.tools.register(harness)
        if models is not None:
            harness.llm.register_adapter(["m"], models)
        return harness


@pytest.fixture
def world() -> World:
    return World()


def touching(path: str, answer: str) -> list[Any]:
    """A child that calls ``touch`` (which needs approval) once, then answers."""
    return [tool_calls_response([(f"c-{path}", "touch", {"path": path})]), text_response(answer)]


async def lead_parked(world: World, models: Models) -> tuple[Harness, LoopAgent]:
    harness = await world.harness(models)
    lead = harness.agent_loop.create("lead", AgentOptions(model="m"), session_id=LEAD)
    lead.send("go")
    await lead.wait_idle()
    return harness, lead


def status(agent: Any) -> str:
    """The agent's status now (a function, so that a type checker does not hold it to what
    an earlier comparison found)."""
    return str(agent.status)


def answer(lead: LoopAgent, call_id: str) -> str:
    return text_of(lead_result(lead, call_id).content)


def lead_result(lead: LoopAgent, call_id: str) -> ToolResultEvent:
    [result] = [r for r in data_of(lead.session.events, ToolResultEvent) if r.call_id == call_id]
    return result


async def test_a_parked_sub_agent_holds_its_parent_waiting_until_decided(world: World) -> None:
    models = Models([tasks("x"), text_response("all done")], {"x": touching("x", "child done")})
    harness, lead = await lead_parked(world, models)
    assert status(lead) == "waiting"
    [pending] = lead.pending_approvals()
    assert (pending.agent_id, pending.call_id, pending.name) == ("lead.task-1", "c-x", "touch")
    await lead.decide("c-x", allow=True)
    assert status(lead) == "running"  # busy from the decision on, as after its own decide
    await lead.wait_idle()
    assert status(lead) == "idle"
    assert world.tools.runs == ["c-x"]
    assert answer(lead, "t0") == "child done"
    assert data_of(lead.session.events, TurnEnd)[-1].reason == TurnCompleted()
    await harness.close()


async def test_two_parked_sub_agents_both_need_a_decision(world: World) -> None:
    children = {"x": touching("x", "x done"), "y": touching("y", "y done")}
    models = Models([tasks("x", "y"), text_response("all done")], children)
    harness, lead = await lead_parked(world, models)
    await world.parked(2)  # the second child may park after the first
    assert status(lead) == "waiting"
    assert sorted(p.call_id for p in lead.pending_approvals()) == ["c-x", "c-y"]
    await lead.decide("c-x", allow=True)
    assert status(lead) == "waiting"  # the other child still waits
    await lead.decide("c-y", allow=False, reason="not y")
    await lead.wait_idle()
    assert world.tools.runs == ["c-x"]
    assert answer(lead, "t0") == "x done"
    assert answer(lead, "t1") == "y done"
    assert status(lead) == "idle"
    await harness.close()


async def test_a_child_decided_on_its_own_sets_its_parent_running_again(world: World) -> None:
    models = Models([tasks("x"), text_response("all done")], {"x": touching("x", "child done")})
    harness, lead = await lead_parked(world, models)
    child = harness.agents.get("lead.task-1")
    assert child is not None and child.status == "waiting"
    await child.decide("c-x", allow=True)  # a host that holds the child itself
    await child.wait_idle()
    await lead.wait_idle()
    assert status(lead) == "idle" and world.tools.runs == ["c-x"]
    await harness.close()


async def test_aborting_the_parent_ends_the_parked_call_of_its_child(world: World) -> None:
    models = Models([tasks("x")], {"x": touching("x", "never")})
    harness, lead = await lead_parked(world, models)
    [start] = data_of(lead.session.events, SubagentStart)
    lead.abort("stop")
    await lead.wait_idle()
    assert status(lead) == "idle"
    assert data_of(lead.session.events, TurnEnd)[-1].reason == TurnAborted("stop")
    child_events = world.store.load(start.session_id) or []
    [child_result] = [r for r in data_of(child_events, ToolResultEvent) if r.call_id == "c-x"]
    assert child_result.code == "ABORTED_BEFORE_DISPATCH"
    assert world.tools.runs == []
    await harness.close()


async def test_closing_the_parent_leaves_the_childs_call_parked_in_its_session(
    world: World,
) -> None:
    models = Models([tasks("x")], {"x": touching("x", "child done")})
    harness, lead = await lead_parked(world, models)
    [start] = data_of(lead.session.events, SubagentStart)
    await harness.close()
    assert data_of(lead.session.events, TurnEnd)[-1].reason == TurnDisposed()
    assert lead_result(lead, "t0").is_error
    stored = world.store.load(start.session_id) or []
    assert [r.call_id for r in data_of(stored, ApprovalRequested)] == ["c-x"]
    # Another process resumes the child's session and decides there: the call runs once.
    again = await world.harness(Models([], {"x": [text_response("child done")]}))
    child = await again.agent_loop.resume(start.session_id, AgentOptions(model="m"))
    assert [p.call_id for p in child.pending_approvals()] == ["c-x"]
    await child.decide("c-x", allow=True)
    await child.wait_idle()
    assert world.tools.runs == ["c-x"]
    assert data_of(child.session.events, TurnEnd)[-1].reason == TurnCompleted()
    await again.close()


async def test_a_child_with_two_parked_calls_holds_its_parent_until_both_are_decided(
    world: World,
) -> None:
    both = tool_calls_response([("c-a", "touch", {"path": "a"}), ("c-b", "touch", {"path": "b"})])
    models = Models([tasks("x"), text_response("all done")], {"x": [both, text_response("ab")]})
    harness, lead = await lead_parked(world, models)
    assert [p.call_id for p in lead.pending_approvals()] == ["c-a", "c-b"]
    await lead.decide("c-a", allow=True)
    assert status(lead) == "waiting" and lead.idle
    await lead.decide("c-b", allow=True)
    assert status(lead) == "running"
    await lead.wait_idle()
    assert world.tools.runs == ["c-a", "c-b"] and answer(lead, "t0") == "ab"
    await harness.close()
