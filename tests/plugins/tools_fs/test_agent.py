"""End to end: a scripted model edits a file in a temporary workspace through the tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.values._content import Text, ToolResult
from dsh.values._events import ToolResultEvent, TurnCompleted
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.tools_fs import FsToolsPlugin
from dsh_plugins.tools_shell import ShellToolPlugin

PLUGINS = [FsToolsPlugin, ShellToolPlugin, PermissionsPlugin]


def script() -> list[Any]:
    return [
        tool_call_response("c1", "read_file", {"path": "greet.py"}, text="Let me look."),
        tool_call_response(
            "c2", "edit_file", {"path": "greet.py", "old": '"hello"', "new": '"hello, world"'}
        ),
        text_response("Done: the greeting now says hello, world."),
    ]


async def run_agent(workspace: Path, config: dict[str, Any]) -> tuple[Any, ScriptedAdapter]:
    adapter = ScriptedAdapter(script())
    async with Harness(load_entrypoints=False, plugins=PLUGINS, config=config) as harness:
        harness.llm.register_adapter(["scripted"], adapter)
        options = AgentOptions(model="scripted", workspace=str(workspace))
        agent = harness.agent_loop.create("editor", options)
        agent.send("Make the greeting say hello, world.")
        await agent.wait_idle()
    return agent, adapter


def results(agent: Any) -> list[ToolResultEvent]:
    return [e.data for e in agent.session.events if e.type == "tool/result"]


async def test_an_agent_edits_a_file_in_its_workspace(tmp_path: Path) -> None:
    (tmp_path / "greet.py").write_text('print("hello")\n')
    agent, adapter = await run_agent(tmp_path, {})
    assert (tmp_path / "greet.py").read_text() == 'print("hello, world")\n'
    read, edit = results(agent)
    assert (read.is_error, read.content) == (False, (Text('     1\tprint("hello")'),))
    assert (edit.is_error, edit.content) == (
        False,
        (Text("edited greet.py: replaced 1 match at line 1"),),
    )
    assert agent.session.events[-1].data.reason == TurnCompleted()
    # The model saw each result before its next step.
    last_request = adapter.requests[-1].messages
    seen = [b for m in last_request for b in m.content if isinstance(b, ToolResult)]
    assert [r.tool_call_id for r in seen] == ["c1", "c2"]
    assert {t.name for t in adapter.requests[0].tools} >= {"read_file", "edit_file", "shell"}


async def test_in_read_only_mode_the_edit_is_denied_and_the_file_kept(tmp_path: Path) -> None:
    (tmp_path / "greet.py").write_text('print("hello")\n')
    agent, _ = await run_agent(tmp_path, {"permissions": {"mode": "read-only"}})
    assert (tmp_path / "greet.py").read_text() == 'print("hello")\n'
    read, edit = results(agent)
    assert not read.is_error
    assert (edit.is_error, edit.code) == (True, "DENIED")
