"""A sub-agent runs under the stricter of its parent's effective permission mode and its own
(its profile's ``permission_mode``, else the configured one): real agents, the real ``task``
tool, the real file tools writing into a temporary workspace; only the model is scripted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from dsh import AgentOptions, Harness, hookimpl
from dsh.plugin import ApprovalDecided
from dsh.testing import ScriptedAdapter, ScriptEntry, text_response, tool_call_response
from dsh.values._agent import Agent
from dsh.values._chunks import StreamChunk
from dsh.values._content import text_of
from dsh.values._events import ToolResultEvent, TurnCompleted, TurnEnd
from dsh.values._rare_events import PermissionModeChange
from dsh.values._request import LlmRequest
from dsh_plugins.permissions import PLAN_NOTE, PermissionsPlugin
from dsh_plugins.subagents import TASK, SubagentsPlugin
from dsh_plugins.tools_fs import FsToolsPlugin
from tests.helpers import data_of

ALLOW_TASK = {"tool": TASK, "action": "allow"}


class Family:
    """Model ``m`` (the top-level agent ``main`` plays ``parent``, every sub-agent ``child``)
    and a record of every agent made, so that a disposed child's log can still be read."""

    def __init__(self, parent: Sequence[ScriptEntry], child: Sequence[ScriptEntry]) -> None:
        self.parent = ScriptedAdapter(parent)
        self.child = ScriptedAdapter(child)
        self.agents: dict[str, Agent] = {}

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        child = (request.session_id or "").startswith("main.")
        return (self.child if child else self.parent).stream(request)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["m"], self)

    @hookimpl
    def dsh_agent_created(self, agent: Agent) -> None:
        self.agents[agent.id] = agent


def write(call_id: str, path: str) -> list[StreamChunk]:
    return tool_call_response(call_id, "write_file", {"path": path, "content": "written\n"})


def delegate(prompt: str, **extra: str) -> list[StreamChunk]:
    return tool_call_response("t1", TASK, {"description": "write", "prompt": prompt, **extra})


def make(family: Family, permissions: dict[str, Any], **agent_loop: Any) -> Harness:
    config = {"permissions": permissions, "agent_loop": agent_loop}
    plugins = [family, SubagentsPlugin(), PermissionsPlugin(), FsToolsPlugin()]
    return Harness(plugins, config, load_entrypoints=False)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def results(agent: Agent) -> list[ToolResultEvent]:
    return data_of(agent.session.events, ToolResultEvent)


def decisions(agent: Agent) -> list[ApprovalDecided]:
    return data_of(agent.session.events, ApprovalDecided)


async def test_a_child_cannot_write_when_its_parent_was_switched_to_read_only(
    tmp_path: Path,
) -> None:
    family = Family(
        [delegate("write out.txt"), text_response("the child could not write")],
        [write("w1", "out.txt"), text_response("denied")],
    )
    permissions = {"mode": "workspace-write", "rules": [ALLOW_TASK]}
    async with make(family, permissions) as harness:
        parent = harness.agent_loop.create("main", AgentOptions(model="m", workspace=str(tmp_path)))
        parent.set_permission_mode("read-only")  # at runtime, after the harness started
        parent.send("have a sub-agent write out.txt")
        await parent.wait_idle()
    assert not (tmp_path / "out.txt").exists()
    child = family.agents["main.task-1"]
    [task] = decisions(parent)
    assert (task.name, task.allowed, task.by) == (TASK, True, "rule")  # the rule lets it start
    [denied] = results(child)
    assert denied.code == "DENIED"
    assert (
        'write_file changes files and the permissions mode is "read-only" (the mode of agent '
        "'main', which its sub-agents cannot exceed), which does not allow it"
    ) in text_of(denied.content)
    assert [(d.name, d.allowed, d.by) for d in decisions(child)] == [("write_file", False, "mode")]
    assert data_of(parent.session.events, TurnEnd)[-1].reason == TurnCompleted()


async def test_the_mode_is_the_parents_current_one_and_nested_children_inherit_it(
    tmp_path: Path,
) -> None:
    """Through the seam: a child (and its own child) follows its parent's switches while it
    lives, both ways, and never runs above its ancestors."""
    family = Family([], [write(f"w{n}", f"{n}.txt") for n in range(1, 4)])
    for n in range(1, 4):
        family.child.script.insert(2 * n - 1, text_response("ok"))
    async with make(family, {"mode": "workspace-write"}) as harness:
        options = AgentOptions(model="m", workspace=str(tmp_path))
        parent = harness.agent_loop.create("main", options)
        child = harness.agent_loop.create("main.c", options, parent=parent)
        grandchild = harness.agent_loop.create("main.c.g", options, parent=child)
        child.send("write 1.txt")
        await child.wait_idle()
        parent.set_permission_mode("read-only")
        grandchild.set_permission_mode("full")  # its own mode cannot lift it above its parents
        grandchild.send("write 2.txt")
        await grandchild.wait_idle()
        parent.set_permission_mode("workspace-write")
        child.send("write 3.txt")
        await child.wait_idle()
    assert names(tmp_path) == ["1.txt", "3.txt"]
    [denied] = results(grandchild)
    assert denied.code == "DENIED" and "the mode of agent 'main'" in text_of(denied.content)


async def test_a_stricter_profile_keeps_its_child_stricter(tmp_path: Path) -> None:
    family = Family(
        [delegate("write out.txt", agent="reviewer"), delegate("write it", agent="free")],
        [write("w1", "out.txt"), text_response("denied"), write("w2", "b.txt"), text_response("")],
    )
    family.parent.script.append(text_response("done"))
    profiles = [
        {"id": "reviewer", "permission_mode": "read-only"},
        {"id": "free", "permission_mode": "full"},  # no higher than its parent's
    ]
    async with make(family, {"mode": "workspace-write"}, agents=profiles) as harness:
        parent = harness.agent_loop.create("main", AgentOptions(model="m", workspace=str(tmp_path)))
        parent.send("review, then write")
        await parent.wait_idle()
        configured = harness.agents.get("reviewer")
        assert configured is not None  # the harness made the profile's agent at start
        assert data_of(configured.session.events, PermissionModeChange) == [
            PermissionModeChange("read-only")
        ]
    assert names(tmp_path) == ["b.txt"]
    reviewer, free = family.agents["main.task-1"], family.agents["main.task-2"]
    assert data_of(reviewer.session.events, PermissionModeChange) == [
        PermissionModeChange("read-only")
    ]
    [denied] = results(reviewer)
    assert denied.code == "DENIED"
    assert 'the permissions mode is "read-only", which does not allow it' in text_of(denied.content)
    assert [r.code for r in results(free)] == [None]  # "full" ran as the parent's workspace-write
    assert [(d.allowed, d.reason) for d in decisions(free)] == [
        (
            True,
            'write_file changes files and the permissions mode is "workspace-write" (the mode '
            "of agent 'main', which its sub-agents cannot exceed)",
        ),
    ]


async def test_plan_mode_still_holds_for_the_task_tool_and_for_children(tmp_path: Path) -> None:
    family = Family([delegate("write out.txt"), text_response("my plan")], [write("w1", "x.txt")])
    family.child.script.append(text_response("planned"))
    permissions = {"mode": "workspace-write", "rules": [ALLOW_TASK]}
    async with make(family, permissions) as harness:
        options = AgentOptions(model="m", workspace=str(tmp_path))
        parent = harness.agent_loop.create("main", options)
        parent.set_permission_mode("plan")
        parent.send("plan it")
        await parent.wait_idle()
        [refused] = results(parent)  # no rule lets a task start while planning
        assert refused.code == "DENIED" and "plan mode" in text_of(refused.content)
        assert "main.task-1" not in family.agents
        child = harness.agent_loop.create("main.c", options, parent=parent)  # through the seam
        child.send("write x.txt")
        await child.wait_idle()
        [denied] = results(child)
        assert denied.code == "DENIED" and "plan mode" in text_of(denied.content)
        assert PLAN_NOTE in (family.child.requests[0].system or "")
    assert names(tmp_path) == []
