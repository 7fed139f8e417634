"""Plan mode: only read-only tools run, the model is told it plans, and an approval (a mode
change, logged in the session) lets the agent carry the plan out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh import DshError, Harness, Tool
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.values._content import text_of
from dsh.values._events import ToolResultEvent, TurnEnd, TurnError
from dsh.values._rare_events import PermissionModeChange
from dsh.values._request import ToolSchema
from dsh_plugins.permissions import PLAN_NOTE, PermissionsPlugin
from dsh_plugins.permissions.policy import PermissionsConfig, Rule, decide, summary
from tests.helpers import data_of


def tool(name: str, effect: Any, ran: list[str]) -> Tool:
    async def run(args: Any, execution: Any) -> str:
        ran.append(name)
        return f"{name} done"

    return Tool(ToolSchema(name, name), run, effect=effect)


async def test_plan_mode_refuses_a_write_and_continues_after_approval() -> None:
    ran: list[str] = []
    adapter = ScriptedAdapter(
        [
            tool_call_response("c1", "look", {}),
            tool_call_response("c2", "edit", {}),
            text_response("Plan: 1. edit the file."),
            tool_call_response("c3", "edit", {}),
            text_response("Done."),
        ]
    )
    config = {"permissions": {"mode": "plan"}}
    async with Harness([PermissionsPlugin()], config, load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], adapter)
        harness.tools.register(tool("look", "read", ran))
        harness.tools.register(tool("edit", "write", ran))
        agent = harness.agent_loop.create("main", harness_options())
        agent.send("fix it")
        await agent.wait_idle()
        assert ran == ["look"]
        refused = data_of(agent.session.events, ToolResultEvent)[-1]
        assert refused.code == "DENIED" and "plan mode: only read-only tools run" in text_of(
            refused.content
        )
        assert PLAN_NOTE in (adapter.requests[0].system or "")
        agent.set_permission_mode("workspace-write")
        agent.send("approved")
        await agent.wait_idle()
        assert ran == ["look", "edit"]
        assert PLAN_NOTE not in (adapter.requests[-1].system or "")
        modes = data_of(agent.session.events, PermissionModeChange)
        assert modes == [PermissionModeChange("workspace-write")]


def harness_options() -> Any:
    from dsh import AgentOptions

    return AgentOptions(model="m")


async def test_an_agent_can_enter_plan_mode_and_bad_modes_are_refused() -> None:
    ran: list[str] = []
    adapter = ScriptedAdapter([tool_call_response("c1", "edit", {}), text_response("plan")])
    async with Harness([PermissionsPlugin()], load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], adapter)
        harness.tools.register(tool("edit", "write", ran))
        agent = harness.agent_loop.create("main", harness_options())
        with pytest.raises(DshError, match="unknown permission mode 'yolo'"):
            agent.set_permission_mode("yolo")  # type: ignore[arg-type]
        agent.set_permission_mode("plan")
        agent.send("go")
        await agent.wait_idle()
        assert ran == []


async def test_a_logged_mode_this_build_does_not_know_runs_nothing() -> None:
    ran: list[str] = []
    adapter = ScriptedAdapter([tool_call_response("c1", "edit", {}), text_response("done")])
    async with Harness([PermissionsPlugin()], load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], adapter)
        harness.tools.register(tool("edit", "write", ran))
        agent = harness.agent_loop.create("main", harness_options())
        agent.session.append(PermissionModeChange("yolo"))  # as a newer build might log it
        agent.send("go")
        await agent.wait_idle()
        assert ran == [] and adapter.requests == []
        [end] = data_of(agent.session.events, TurnEnd)
        assert isinstance(end.reason, TurnError)
        assert "permission mode 'yolo', which this build does not know" in (
            end.reason.failure.message
        )


def test_no_rule_lets_anything_but_a_read_run_in_plan_mode(tmp_path: Path) -> None:
    config = PermissionsConfig(mode="plan", rules=(Rule(tool="*", action="allow"),))
    assert decide(config, "edit", "write", {}, tmp_path).action == "deny"
    assert decide(config, "custom", "other", {}, tmp_path).by == "plan"
    assert decide(config, "look", "read", {}, tmp_path).action == "allow"
    assert summary(config, "edit", "write") == "deny (plan mode)"
    assert summary(PermissionsConfig(mode="plan"), "look", "read") == "allow (plan mode)"
