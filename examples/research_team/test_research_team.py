"""The research team on a scripted model: the lead delegates two questions in one step, the
researchers (sub-agents with their profile) answer, and the lead's report comes back typed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from research_team import CONFIG, Report, research

from dsh import Harness
from dsh.plugin import LlmRequest, StreamChunk, SubagentEnd, ToolResultEvent, text_of
from dsh.testing import MemoryStore, ScriptedAdapter, text_response, tool_calls_response
from dsh.testing import tool_call_response as tool_call
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.subagents import SubagentsPlugin

REPORT: dict[str, Any] = {
    "topic": "the Oslo metro",
    "findings": ["It opened in 1966.", "It has five lines."],
    "summary": "An old metro, still growing.",
}


class Team:
    """Model ``m``: the lead (the run's own session) plays ``lead``; the researchers (sessions
    of sub-agents, ``run.task-N``) answer from ``facts``."""

    def __init__(self) -> None:
        questions = [
            (
                "q1",
                "task",
                {"description": "age", "prompt": "When did it open?", "agent": "researcher"},
            ),
            (
                "q2",
                "task",
                {"description": "size", "prompt": "How many lines?", "agent": "researcher"},
            ),
        ]
        self.lead = ScriptedAdapter(
            [tool_calls_response(questions), tool_call("r", "final_result", REPORT)]
        )
        self.facts = {"When did it open?": "In 1966.", "How many lines?": "Five."}
        self.researched: list[LlmRequest] = []

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        if not (request.session_id or "").startswith("run.task-"):
            async for chunk in self.lead.stream(request):
                yield chunk
            return
        self.researched.append(request)
        await asyncio.sleep(0)
        for chunk in text_response(self.facts[text_of(request.messages[0].content)]):
            yield chunk

    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["m"], self)


async def test_the_team_writes_a_typed_report() -> None:
    team, store = Team(), MemoryStore()
    harness = Harness(
        [team, store, SubagentsPlugin(), PermissionsPlugin()], CONFIG, load_entrypoints=False
    )
    result = await research("the Oslo metro", model="m", harness=harness)
    assert result.output == Report(**REPORT) and result.ok
    # The run's usage counts the lead's two model calls and each researcher's one.
    assert result.usage.input_tokens == 4 * 10
    # The researchers got their profile's prompt and no tools; the lead saw their answers.
    assert all((r.system or "").startswith("You are a careful researcher") for r in team.researched)
    assert all(r.tools == () for r in team.researched)
    lead_log = store.stored[result.session_id]
    answers = [text_of(e.data.content) for e in lead_log if isinstance(e.data, ToolResultEvent)]
    assert sorted(answers[:2]) == ["Five.", "In 1966."]
    assert "In 1966." in str(team.lead.requests[1].messages)
    ends = [e.data for e in lead_log if isinstance(e.data, SubagentEnd)]
    assert [e.outcome for e in ends] == ["completed", "completed"]
    assert all(store.parents[e.session_id] == result.session_id for e in ends)
