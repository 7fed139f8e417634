"""The ``task`` tool and the ``parent=`` seam: delegation, parallel children, failures, abort,
dispose, the depth limit, budgets, profiles and crash recovery."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import pytest

from dsh import AgentOptions, DshError, Harness
from dsh.loop._family import unfinished_children
from dsh.testing import (
    MemoryStore,
    ScriptedAdapter,
    ScriptEntry,
    error_response,
    hang,
    text_response,
    tool_call_response,
    tool_calls_response,
)
from dsh.testing.stores import crash
from dsh.values._chunks import StreamChunk
from dsh.values._content import AgentSource, text_of
from dsh.values._events import (
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnInterrupted,
    UserMessage,
)
from dsh.values._rare_events import SubagentEnd, SubagentParent
from dsh.values._request import LlmRequest
from dsh_plugins.budgets import BudgetsPlugin
from dsh_plugins.subagents import TASK, SubagentsPlugin
from tests.helpers import data_as, data_of, of_type


@attrs.frozen
class Review:
    verdict: str


def prompt_of(request: LlmRequest) -> str:
    return text_of(request.messages[0].content)


def echo(request: LlmRequest) -> list[StreamChunk]:
    return text_response(f"did {prompt_of(request)}")


class Models:
    """Model ``m``: requests of the top-level agent play ``parent``; requests of sub-agents
    (their session ids start with ``main.``) play ``child`` (default: echo the prompt)."""

    def __init__(self, parent: Sequence[ScriptEntry], child: Sequence[ScriptEntry] = ()) -> None:
        self.parent = ScriptedAdapter(parent)
        self.child = ScriptedAdapter(list(child) or [echo] * 10)

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        child = (request.session_id or "").startswith("main.")
        return (self.child if child else self.parent).stream(request)

    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["m"], self)


def task(call_id: str, prompt: str, **extra: str) -> tuple[str, str, dict[str, Any]]:
    return (call_id, TASK, {"description": prompt[:20], "prompt": prompt, **extra})


def one_task(prompt: str, **extra: str) -> list[StreamChunk]:
    return tool_calls_response([task("c1", prompt, **extra)])


def make(models: Models, config: dict[str, Any] | None = None, *extra: object) -> Harness:
    settings = {"permissions": {"mode": "full"}, **(config or {})}
    return Harness([models, SubagentsPlugin(), *extra], settings, load_entrypoints=False)


def main(harness: Harness, **options: Any) -> Any:
    return harness.agent_loop.create("main", AgentOptions(model="m", **options))


def results(agent: Any) -> dict[str, Any]:
    return {e.call_id: e for e in data_of(agent.session.events, ToolResultEvent)}


def data(agent: Any, type_: str) -> list[Any]:
    return [e.data for e in of_type(agent.session.events, type_)]


async def test_a_parent_delegates_two_tasks_that_run_in_parallel() -> None:
    running: list[str] = []
    both = asyncio.Event()

    async def together(request: LlmRequest) -> list[StreamChunk]:
        running.append(prompt_of(request))
        if len(running) == 2:
            both.set()
        await both.wait()  # returns only if the other child runs at the same time
        return echo(request)

    models = Models(
        [tool_calls_response([task("c1", "a"), task("c2", "b")]), text_response("all done")],
        [together, together],
    )
    async with make(models) as harness:
        parent = main(harness)
        parent.send("split the work")
        await asyncio.wait_for(parent.wait_idle(), 10)
        assert {k: text_of(v.content) for k, v in results(parent).items()} == {
            "c1": "did a",
            "c2": "did b",
        }
        starts, ends = data(parent, "subagent/start"), data(parent, "subagent/end")
        assert sorted(s.call_id for s in starts) == ["c1", "c2"]
        assert {(e.outcome, e.model, e.usage.input_tokens) for e in ends} == {
            ("completed", "m", 10)
        }
        assert data(parent, "turn/end")[-1].reason == TurnCompleted()
        assert harness.agents.list() == [parent]  # the children are disposed
        # A child's tools are the parent's minus task; it sees only its own prompt.
        child_request = models.child.requests[0]
        assert TASK not in [t.name for t in child_request.tools]
        assert len(child_request.messages) == 1
        assert models.parent.requests[0].tools[0].name == TASK


async def test_a_child_session_records_its_parent() -> None:
    store = MemoryStore()
    async with make(Models([one_task("look"), text_response("ok")]), None, store) as h:
        parent = main(h)
        parent.send("go")
        await parent.wait_idle()
        (start,) = data(parent, "subagent/start")
    child_events = store.stored[start.session_id]
    assert child_events[0].data == SubagentParent("main", parent.session.id, 1, 1, "c1")
    assert store.parents[start.session_id] == parent.session.id
    prompt = data_as(child_events[1], UserMessage)
    assert prompt.source == AgentSource("main")  # the prompt came from the parent


async def test_a_failing_child_is_an_error_result_and_the_parent_goes_on() -> None:
    models = Models(
        [one_task("fail"), text_response("I will do it myself")],
        [error_response("BOOM", "the model is down")],
    )
    async with make(models) as harness:
        parent = main(harness)
        parent.send("go")
        await parent.wait_idle()
        result = results(parent)["c1"]
        assert result.is_error and result.code == "SUBAGENT_FAILED"
        assert "ended error: the model is down" in text_of(result.content)
        assert data(parent, "subagent/end")[0].outcome == "error"
        assert data(parent, "turn/end")[-1].reason == TurnCompleted()


async def test_aborting_the_parent_aborts_the_child() -> None:
    models = Models([one_task("forever")], [hang()])
    async with make(models) as harness:
        parent = main(harness)
        parent.send("go")
        await models.child.started.wait()
        parent.abort("user pressed ctrl-c")
        await asyncio.wait_for(parent.wait_idle(), 10)
        (end,) = data(parent, "subagent/end")
        assert end.outcome == "aborted"
        assert isinstance(data(parent, "turn/end")[-1].reason, TurnAborted)
        assert harness.agents.list() == [parent]


async def test_the_depth_limit_refuses_deeper_nesting() -> None:
    config = {"agent_loop": {"max_depth": 1}}
    models = Models([one_task("delegate again"), text_response("fine")])
    async with make(models, config) as harness:
        parent = main(harness)
        child = harness.agent_loop.create("main.child", AgentOptions(), parent=parent)
        with pytest.raises(DshError, match=r"nest at most 1 deep \(agent_loop.max_depth\)"):
            harness.agent_loop.create("main.grandchild", AgentOptions(), parent=child)
        family = harness.family
        assert (family.depth_of(parent), family.depth_of(child)) == (0, 1)
        assert family.children_of(parent) == [child]
        await child.dispose()
        assert family.children_of(parent) == [] and family.parent_of(child) is None


async def test_the_task_tool_reports_the_depth_limit() -> None:
    config = {"agent_loop": {"max_depth": 0}}
    async with make(Models([one_task("x"), text_response("ok")]), config) as harness:
        parent = main(harness)
        parent.send("go")
        await parent.wait_idle()
        result = results(parent)["c1"]
        assert result.code == "SUBAGENT_REFUSED" and "at most 0 deep" in text_of(result.content)


async def test_disposing_the_parent_disposes_its_children() -> None:
    async with make(Models([hang()], [hang()])) as harness:
        parent = main(harness)
        child = harness.agent_loop.create("main.c", AgentOptions(model="m"), parent=parent)
        child.send("work")
        await harness.llm.adapter_for("m").child.started.wait()  # type: ignore[attr-defined]
        await parent.dispose()
        assert child.status == "disposed"
        (end,) = data(parent, "subagent/end")
        assert (end.outcome, end.usage, end.call_id) == ("disposed", None, None)
        with pytest.raises(DshError, match="is disposed and cannot have children"):
            harness.agent_loop.create("main.late", AgentOptions(), parent=parent)


async def test_an_aborted_parent_turn_aborts_children_made_through_the_seam() -> None:
    async with make(Models([hang()], [hang()])) as harness:
        parent = main(harness)
        child = harness.agent_loop.create("main.c", AgentOptions(model="m"), parent=parent)
        child.send("work")
        parent.send("work too")
        models: Models = harness.llm.adapter_for("m")  # type: ignore[assignment]
        await models.child.started.wait()
        await models.parent.started.wait()
        parent.abort()
        await parent.wait_idle()
        await child.wait_idle()
        assert isinstance(data(child, "turn/end")[-1].reason, TurnAborted)
        idle = harness.agent_loop.create("main.idle", AgentOptions(), parent=parent)
        await idle.dispose()
        assert data(parent, "subagent/end")[-1].outcome == "none"


async def test_a_childs_usage_counts_in_the_parents_budgets() -> None:
    budgets = BudgetsPlugin()
    config = {"budgets": {"max_tokens_per_turn": 30}}  # the parent alone stays below it
    models = Models([one_task("spend"), text_response("unreached")])
    async with make(models, config, budgets) as harness:
        parent = main(harness)
        parent.send("go")
        await parent.wait_idle()
        spent = budgets.spent(parent.session.id)
        assert spent is not None and spent.tokens == 15 + 10 + len("did spend")
        (exceeded,) = data(parent, "budget/exceeded")
        assert exceeded.limit == "max_tokens_per_turn"
        assert len(models.parent.requests) == 1  # stopped before another step


async def test_a_configured_profile_runs_the_task() -> None:
    config = {
        "agent_loop": {
            "agents": [
                {
                    "id": "reviewer",
                    "system_prompt": "You review.",
                    "tools": [],
                    "output_type": f"{__name__}:Review",
                }
            ]
        }
    }
    models = Models(
        [one_task("review it", agent="reviewer"), text_response("ok")],
        [tool_call_response("r1", "final_result", {"verdict": "good"})],
    )
    async with make(models, config) as harness:
        parent = main(harness)
        parent.send("go")
        await parent.wait_idle()
        assert json.loads(text_of(results(parent)["c1"].content)) == {"verdict": "good"}
        request = models.child.requests[0]
        assert request.system is not None and request.system.startswith("You review.")
        assert [t.name for t in request.tools] == ["final_result"]


async def test_an_unknown_profile() -> None:
    config = {"agent_loop": {"agents": [{"id": "typed"}]}}
    models = Models([one_task("x", agent="nobody"), text_response("ok")])
    async with make(models, config) as harness:
        parent = main(harness)
        parent.send("go")
        await parent.wait_idle()
        result = results(parent)["c1"]
        assert result.code == "BAD_PROFILE"
        assert "no agent profile 'nobody' in [[agent_loop.agents]] (configured: typed)" in (
            text_of(result.content)
        )


async def test_a_typed_child_without_a_valid_answer_fails_the_task() -> None:
    config = {"agent_loop": {"agents": [{"id": "r", "output_type": f"{__name__}:Review"}]}}
    models = Models([one_task("x", agent="r"), text_response("ok")], [text_response("meh")] * 3)
    async with make(models, config) as harness:
        parent = main(harness)
        parent.send("go")
        await parent.wait_idle()
        result = results(parent)["c1"]
        assert result.code == "SUBAGENT_FAILED" and "gave no valid Review" in text_of(
            result.content
        )


async def test_a_crash_with_a_running_child_is_resumed() -> None:
    store = MemoryStore()
    models = Models([one_task("long")], [hang()])
    harness = make(models, None, store)
    await harness.start()
    parent = main(harness)
    parent.send("go")
    await models.child.started.wait()
    child_id = data(parent, "subagent/start")[0].session_id
    # What a killed process leaves on disk: what was stored when it died. (The simulated crash
    # below cancels tasks, whose cleanup a real kill would never run.)
    on_disk = {sid: list(events) for sid, events in store.stored.items()}
    await crash(harness)
    store.stored = on_disk

    after = Models([text_response("resumed")], [text_response("child resumed")])
    async with make(after, None, store) as again:
        resumed = await again.agent_loop.resume(parent.session.id, AgentOptions(model="m"))
        end = next(e for e in data(resumed, "subagent/end"))
        assert end == SubagentEnd("main.task-1", child_id, "interrupted", call_id="c1")
        assert results(resumed)["c1"].code == "TOOL_OUTCOME_UNKNOWN"
        assert data(resumed, "turn/end")[-1].reason == TurnInterrupted()
        await resumed.dispose()
        child = await again.agent_loop.resume(child_id, AgentOptions(model="m"))
        assert data(child, "turn/end")[-1].reason == TurnInterrupted()
        assert data_as(child.session.events[0], SubagentParent).call_id == "c1"


def test_unfinished_children_outside_an_open_turn() -> None:
    from dsh.loop._recovery import closing_events
    from dsh.values._events import SessionEvent
    from dsh.values._rare_events import SubagentStart

    start = SessionEvent("subagent/start", 0, 0.0, SubagentStart("c", "c-s", 1, 1))
    assert closing_events([start]) == unfinished_children([start])
    assert unfinished_children([start])[0][1].outcome == "interrupted"


async def test_the_task_tool_needs_an_agent() -> None:
    from dsh.tools._registry import ToolExecution

    plugin = SubagentsPlugin()
    async with Harness([plugin], load_entrypoints=False) as harness:
        tool = harness.tools.get(TASK)
        assert tool is not None and tool.concurrency_safe
        outcome = await harness.tools.execute(
            ToolExecution("c1", TASK, json.dumps({"description": "d", "prompt": "p"}))
        )
        assert outcome.code == "TOOL_ERROR" and "runs only for an agent" in text_of(outcome.content)


async def test_a_guard_refuses_children_until_it_is_removed() -> None:
    async with make(Models([one_task("x"), text_response("ok")])) as harness:
        parent = main(harness)
        remove = harness.family.add_guard(lambda agent: f"{agent.id} is busy")
        parent.send("go")
        await parent.wait_idle()
        result = results(parent)["c1"]
        assert result.code == "SUBAGENT_REFUSED"
        assert "agent 'main.task-1' cannot start under 'main': main is busy" in text_of(
            result.content
        )
        assert data(parent, "subagent/start") == []
        remove()
        child = harness.agent_loop.create("main.c", AgentOptions(), parent=parent)
        assert harness.family.children_of(parent) == [child]
