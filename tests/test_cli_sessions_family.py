"""``dsh sessions show`` links a parent session and its sub-agents' sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dsh import AgentOptions, Harness
from dsh.cli import main
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.values._chunks import StreamChunk
from dsh.values._rare_events import SubagentStart
from dsh.values._request import LlmRequest
from tests.helpers import data_of

pytestmark = pytest.mark.usefixtures("cli_workdir")


class Models:
    """The lead plays a script; the sub-agent (session ``lead.task-...``) answers ``child``."""

    def __init__(self) -> None:
        task = {"description": "look", "prompt": "look around"}
        self.lead = ScriptedAdapter([tool_call_response("c1", "task", task), text_response("ok")])

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        if (request.session_id or "").startswith("lead.task-"):
            for chunk in text_response("child"):
                yield chunk
            return
        async for chunk in self.lead.stream(request):
            yield chunk


async def run_lead() -> str:
    """A lead agent that delegates once, stored through the default (JSONL) store."""
    async with Harness() as h:
        h.llm.register_adapter(["m"], Models())
        agent = h.agent_loop.create("lead", AgentOptions(model="m"), session_id="lead-session")
        agent.send("go")
        await agent.wait_idle()
        return data_of(agent.session.events, SubagentStart)[0].session_id


def test_show_links_parent_and_children(capsys: pytest.CaptureFixture[str]) -> None:
    child = asyncio.run(run_lead())
    assert main(["sessions", "show", "lead-session"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"child:  {child} (agent lead.task-1, completed)"
    assert main(["sessions", "show", child]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "parent: lead-session (agent lead, turn 1, step 1, call c1)"
    assert not any(line.startswith("child:") for line in lines)


def test_a_running_child_and_a_child_made_without_a_call() -> None:
    from dsh.loop._family import family_lines
    from dsh.values._events import SessionEvent
    from dsh.values._rare_events import SubagentParent, SubagentStart

    events = [
        SessionEvent("subagent/parent", 0, 0.0, SubagentParent("p", "p-s", 2, 3)),
        SessionEvent("subagent/start", 1, 0.0, SubagentStart("c", "c-s", 2, 3)),
    ]
    assert family_lines(events) == [
        "parent: p-s (agent p, turn 2, step 3)",
        "child:  c-s (agent c, running)",
    ]
    assert family_lines([]) == []
