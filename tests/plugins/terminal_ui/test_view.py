"""The host plugins show and answer for their own agent only."""

from __future__ import annotations

import io

from dsh import AgentOptions, Harness, ToolExecution
from dsh.app._usage import UsageMeter
from dsh.testing import ScriptedAdapter, text_response
from dsh_plugins.terminal_ui.render import Lines, Renderer
from dsh_plugins.terminal_ui.style import Style
from dsh_plugins.terminal_ui.view import AgentView, ApprovalPolicy, JsonFeed


async def test_other_agents_are_left_alone() -> None:
    out, feed_out = io.StringIO(), io.StringIO()
    lines = Lines(out, Style(False))
    view = AgentView(Renderer(lines, lines), UsageMeter({}), show_usage=True)
    feed = JsonFeed(Lines(feed_out, Style(False)), None)  # type: ignore[arg-type]
    asked: list[str] = []

    async def decide(execution: ToolExecution, reason: str) -> bool:
        asked.append(execution.name)
        return True

    policy = ApprovalPolicy(decide)
    async with Harness(load_entrypoints=False, plugins=[view, feed, policy]) as harness:
        harness.llm.register_adapter(["m"], ScriptedAdapter([text_response("not mine")]))
        mine = harness.agent_loop.create("mine", AgentOptions("m"))
        other = harness.agent_loop.create("other", AgentOptions("m"))
        for watcher in (view, feed, policy):
            watcher.watch(mine)
        other.send("hi")
        await other.wait_idle()
        unwatched = ToolExecution("c", "tool", "{}", other)
        assert await harness.hooks.tools_approve(unwatched, "why") is None
        assert await harness.hooks.tools_approve(ToolExecution("c", "t", "{}"), "why") is None
        assert await harness.hooks.tools_approve(ToolExecution("c", "t", "{}", mine), "") is True
    assert out.getvalue() == feed_out.getvalue() == "" and asked == ["t"]
