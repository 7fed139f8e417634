"""Deferred approvals in one process: a call that needs approval parks the turn, and
``agent.decide`` resumes it; a parked session survives its harness (the in-memory store stands
for the disk). The two-process and SIGKILL tests are in ``test_approvals_processes.py``."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, AlreadyDecided, DshError, Harness, PendingApproval, hookimpl
from dsh.loop._loop import LoopAgent
from dsh.loop._recovery import ParkedStep, closing_events, parked_step
from dsh.testing import MemoryStore, ScriptedAdapter, text_response, tool_calls_response
from dsh.tools._registry import Tool, ToolExecution, ToolOutcome
from dsh.values._approval import summarize_arguments
from dsh.values._content import Text, ToolCall
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnCompleted,
    TurnEnd,
    TurnInterrupted,
    TurnStart,
    UserMessage,
)
from dsh.values._rare_events import ApprovalDecided, ApprovalRequested
from dsh.values._request import ToolSchema
from dsh_plugins.permissions import PermissionsPlugin
from tests.helpers import data_of, kinds

SESSION = "a-session"


class Tools:
    """``touch`` runs commands (so it asks in the default mode), ``look`` only reads; each run
    is recorded. Both may run beside other calls."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

    def register(self, harness: Harness) -> None:
        harness.tools.register(Tool(ToolSchema("touch", "t"), self._touch, effect="execute"))
        harness.tools.register(Tool(ToolSchema("look", "l"), self._look, effect="read"))
        safe = Tool(ToolSchema("touch_safe", "t"), self._touch, True, True, "execute")
        harness.tools.register(safe)
        harness.tools.register(Tool(ToolSchema("wait", "w"), self._wait, None, True, "read"))

    async def _touch(self, args: Any, execution: ToolExecution) -> str:
        self.runs.append(execution.call_id)
        return f"touched {args.get('path', '')}"

    async def _look(self, args: Any, execution: ToolExecution) -> str:
        self.runs.append(execution.call_id)
        return "seen"

    async def _wait(self, args: Any, execution: ToolExecution) -> str:
        await asyncio.Event().wait()
        return "never"


class Observer:
    """Sets ``requested`` at the first ``approval/requested`` and ``ended`` at each turn end."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.ended = asyncio.Event()

    @hookimpl
    def dsh_session_event(self, session: Any, event: SessionEvent) -> None:
        if isinstance(event.data, ApprovalRequested):
            self.requested.set()

    @hookimpl
    def dsh_agent_turn_end(self, agent: Any, turn: int, reason: Any) -> None:
        self.ended.set()


class Env:
    def __init__(self, store: MemoryStore, tools: Tools, permissions: dict[str, Any]) -> None:
        self.store = store
        self.tools = tools
        self.permissions = permissions
        self.adapters: list[ScriptedAdapter] = []
        self.observer = Observer()

    async def harness(self, script: list[Any], plugins: tuple[object, ...] = ()) -> Harness:
        config = {"permissions": self.permissions}
        harness = Harness(
            load_entrypoints=False,
            plugins=[self.store, PermissionsPlugin, self.observer, *plugins],
            config=config,
        )
        await harness.start()
        self.tools.register(harness)
        adapter = ScriptedAdapter(script)
        self.adapters.append(adapter)
        harness.llm.register_adapter(["m"], adapter)
        return harness


@pytest.fixture
def permissions() -> dict[str, Any]:
    return {"approval": "defer"}


@pytest.fixture
def env(permissions: dict[str, Any]) -> Env:
    return Env(MemoryStore(), Tools(), permissions)


def calls(*names: str) -> list[Any]:
    return tool_calls_response([(f"c{n}", name, {"path": f"f{n}"}) for n, name in enumerate(names)])


async def parked(env: Env, *names: str, answer: str = "done") -> tuple[Harness, LoopAgent]:
    harness = await env.harness([calls(*names), text_response(answer)])
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
    agent.send("go")
    await agent.wait_idle()
    return harness, agent


def results(events: Any) -> dict[str, ToolResultEvent]:
    return {r.call_id: r for r in data_of(events, ToolResultEvent)}


def busy(agent: LoopAgent) -> bool:
    """Whether the agent is not idle (a function: an assertion on ``agent.idle`` would narrow
    it for the type checker, and the one after a decision that wakes the turn flip it)."""
    return not agent.idle


def status(agent: LoopAgent) -> str:
    """The agent's status, read afresh (not narrowed by an earlier assertion on it)."""
    return agent.status


def last_turn_end(agent: LoopAgent) -> TurnEnd:
    return data_of(agent.session.events, TurnEnd)[-1]


async def test_a_call_that_needs_approval_parks_the_turn_and_decide_resumes_it(env: Env) -> None:
    harness, agent = await parked(env, "look", "touch", "look")
    assert agent.status == "waiting" and agent.idle
    assert env.tools.runs == ["c0", "c2"]  # the calls that need no approval ran
    [pending] = agent.pending_approvals()
    requested = next(e for e in agent.session.events if isinstance(e.data, ApprovalRequested))
    assert pending == PendingApproval(
        SESSION,
        "a",
        "c1",
        "touch",
        '{"path": "f1"}',
        "execute",
        "mode",
        'touch runs commands and the permissions mode is "workspace-write"',
        requested.time,
    )
    assert pending.deadline is None
    assert env.store.written(agent.session) == len(agent.session)  # checkpointed
    assert not data_of(agent.session.events, TurnEnd)
    assert "c1" not in results(agent.session.events)
    await agent.decide("c1", allow=True)
    assert busy(agent)  # the turn runs again
    await agent.wait_idle()
    assert env.tools.runs == ["c0", "c2", "c1"]
    assert status(agent) == "idle" and agent.pending_approvals() == []
    assert last_turn_end(agent).reason == TurnCompleted()
    tail = kinds(agent.session.events)[-9:]
    assert tail == [
        "approval/decided", "tool/call", "tool/result", "step/end",
        "step/start", "chunks", "assistant/message", "step/end", "turn/end",
    ]  # fmt: skip
    [decided] = data_of(agent.session.events, ApprovalDecided)[-1:]
    assert decided == ApprovalDecided("c1", "touch", True, "approver", "allowed")
    # The model got every result, the parked one too.
    sent = env.adapters[0].requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "user", "user", "user"]
    await harness.close()


async def test_a_denied_call_tells_the_model_the_reason(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    await agent.decide("c0", allow=False, reason="not on a Friday")
    await agent.wait_idle()
    assert env.tools.runs == []
    result = results(agent.session.events)["c0"]
    assert (result.is_error, result.code) == (True, "DENIED")
    [block] = result.content
    assert isinstance(block, Text) and "not on a Friday" in block.text
    assert last_turn_end(agent).reason == TurnCompleted()
    await harness.close()


async def test_two_deciders_get_one_winner(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    outcomes = await asyncio.gather(
        agent.decide("c0", allow=True), agent.decide("c0", allow=False), return_exceptions=True
    )
    assert outcomes[0] is None
    assert isinstance(outcomes[1], AlreadyDecided)
    assert str(outcomes[1]) == (
        "call 'c0' of session 'a-session' was already decided: allowed by approver (allowed)"
    )
    await agent.wait_idle()
    assert env.tools.runs == ["c0"]
    with pytest.raises(AlreadyDecided):
        await agent.decide("c0", allow=True)
    with pytest.raises(DshError, match=r"no call 'nope' waits for approval .* \(waiting: none\)"):
        await agent.decide("nope", allow=True)
    await harness.close()


async def test_a_parked_turn_survives_its_harness_and_continues_in_the_next(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    with pytest.raises(DshError, match=r"waiting: c0\)"):
        await agent.decide("c9", allow=True)
    await harness.close()  # the process ends: the turn stays open, nothing more is logged
    stored = env.store.stored[SESSION]
    assert stored[-1].type == "approval/requested"
    assert parked_step(stored) == ParkedStep(1, 1, (ToolCall("c0", "touch", '{"path": "f0"}'),))
    assert closing_events(stored) == []

    harness = await env.harness([text_response("after")])
    agent = await harness.agent_loop.resume(SESSION, AgentOptions(model="m"))
    [pending] = agent.pending_approvals()
    assert pending.call_id == "c0"
    await agent.wait_idle()
    assert agent.status == "waiting"
    await agent.decide("c0", allow=True)
    await agent.wait_idle()
    assert env.tools.runs == ["c0"]
    assert last_turn_end(agent).reason == TurnCompleted()
    assert [t.turn for t in data_of(agent.session.events, TurnEnd)] == [1]
    await harness.close()


async def test_a_step_waits_until_each_of_its_parked_calls_is_decided(env: Env) -> None:
    harness, agent = await parked(env, "touch", "touch")
    assert [p.call_id for p in agent.pending_approvals()] == ["c0", "c1"]
    await agent.decide("c1", allow=False)
    await asyncio.sleep(0)  # the step wakes, and waits again
    assert env.tools.runs == [] and agent.status == "waiting"
    await agent.decide("c0", allow=True)
    await agent.wait_idle()
    assert env.tools.runs == ["c0"]
    assert results(agent.session.events)["c1"].code == "DENIED"
    await harness.close()


async def test_a_parked_session_that_cannot_be_flushed_keeps_what_was_checkpointed(
    permissions: dict[str, Any],
) -> None:
    from tests.test_recovery import FullDisk

    env = Env(FullDisk(), Tools(), permissions)
    harness, agent = await parked(env, "touch")
    assert isinstance(env.store, FullDisk)
    env.store.full = {"flush"}
    await agent.dispose()  # logged as a warning: the requests were checkpointed already
    assert env.store.stored[SESSION][-1].type == "approval/requested"
    env.store.full = set()
    await harness.close()


async def test_a_decision_before_the_resumed_agent_runs_is_not_lost(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    await harness.close()
    harness = await env.harness([text_response("after")])
    agent = await harness.agent_loop.resume(SESSION, AgentOptions(model="m"))
    await agent.decide("c0", allow=True)  # before the driver started
    await agent.wait_idle()
    assert env.tools.runs == ["c0"]
    assert agent.status == "idle"
    await harness.close()


@pytest.mark.parametrize("permissions", [{"approval": "defer", "approval_timeout_s": 0}])
async def test_a_call_past_its_timeout_is_denied_with_its_own_code(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    assert agent.status == "idle"  # never waited: the deadline had passed
    result = results(agent.session.events)["c0"]
    assert result.code == "APPROVAL_TIMEOUT"
    [decided] = data_of(agent.session.events, ApprovalDecided)
    assert (decided.allowed, decided.by, decided.reason) == (
        False,
        "timeout",
        "no decision within 0 s",
    )
    [requested] = data_of(agent.session.events, ApprovalRequested)
    assert requested.timeout_s == 0
    assert env.tools.runs == []
    await harness.close()


@pytest.mark.parametrize("permissions", [{"approval": "defer", "approval_timeout_s": 3600}])
async def test_a_timeout_is_reckoned_from_the_request_after_a_resume(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    [pending] = agent.pending_approvals()
    assert pending.deadline == pending.requested_at + 3600
    await harness.close()
    env.observer.ended.clear()
    harness = await env.harness([text_response("after")])
    agent = await harness.agent_loop.resume(SESSION, AgentOptions(model="m"))
    agent._approvals._clock = lambda: pending.requested_at + 3600  # an hour later
    await env.observer.ended.wait()
    assert results(agent.session.events)["c0"].code == "APPROVAL_TIMEOUT"
    await harness.close()


async def test_an_abort_while_waiting_ends_the_parked_calls(env: Env) -> None:
    harness, agent = await parked(env, "touch")
    agent.abort("changed my mind")
    assert not agent.idle  # busy until the aborted turn has ended
    await agent.wait_idle()
    assert agent.status == "idle"
    assert results(agent.session.events)["c0"].code == "ABORTED_BEFORE_DISPATCH"
    assert agent.pending_approvals() == []
    assert env.tools.runs == []
    await harness.close()


async def test_a_parked_call_in_a_batch_is_ended_when_the_batch_is_aborted(env: Env) -> None:
    harness = await env.harness([calls("touch_safe", "wait")])
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
    agent.send("go")
    await env.observer.requested.wait()
    agent.abort()
    await agent.wait_idle()
    found = results(agent.session.events)
    assert found["c0"].code == "ABORTED_BEFORE_DISPATCH"
    assert found["c1"].code == "ABORTED"
    await harness.close()


async def test_a_failed_run_of_an_allowed_call_ends_the_calls_after_it(
    permissions: dict[str, Any],
) -> None:
    from tests.test_recovery import FullDisk

    env = Env(FullDisk(), Tools(), permissions)
    harness, agent = await parked(env, "touch", "touch")
    # Both decided at once; then the disk fills before the first call's re-dispatch is saved.
    agent.session.append(ApprovalDecided("c0", "touch", True, "approver", "yes"))
    agent.session.append(ApprovalDecided("c1", "touch", True, "approver", "yes"))
    assert isinstance(env.store, FullDisk)
    env.store.full = {"checkpoint"}
    env.observer.ended.clear()
    agent._approvals._decided.set()
    await env.observer.ended.wait()
    found = results(agent.session.events)
    assert found["c0"].code == found["c1"].code == "ABORTED_BEFORE_DISPATCH"
    assert env.tools.runs == []
    env.store.full = set()
    await harness.close()


@pytest.mark.parametrize("permissions", [{"approval": "deny"}])
async def test_approval_deny_refuses_without_asking(env: Env) -> None:
    class Approver:
        asked = 0

        @hookimpl
        def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
            Approver.asked += 1
            return True

    harness = await env.harness([calls("touch"), text_response("ok")], (Approver(),))
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
    agent.send("go")
    await agent.wait_idle()
    result = results(agent.session.events)["c0"]
    assert result.code == "DENIED" and Approver.asked == 0
    [block] = result.content
    assert isinstance(block, Text) and 'approval = "deny"' in block.text
    assert data_of(agent.session.events, ApprovalDecided)[0].by == "setting"
    await harness.close()


async def test_defer_still_asks_a_host_that_answers(env: Env) -> None:
    class Approver:
        @hookimpl
        def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
            return True

    harness = await env.harness([calls("touch"), text_response("ok")], (Approver(),))
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
    agent.send("go")
    await agent.wait_idle()
    assert env.tools.runs == ["c0"] and agent.status == "idle"
    assert data_of(agent.session.events, ApprovalRequested) == []
    await harness.close()


async def test_a_call_without_an_agent_cannot_park(env: Env) -> None:
    harness = await env.harness([])
    outcome = await harness.tools.execute(ToolExecution("c", "touch", "{}"))
    assert (outcome.code, outcome.approval) == ("DENIED", None)
    await harness.close()


async def test_a_sub_agents_parked_call_is_seen_and_decided_from_its_parent(env: Env) -> None:
    harness = await env.harness([calls("touch"), text_response("child done")])
    parent = harness.agent_loop.create("p", AgentOptions(model="m"))
    harness.agent_loop.create("idle-child", AgentOptions(model="m"), parent=parent)
    child = harness.agent_loop.create("c", AgentOptions(model="m"), parent=parent)
    child.send("go")
    await child.wait_idle()
    [pending] = parent.pending_approvals()
    assert (pending.agent_id, pending.call_id) == ("c", "c0")
    await parent.decide("c0", allow=True)
    await child.wait_idle()
    assert env.tools.runs == ["c0"]
    assert parent.pending_approvals() == []
    await harness.close()


async def test_a_step_budget_counts_the_parked_turn_across_a_resume(
    permissions: dict[str, Any],
) -> None:
    from dsh_plugins.budgets import BudgetExceeded, BudgetsPlugin

    env = Env(MemoryStore(), Tools(), permissions)
    config = {"budgets": {"max_steps_per_turn": 1}}

    async def with_budget(script: list[Any]) -> Harness:
        harness = Harness(
            load_entrypoints=False,
            plugins=[env.store, PermissionsPlugin, BudgetsPlugin, env.observer],
            config={"permissions": permissions, **config},
        )
        await harness.start()
        env.tools.register(harness)
        harness.llm.register_adapter(["m"], ScriptedAdapter(script))
        return harness

    harness = await with_budget([calls("touch")])
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
    agent.send("go")
    await agent.wait_idle()
    assert agent.status == "waiting"
    await harness.close()
    harness = await with_budget([text_response("never asked")])
    agent = await harness.agent_loop.resume(SESSION, AgentOptions(model="m"))
    await agent.decide("c0", allow=True)
    await agent.wait_idle()
    assert env.tools.runs == ["c0"]
    # The parked step was the turn's first: the budget stops the turn before a second one.
    [exceeded] = data_of(agent.session.events, BudgetExceeded)
    assert (exceeded.turn, exceeded.limit) == (1, "max_steps_per_turn")
    assert last_turn_end(agent).reason.type == "completed"
    await harness.close()


async def test_plan_mode_denies_what_would_be_parked(env: Env) -> None:
    harness = await env.harness([calls("touch"), text_response("planned")])
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
    agent.set_permission_mode("plan")
    agent.send("go")
    await agent.wait_idle()
    assert agent.status == "idle" and agent.pending_approvals() == []
    assert results(agent.session.events)["c0"].code == "DENIED"
    assert data_of(agent.session.events, ApprovalRequested) == []
    await harness.close()


def test_a_deferred_outcome_reads_as_an_error_elsewhere() -> None:
    from dsh.values._approval import ApprovalNeeded

    outcome = ToolOutcome.deferred(ApprovalNeeded("mode", "why", 5.0))
    assert (outcome.is_error, outcome.code) == (True, "APPROVAL_PENDING")
    assert outcome.approval == ApprovalNeeded("mode", "why", 5.0)


def test_summaries_are_cut() -> None:
    assert summarize_arguments("{}") == "{}"
    long = json.dumps({"x": "y" * 500})
    assert len(summarize_arguments(long)) == 200 and summarize_arguments(long).endswith("…")


# -- recovery of a parked turn ----------------------------------------------------------------


def log(*data: Any) -> list[SessionEvent]:
    return [SessionEvent(d.type, seq, 0.0, d) for seq, d in enumerate(data)]


def opening(*ids: str) -> list[Any]:
    content = tuple(ToolCall(i, "t", "{}") for i in ids)
    return [
        UserMessage((Text("go"),)),
        TurnStart(1, UserMessage((Text("go"),)).source),
        StepStart(1, 1),
        AssistantMessage(1, 1, content),
    ]


def requested(call_id: str) -> ApprovalRequested:
    return ApprovalRequested(1, 1, call_id, "t", "{}", "execute", "mode", "why")


def test_an_allowed_call_redispatched_before_a_crash_is_unknown_and_the_rest_stay_parked() -> None:
    events = log(
        *opening("a", "b", "c"),
        ToolCallEvent(1, 1, "a", "t", "{}"),
        requested("a"),
        ToolCallEvent(1, 1, "b", "t", "{}"),
        ApprovalDecided("b", "t", False, "rule", "a policy's decision on a call it runs"),
        requested("b"),
        ApprovalDecided("z", "t", True, "approver", "a call of no open turn"),
        ApprovalDecided("a", "t", True, "approver", "ok"),
        ToolCallEvent(1, 1, "a", "t", "{}"),
    )
    closing = closing_events(events)
    results = [(t, d.call_id, d.code) for t, d in closing if isinstance(d, ToolResultEvent)]
    assert len(results) == len(closing)
    assert results == [
        ("tool/result", "a", "TOOL_OUTCOME_UNKNOWN"),
        ("tool/result", "c", "ABORTED_BEFORE_DISPATCH"),
    ]
    closed = events + log(*(d for _, d in closing))
    step = parked_step(closed)
    assert step is not None and [c.id for c in step.calls] == ["b"]


def test_an_allowed_call_not_yet_redispatched_runs_on_resume() -> None:
    events = log(
        *opening("a"),
        ToolCallEvent(1, 1, "a", "t", "{}"),
        requested("a"),
        ApprovalDecided("a", "t", False, "approver", "no"),
    )
    assert closing_events(events) == []
    assert parked_step(events) == ParkedStep(1, 1, (ToolCall("a", "t", "{}"),))


def test_parked_calls_outside_an_open_step_are_closed() -> None:
    events = log(*opening("a"), ToolCallEvent(1, 1, "a", "t", "{}"), requested("a"), StepEnd(1, 1))
    assert [type(d).__name__ for _, d in closing_events(events)] == ["ToolResultEvent", "TurnEnd"]
    assert closing_events(events)[-1][1] == TurnEnd(1, TurnInterrupted())
    assert parked_step(events) is None
    assert parked_step(log(*opening("a"))) is None


# -- any sequence of decisions, duplicates, restarts and expiries ------------------------------

Op = tuple[str, int, bool]  # ("decide", call index (3: unknown), allow) | ("restart", 0, expired)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 3),
    st.lists(
        st.one_of(
            st.tuples(st.just("decide"), st.integers(0, 3), st.booleans()),
            st.tuples(st.just("restart"), st.just(0), st.booleans()),
        ),
        max_size=8,
    ),
)
def test_every_parked_call_is_decided_once_and_runs_at_most_once(count: int, ops: list[Op]) -> None:
    asyncio.run(_play(count, ops))


async def _play(count: int, ops: list[Op]) -> None:
    env = Env(MemoryStore(), Tools(), {"approval": "defer", "approval_timeout_s": 3600})
    names = ["touch"] * count
    harness, agent = await parked(env, *names)
    ids = [f"c{n}" for n in range(count)]
    outcome: dict[str, str] = {}  # call id -> "allowed" | "denied" | "timeout"
    for op, index, flag in ops:
        if op == "restart":
            await harness.close()
            harness = await env.harness([text_response("after")])
            agent = await harness.agent_loop.resume(SESSION, AgentOptions(model="m"))
            waiting = agent.pending_approvals()
            if flag and waiting:
                later = max(p.requested_at for p in waiting) + 3600
                agent._approvals._clock = functools.partial(float, later)
                outcome.update((i, "timeout") for i in ids if i not in outcome)
            await agent.wait_idle()
            continue
        call_id = ids[index] if index < count else "unknown"
        if call_id in outcome:
            with pytest.raises(AlreadyDecided):
                await agent.decide(call_id, flag)
        elif call_id == "unknown":
            with pytest.raises(DshError) as raised:
                await agent.decide(call_id, flag)
            assert not isinstance(raised.value, AlreadyDecided)
        else:
            await agent.decide(call_id, flag)
            outcome[call_id] = "allowed" if flag else "denied"
        await agent.wait_idle()
    for call_id in ids:
        if call_id not in outcome:
            await agent.decide(call_id, True)
            outcome[call_id] = "allowed"
    await agent.wait_idle()
    assert agent.status == "idle" and agent.pending_approvals() == []
    events = agent.session.events
    allowed = [i for i in ids if outcome[i] == "allowed"]
    assert sorted(env.tools.runs) == allowed  # each allowed call ran once, no other
    found = results(events)
    codes = {"allowed": None, "denied": "DENIED", "timeout": "APPROVAL_TIMEOUT"}
    assert {i: found[i].code for i in ids} == {i: codes[outcome[i]] for i in ids}
    decisions = [d.call_id for d in data_of(events, ApprovalDecided)]
    assert sorted(decisions) == ids  # one decision per call
    assert [e.reason for e in data_of(events, TurnEnd)] == [TurnCompleted()]
    await harness.close()
